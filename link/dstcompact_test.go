package link

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/translate"
)

// The destination changes after the link mirrored too: the mirror of a
// compacted topic is compacted by the destination's own cleaner (config
// sync gives it the source's cleanup.policy). The link goes on appending
// after the cleaner ran, the destination holds each key's latest value and
// nothing twice, and every source position translates, by the running
// link and offline, to a destination offset from which a consumer reads
// what it would have read from the mirror's offset before the compaction
// (the cleaner removes offsets, it does not move them). Before, a position
// whose mirror the cleaner had cut or removed answered ErrUntranslatable
// (120 of 157 on Kafka 4.4.0).
func TestDestinationCompacted(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "dcomp", srcTopic("kv", 1).with(compactedLaterConfig))
		// The source keeps every record (its segments do not roll);
		// the destination is the one compacted.
		f.cfg.Link.ConfigSync.Enabled = false
		kv := f.topic("kv")
		kvRounds(t, f.src, kv, 0, 10)
		l := f.start("dcomp")
		l.waitState(t, Mirroring, 60*time.Second)
		srcEnd := endOffset(t, f.src, kv, 0)
		waitCaughtUp(t, l, srcEnd, 60*time.Second)

		// The mirror as appended: source record i is destination record
		// i (both dense, nothing skipped).
		src := readPartition(t, f.src, kv, 0, true, srcEnd)
		dst := readPartition(t, f.dst, kv, 0, false, endOffset(t, f.dst, kv, 0))
		if len(src) != len(dst) {
			t.Fatalf("source holds %d records, destination %d; want the same before the compaction", len(src), len(dst))
		}
		mirror := map[int64]int64{} // source offset → destination offset, as mirrored
		for i, r := range src {
			if string(r.Key) != string(dst[i].Key) || string(r.Value) != string(dst[i].Value) {
				t.Fatalf("record %d: source %q=%q, destination %q=%q", i, r.Key, r.Value, dst[i].Key, dst[i].Value)
			}
			mirror[r.Offset] = dst[i].Offset
		}

		// The destination's cleaner compacts the mirror; on Kafka one more
		// round, mirrored, rolls the segment it skips.
		alterSettings(t, f.dst, kv, kadm.AlterConfig{Name: "cleanup.policy", Value: new("compact")},
			kadm.AlterConfig{Name: "min.cleanable.dirty.ratio", Value: new("0.01")},
			kadm.AlterConfig{Name: "min.compaction.lag.ms", Value: new("0")},
			kadm.AlterConfig{Name: "delete.retention.ms", Value: new("0")},
			kadm.AlterConfig{Name: "segment.ms", Value: new("100")})
		gappy, _ := compactSource(t, f.dst, kv, 1, func() {
			time.Sleep(300 * time.Millisecond)
			kvRounds(t, f.src, kv, 10, 11)
			waitCaughtUp(t, l, endOffset(t, f.src, kv, 0), 60*time.Second)
		})
		kvRounds(t, f.src, kv, 11, 13)
		srcEnd = endOffset(t, f.src, kv, 0)
		waitCaughtUp(t, l, srcEnd, 60*time.Second)

		// Every record appended after the compaction, in order, and each
		// key's latest value; no key and value twice.
		srcNow := readPartition(t, f.src, kv, 0, true, srcEnd)
		dstEnd := endOffset(t, f.dst, kv, 0)
		dstNow := readPartition(t, f.dst, kv, 0, false, dstEnd)
		sameLatest(t, srcNow, dstNow)
		noneTwice(t, dstNow)
		n := len(src)
		for i, r := range srcNow[n:] {
			mirror[r.Offset] = -1
			for _, d := range dstNow {
				if string(d.Key) == string(r.Key) && string(d.Value) == string(r.Value) {
					mirror[r.Offset] = d.Offset
				}
			}
			if mirror[r.Offset] < 0 {
				t.Fatalf("source record %d after the compaction (%q=%q, offset %d) is not at the destination", n+i, r.Key, r.Value, r.Offset)
			}
		}

		translatesEvery(t, f, l, kv, srcNow, dstNow, mirror, srcEnd, dstEnd, "the destination compacted %d batches with gaps", gappy)
	})
}

// translatesEvery checks that every source position of topic kv[0] up to
// srcEnd translates, by the running link l and offline, to a destination
// offset from which a consumer reads what it would have read from the
// mirror of the first record at or after it (mirror: source offset to
// destination offset, as appended; srcNow and dstNow the records both
// hold now), and that none is untranslatable. what and args end its log
// line.
func translatesEvery(t *testing.T, f *fixture, l *testLink, kv string, srcNow, dstNow []*kgo.Record, mirror map[int64]int64, srcEnd, dstEnd int64, what string, args ...any) {
	t.Helper()
	// next is the first offset from o on that the destination still
	// holds (its end if none): where a consumer positioned at o
	// begins.
	var held []int64
	for _, r := range dstNow {
		held = append(held, r.Offset)
	}
	next := func(o int64) int64 {
		i, _ := slices.BinarySearch(held, o)
		if i == len(held) {
			return dstEnd
		}
		return held[i]
	}
	offline, err := NewOffline(context.Background(), f.cfg, Deps{SourceOpts: f.src.Opts(), DestinationOpts: f.dst.Opts()})
	if err != nil {
		t.Fatal(err)
	}
	defer offline.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for name, tr := range map[string]func(int64) (translate.Result, error){
		"link":    func(p int64) (translate.Result, error) { return l.Translate(ctx, kv, 0, p) },
		"offline": func(p int64) (translate.Result, error) { return offline.Translate(ctx, kv, 0, p) },
	} {
		loud, vias := 0, map[string]int{}
		for p := int64(0); p <= srcEnd; p++ {
			want := dstEnd
			for _, r := range srcNow {
				if r.Offset >= p {
					want = mirror[r.Offset]
					break
				}
			}
			got, err := tr(p)
			switch {
			case errors.Is(err, translate.ErrUntranslatable):
				if loud++; loud == 1 {
					t.Logf("%s: translate %d: %v", name, p, err)
				}
				continue
			case err != nil:
				t.Errorf("%s: translate %d: %v", name, p, err)
				continue
			}
			vias[got.Via]++
			if next(got.DestinationOffset) != next(want) {
				t.Errorf("%s: translate %d: %d (%s), where a consumer begins at %d; the mirror of the first record from %d on was at %d, from where it begins at %d",
					name, p, got.DestinationOffset, got.Via, next(got.DestinationOffset), p, want, next(want))
			}
		}
		t.Logf("%s: %d positions, %d answered (%v), %d untranslatable; "+what,
			append([]any{name, srcEnd + 1, srcEnd + 1 - int64(loud), vias, loud}, args...)...)
		if loud > 0 {
			// A mirror the cleaner cut is the same producer batch,
			// one it removed whole lies between mirrors that
			// remain, and nothing else is in the way.
			t.Errorf("%s: %d positions untranslatable; want every one answered", name, loud)
		}
	}
}
