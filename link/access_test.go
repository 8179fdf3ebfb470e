package link

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Guards offsetOf: a partition missing from a listing, or listed with an
// error, is an error that names the partition and what was listed.
func TestOffsetOf(t *testing.T) {
	p := tp.Partition{Topic: "orders", Partition: 3}
	offs := kadm.ListedOffsets{"orders": {
		3: {Topic: "orders", Partition: 3, Offset: 42},
		4: {Topic: "orders", Partition: 4, Err: kerr.NotLeaderForPartition},
	}}
	if o, err := offsetOf(offs, p, "end"); o != 42 || err != nil {
		t.Errorf("listed: %d, %v", o, err)
	}
	if _, err := offsetOf(offs, tp.Partition{Topic: "orders", Partition: 4}, "end"); !errors.Is(err, kerr.NotLeaderForPartition) || !strings.HasPrefix(err.Error(), "end offset of orders[4]: ") {
		t.Errorf("listed with an error: %v", err)
	}
	if _, err := offsetOf(offs, tp.Partition{Topic: "events", Partition: 0}, "start"); err == nil || err.Error() != "start offset of events[0]: not in the answer" {
		t.Errorf("not listed: %v", err)
	}
}

// Guards listLed: a partition whose leader is not there yet is listed
// again until it answers; an error that no wait cures comes back at once
// (for offsetOf to name the partition); a request that keeps failing as a
// whole fails with its own error.
func TestListLed(t *testing.T) {
	was := metadataRetry
	metadataRetry = backoff.Policy{First: time.Millisecond, Max: time.Millisecond} // no test in link runs in parallel
	t.Cleanup(func() { metadataRetry = was })
	ctx := context.Background()
	parts := []tp.Partition{{Topic: "t", Partition: 0}}
	listing := func(err error, offset int64) kadm.ListedOffsets {
		return kadm.ListedOffsets{"t": {0: {Topic: "t", Partition: 0, Offset: offset, Err: err}}}
	}
	calls := 0
	offs, _, err := listLed(ctx, parts, nil, func() (kadm.ListedOffsets, error) {
		calls++
		if calls < 3 {
			return listing(kerr.NotLeaderForPartition, 0), nil
		}
		return listing(nil, 7), nil
	})
	if o, oerr := offsetOf(offs, parts[0], "end"); err != nil || oerr != nil || o != 7 || calls != 3 {
		t.Errorf("leader after two refusals: offset %d (%v, %v) after %d calls", o, err, oerr, calls)
	}
	calls = 0
	offs, _, err = listLed(ctx, parts, nil, func() (kadm.ListedOffsets, error) {
		calls++
		return listing(kerr.TopicAuthorizationFailed, 0), nil
	})
	if _, oerr := offsetOf(offs, parts[0], "end"); err != nil || !errors.Is(oerr, kerr.TopicAuthorizationFailed) || calls != 1 {
		t.Errorf("a refusal no wait cures: %v, %v after %d calls", err, oerr, calls)
	}
	calls = 0
	whole := errors.New("broker unreachable")
	if _, _, err := listLed(ctx, parts, nil, func() (kadm.ListedOffsets, error) { calls++; return nil, whole }); !errors.Is(err, whole) || calls != placeAttempts {
		t.Errorf("a request failing as a whole: %v after %d calls, want it after %d", err, calls, placeAttempts)
	}

	// Partitions that may come later (of a topic the session created):
	// not waited for once another partition answers, but while none
	// does; the others are waited for as before.
	two := []tp.Partition{{Topic: "new", Partition: 0}, {Topic: "new", Partition: 1}, {Topic: "old", Partition: 0}}
	later := func(p tp.Partition) bool { return p.Topic == "new" }
	answers := func(new0, new1, old error) kadm.ListedOffsets {
		return kadm.ListedOffsets{
			"new": {0: {Topic: "new", Partition: 0, Err: new0}, 1: {Topic: "new", Partition: 1, Err: new1}},
			"old": {0: {Topic: "old", Partition: 0, Offset: 5, Err: old}},
		}
	}
	for _, tc := range []struct {
		name      string
		seq       []kadm.ListedOffsets // answers in turn, the last one repeated
		calls     int
		notReady  []tp.Key
		wantError bool
	}{
		{"one new partition not served yet", []kadm.ListedOffsets{answers(nil, kerr.NotLeaderForPartition, nil)}, 1, []tp.Key{{Topic: "new", Partition: 1}}, false},
		{"an old partition is waited for", []kadm.ListedOffsets{answers(nil, kerr.NotLeaderForPartition, kerr.NotLeaderForPartition), answers(nil, kerr.NotLeaderForPartition, nil)}, 2, []tp.Key{{Topic: "new", Partition: 1}}, false},
		{"nothing served: waited for", []kadm.ListedOffsets{
			{"new": {0: {Topic: "new", Partition: 0, Err: kerr.NotLeaderForPartition}, 1: {Topic: "new", Partition: 1, Err: kerr.NotLeaderForPartition}}},
			answers(kerr.NotLeaderForPartition, nil, nil)}, 2, []tp.Key{{Topic: "new", Partition: 0}}, false},
		{"all served", []kadm.ListedOffsets{answers(nil, nil, nil)}, 1, nil, false},
		{"a refusal is not deferred", []kadm.ListedOffsets{answers(nil, kerr.TopicAuthorizationFailed, nil)}, 1, nil, true},
	} {
		calls := 0
		offs, notReady, err := listLed(ctx, two, later, func() (kadm.ListedOffsets, error) {
			calls++
			return tc.seq[min(calls, len(tc.seq))-1], nil
		})
		if err != nil || calls != tc.calls {
			t.Errorf("%s: %v after %d calls, want %d calls", tc.name, err, calls, tc.calls)
			continue
		}
		if len(notReady) != len(tc.notReady) {
			t.Errorf("%s: not ready %v, want %v", tc.name, notReady, tc.notReady)
		}
		for _, k := range tc.notReady {
			if !notReady[k] {
				t.Errorf("%s: not ready %v, want %v", tc.name, notReady, tc.notReady)
			}
		}
		_, oerr := offsetOf(offs, tp.Partition{Topic: "new", Partition: 1}, "end")
		if tc.wantError != (oerr != nil && !notReady[tp.Key{Topic: "new", Partition: 1}]) {
			t.Errorf("%s: offset of new[1]: %v", tc.name, oerr)
		}
	}
}
