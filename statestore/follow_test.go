package statestore

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Guards the Follower a standby watches its link's record with (the test
// store's topic has one partition, so every record of l1 is on it): it returns
// what is committed past its offset as soon as it is committed, nothing of
// a transaction while it is open (and that transaction's records once it
// commits), and goes on from the log start when the records it would read
// next were deleted.
func TestFollower(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := begin(t, ctx, s, "l1")
	rec := func(n int64) Record {
		return Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "a", SourceNextOffset: n}}
	}
	if err := l1.Commit(ctx, Mirroring, rec(1)); err != nil {
		t.Fatal(err)
	}
	view, err := s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, next, found := view.LinkRecordAt("l1")
	if !found {
		t.Fatal("no link record replayed")
	}
	fol, err := s.Follow(ctx, p, next)
	if err != nil {
		t.Fatal(err)
	}
	decoded := func(raws []RawRecord) []Record {
		var out []Record
		for _, raw := range raws {
			r, err := Decode(raw.Key, raw.Value)
			if err != nil {
				t.Fatalf("decode %d: %v", raw.Offset, err)
			}
			if _, ok := r.Key.(LinkKey); !ok {
				out = append(out, r)
			}
		}
		return out
	}
	// Nothing new: Next waits and returns nothing.
	if got, err := fol.Next(ctx, 200*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("Next with nothing new: %v, %v", got, err)
	}

	// A commit held between its produce and its EndTxn: nothing while it
	// is open, its records once it commits.
	produced, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	l1.testBeforeEnd = func() { once.Do(func() { close(produced) }); <-release }
	done := make(chan error, 1)
	go func() { done <- l1.Commit(ctx, Mirroring, rec(2)) }()
	<-produced
	if got, err := fol.Next(ctx, 300*time.Millisecond); err != nil || len(got) != 0 {
		t.Fatalf("Next while the transaction is open: %v, %v", got, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []Record
	for end := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(end); {
		raws, err := fol.Next(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, decoded(raws)...)
	}
	if want := []Record{rec(2)}; !reflect.DeepEqual(stripOffsets(got), want) {
		t.Fatalf("after the commit: %v, want %v", describe(got), describe(want))
	}

	// The records it would read next are deleted: it goes on from the
	// log start.
	if err := l1.Commit(ctx, Mirroring, rec(3)); err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(kafkatest.Client(t, dst)).ListEndOffsets(ctx, DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(DefaultTopic, p)
	if _, err := kadm.NewClient(kafkatest.Client(t, dst)).DeleteRecords(ctx, kadm.Offsets{DefaultTopic: {p: {At: end.Offset}}}); err != nil {
		t.Fatal(err)
	}
	if err := l1.Commit(ctx, Mirroring, rec(4)); err != nil {
		t.Fatal(err)
	}
	got = nil
	for end := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(end); {
		raws, err := fol.Next(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, decoded(raws)...)
	}
	if want := []Record{rec(4)}; !reflect.DeepEqual(stripOffsets(got), want) {
		t.Fatalf("after DeleteRecords: %v, want %v", describe(got), describe(want))
	}
}

func stripOffsets(rs []Record) []Record {
	out := make([]Record, len(rs))
	for i, r := range rs {
		r.Partition, r.Offset = 0, 0
		out[i] = r
	}
	return out
}
