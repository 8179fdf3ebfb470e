package transform_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
)

// Guards the trim of a batch that a fetch returned whole although the
// position is inside it: records before the position are left out, the rest
// renumbered densely, in every codec.
func TestReencodeFrom(t *testing.T) {
	for codec := range int8(5) {
		var recs []batchtest.Record
		for i := range 5 {
			recs = append(recs, batchtest.Record{OffsetDelta: -1, TimestampDelta: int64(i), Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
		}
		b := batchtest.Build(batchtest.Spec{BaseOffset: 50, PID: 7, Codec: codec, FirstTimestamp: 1000, Records: recs})
		r := transform.NewReencoder()
		for _, tc := range []struct {
			from int64
			keys []string
		}{
			{0, []string{"k0", "k1", "k2", "k3", "k4"}},
			{50, []string{"k0", "k1", "k2", "k3", "k4"}},
			{52, []string{"k2", "k3", "k4"}},
			{54, []string{"k4"}},
		} {
			out, offs, err := r.ReencodeFrom(nil, b, -9, tc.from)
			if err != nil {
				t.Fatalf("codec %d from %d: %v", codec, tc.from, err)
			}
			if err := transform.Validate(out); err != nil {
				t.Fatal(err)
			}
			h, _ := transform.ParseHeader(out)
			if !h.Dense() || int(h.NumRecords) != len(tc.keys) || h.ProducerID != -9 || h.Compression() != codec {
				t.Fatalf("codec %d from %d: header %+v", codec, tc.from, h)
			}
			if got := keysOf(t, out, codec); fmt.Sprint(got) != fmt.Sprint(tc.keys) {
				t.Errorf("codec %d from %d: keys %v, want %v", codec, tc.from, got, tc.keys)
			}
			first := int64(50 + 5 - len(tc.keys))
			for i, o := range offs {
				if o.Delta != int32(i) || o.Source != first+int64(i) {
					t.Errorf("codec %d from %d: offset map %d = %+v", codec, tc.from, i, o)
				}
			}
		}
		if _, _, err := r.ReencodeFrom(nil, b, -9, 55); !errors.Is(err, transform.ErrEmptyBatch) {
			t.Errorf("codec %d: from past the batch: %v, want ErrEmptyBatch", codec, err)
		}
	}
}

func keysOf(t *testing.T, b []byte, codec int8) []string {
	t.Helper()
	raw, err := kgo.DefaultDecompressor().Decompress(b[transform.BatchHeaderSize:], kgo.CompressionCodecType(codec))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for len(raw) > 0 {
		var r kmsg.Record
		n := recordLen(raw)
		if err := r.ReadFrom(raw[:n]); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, string(r.Key))
		raw = raw[n:]
	}
	return keys
}

// recordLen is the encoded size of the record at the start of raw.
func recordLen(raw []byte) int {
	var v, shift uint32
	for i, c := range raw {
		v |= uint32(c&0x7f) << shift
		if c < 0x80 {
			l := int32(v>>1) ^ -int32(v&1)
			return i + 1 + int(l)
		}
		shift += 7
	}
	return len(raw)
}

// Guards the timestamp offset translation asks the destination for: the
// earliest create time of a batch's records, also when a later record is
// older than the first (a negative delta), in every codec.
func TestMinTimestamp(t *testing.T) {
	deltas := []int64{3, 0, -7, 12, 5}
	for codec := range int8(5) {
		var recs []batchtest.Record
		for i, d := range deltas {
			recs = append(recs, batchtest.Record{OffsetDelta: -1, TimestampDelta: d, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
		}
		b := batchtest.Build(batchtest.Spec{BaseOffset: 10, PID: 7, Codec: codec, FirstTimestamp: 1000, Records: recs})
		got, err := transform.NewReencoder().MinTimestamp(b)
		if err != nil || got != 993 {
			t.Errorf("codec %d: MinTimestamp = %d, %v; want 993", codec, got, err)
		}
	}
	empty := batchtest.Build(batchtest.Spec{BaseOffset: 10, PID: 7, FirstTimestamp: 1000})
	if _, err := transform.NewReencoder().MinTimestamp(empty); !errors.Is(err, transform.ErrEmptyBatch) {
		t.Errorf("batch without records: %v, want ErrEmptyBatch", err)
	}
}
