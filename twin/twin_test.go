package twin

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
)

// Guards the names the log and the scripts show for decisions.
func TestVerdictNames(t *testing.T) {
	for v, want := range map[Verdict]string{SkipEmpty: "skip", SkipDuplicate: "duplicate", NeedSalt: "salt", Forward: "forward", SkipHome: "home", SkipUnattributed: "unattributed"} {
		if got := v.String(); got != want {
			t.Errorf("verdict %d named %q, want %q", v, got, want)
		}
	}
}

// Match is the one relation by which settling, reconciliation and offset
// translation recognise the link's own batch at the destination: equal
// but for what the destination broker assigns or rewrites (base offset,
// partition leader epoch, CRC, the timestamp-type bit and max timestamp
// of a LogAppendTime batch reaching a CreateTime topic), different for
// anything a producer wrote.
func TestMatch(t *testing.T) {
	const (
		at    = transform.PosAttributes
		pid   = transform.PosProducerID
		maxTS = transform.PosMaxTimestamp
		lod   = transform.PosLastOffsetDelta
	)
	want := batchtest.Simple(0, -12345, 3, 40, 4)
	rewritten := func(edit func(b []byte)) []byte {
		b := slices.Clone(want)
		edit(b)
		return b
	}
	for _, tc := range []struct {
		name string
		got  []byte
		twin bool
	}{
		{"identical", slices.Clone(want), true},
		{"base offset and leader epoch assigned", rewritten(func(b []byte) {
			binary.BigEndian.PutUint64(b, 977)
			binary.BigEndian.PutUint32(b[transform.PosLeaderEpoch:], 8)
		}), true},
		{"stamped, max timestamp and CRC rewritten", rewritten(func(b []byte) {
			b[at+1] |= transform.AttrTimestampLogAppend
			binary.BigEndian.PutUint64(b[maxTS:], 1_800_000_000_000)
			binary.BigEndian.PutUint32(b[transform.PosCRC:], 0xdeadbeef)
		}), true},
		{"another producer ID", rewritten(func(b []byte) { b[pid+7]++ }), false},
		{"another base sequence", rewritten(func(b []byte) { b[transform.PosBaseSequence+3]++ }), false},
		{"another record byte", rewritten(func(b []byte) { b[len(b)-1]++ }), false},
		{"another codec", rewritten(func(b []byte) { b[at+1] |= 0x01 }), false},
		{"transactional", rewritten(func(b []byte) { b[at+1] |= transform.AttrTransactional }), false},
		{"another first timestamp", rewritten(func(b []byte) { b[maxTS-1]++ }), false},
		{"another last offset delta", rewritten(func(b []byte) { b[lod+3]++ }), false},
		{"shorter", want[:len(want)-1], false},
		{"a header only", want[:transform.BatchHeaderSize-1], false},
	} {
		if got := Match(want, tc.got); got != tc.twin {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.twin)
		}
	}
}
