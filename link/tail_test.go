package link

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// The tail reader returns whole batches from its position to its end, in
// order, across leader errors (it looks the leader up again and retries),
// and gives up with an error naming the partition and offset when the
// broker keeps failing or returns nothing below the end.
func TestTailReader(t *testing.T) {
	defer func(p backoff.Policy) { tailRetry = p }(tailRetry)
	tailRetry = backoff.Policy{First: time.Millisecond, Max: 5 * time.Millisecond}
	e := onKfake(t)
	dst := e.cluster(t, "dst", kafkatest.DestClusterID)
	dst.CreateTopic(t, "d", 1, nil)
	for i := range 6 { // batches of 4 records: offsets 0-3, 4-7, ..., 20-23
		produceRaw(t, dst, "d", 0, batchtest.Simple(0, -7, 0, int32(i*4), 4))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := tp.Partition{Topic: "d", Partition: 0}
	// read returns the base sequences of the batches read from from to end.
	read := func(from, end int64) ([]int32, error) {
		tr := &tailReader{cl: dst.Client, leaders: leaders.New(dst.Client, 0), p: p, pos: from, end: end}
		var got []int32
		for {
			bs, err := tr.next(ctx)
			if err != nil || len(bs) == 0 {
				return got, err
			}
			for _, b := range bs {
				h, err := transform.ParseHeader(b)
				if err != nil {
					return got, err
				}
				got = append(got, h.BaseSequence)
			}
		}
	}
	// failFetches fails the next n Fetch requests with code.
	var left, seen atomic.Int32
	var failCode atomic.Int32
	dst.Fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		dst.Fake.KeepControl()
		seen.Add(1)
		if left.Add(-1) < 0 {
			return nil, nil, false
		}
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.HighWatermark, sp.LastStableOffset = rp.Partition, int16(failCode.Load()), -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	failFetches := func(n int32, code int16) {
		seen.Store(0)
		failCode.Store(int32(code))
		left.Store(n)
	}

	if got, err := read(6, 24); err != nil || !slices.Equal(got, []int32{4, 8, 12, 16, 20}) {
		t.Fatalf("from offset 6 (mid-batch): %v, %v; want the batch holding 6 and every later one", got, err)
	}
	if got, err := read(8, 16); err != nil || !slices.Equal(got, []int32{8, 12}) {
		t.Fatalf("from 8 to 16: %v, %v; want the batches at 8 and 12 only", got, err)
	}
	if got, err := read(24, 24); err != nil || got != nil {
		t.Fatalf("at the end: %v, %v; want nothing", got, err)
	}
	failFetches(3, kerr.NotLeaderForPartition.Code)
	if got, err := read(0, 24); err != nil || len(got) != 6 || seen.Load() < 4 {
		t.Fatalf("across three NOT_LEADER_OR_FOLLOWER answers: %v, %v after %d fetches; want all six batches", got, err, seen.Load())
	}
	failFetches(1000, kerr.KafkaStorageError.Code)
	if _, err := read(0, 24); err == nil || !strings.Contains(err.Error(), "read destination d[0] from offset 0") || !strings.Contains(err.Error(), "KAFKA_STORAGE_ERROR") {
		t.Fatalf("a broker that keeps failing: %v; want an error naming the partition, the offset and the cause", err)
	}
	failFetches(0, 0)
	if _, err := read(0, 30); err == nil || !strings.Contains(err.Error(), "from offset 24") || !strings.Contains(err.Error(), "no batch returned below the high watermark") {
		t.Fatalf("an end past the log: %v; want an error that no batch came below it", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	tr := &tailReader{cl: dst.Client, leaders: leaders.New(dst.Client, 0), p: p, pos: 0, end: 24}
	if _, err := tr.next(cctx); err == nil {
		t.Fatal("a canceled read returned no error")
	}
}
