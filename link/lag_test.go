package link

import (
	"testing"
	"time"

	"github.com/seed83556561/mirrord/transform"
)

// Guards the time lag of the status page and mirrord_lag_seconds: which
// record's time it counts from, in each case a partition can be in.
func TestTimeLag(t *testing.T) {
	now := time.UnixMilli(1_700_000_100_000)
	create := func(first, maxTs int64) item {
		return item{hdr: transform.Header{FirstTimestamp: first, MaxTimestamp: maxTs}}
	}
	logAppend := func(first, maxTs int64) item {
		return item{hdr: transform.Header{Attributes: transform.AttrTimestampLogAppend, FirstTimestamp: first, MaxTimestamp: maxTs}}
	}
	for _, c := range []struct {
		name   string
		queue  []item
		head   int
		doneAt int64
		lag    int64
		want   time.Duration
		ok     bool
	}{
		{name: "caught up", lag: 0, doneAt: 1_699_999_000_000, want: 0, ok: true},
		{name: "caught up before anything was fetched", lag: 0, want: 0, ok: true},
		{name: "nothing known", lag: 5, ok: false},
		{name: "create time: the oldest queued batch's first record", lag: 30,
			queue:  []item{create(1_700_000_040_000, 1_700_000_090_000), create(1_700_000_095_000, 1_700_000_099_000)},
			doneAt: 1_700_000_030_000, want: 60 * time.Second, ok: true},
		{name: "the head, not an item already finished", lag: 30, head: 1,
			queue: []item{{}, create(1_700_000_070_000, 1_700_000_080_000)}, want: 30 * time.Second, ok: true},
		{name: "log append time: the batch's max timestamp", lag: 10,
			queue: []item{logAppend(1_600_000_000_000, 1_700_000_090_000)}, want: 10 * time.Second, ok: true},
		{name: "nothing queued: the last finished batch, an upper bound", lag: 7,
			doneAt: 1_700_000_000_000, want: 100 * time.Second, ok: true},
		{name: "a producer's clock ahead of ours reads as 0", lag: 3,
			queue: []item{create(1_700_000_200_000, 1_700_000_200_000)}, want: 0, ok: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &partition{queue: c.queue, head: c.head, doneAt: c.doneAt}
			got, ok := p.timeLag(now, c.lag)
			if got != c.want || ok != c.ok {
				t.Fatalf("timeLag = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// Guards that finishing a batch, appended or already at the destination,
// records its record time for the time lag.
func TestFinishHeadRecordsRecordTime(t *testing.T) {
	pl := &Pipeline{}
	for _, c := range []struct {
		hdr  transform.Header
		want int64
	}{
		{transform.Header{FirstTimestamp: 11, MaxTimestamp: 19}, 11},
		{transform.Header{Attributes: transform.AttrTimestampLogAppend, FirstTimestamp: 11, MaxTimestamp: 19}, 19},
	} {
		p := &partition{queue: []item{{hdr: c.hdr, end: 42}}}
		pl.finishHead(p)
		if p.doneAt != c.want || p.srcNext != 42 {
			t.Fatalf("after finishHead: doneAt %d, srcNext %d; want %d, 42", p.doneAt, p.srcNext, c.want)
		}
	}
}
