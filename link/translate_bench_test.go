package link

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/translate"
)

// BenchmarkTranslate measures one offset translation on kfake over a
// partition of 4,000 batches of 10 records (about 6 MiB): near the head
// (inside the window of recently mirrored batches), and far behind it, by
// the timestamp search (no window, no checkpoint) and by a walk from a
// checkpoint 1,000 batches before the position. It reports the Kafka
// requests and the record bytes read per translation. kfake runs in the
// same process; the figures are the agent's cost plus an in-process broker.
func BenchmarkTranslate(b *testing.B) {
	e := &env{}
	src, dst := benchClusters(b)
	const batches, perBatch = 4000, 10
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := src.Admin.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		b.Fatal(err)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(perBatch))
	if err != nil {
		b.Fatal(err)
	}
	for i := range batches {
		recs := make([]*kgo.Record, perBatch)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: "t", Key: fmt.Appendf(nil, "k-%d-%d", i, j), Value: make([]byte, 128)}
		}
		if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	pr.Close()
	cfg := e.linkConfig("bench", src, dst, "t")
	l, stop := runBenchLink(ctx, b, cfg, src, dst)
	defer func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	}()
	mirrortest.WaitMirrored(b, src, dst, cfg.Link.StateTopic, map[string]string{"t": "t"}, 2*time.Minute)
	var (
		a  translate.Anchor
		ok bool
		o  *online
	)
	for o == nil || !ok || len(a.Spans) < WindowSpans {
		time.Sleep(20 * time.Millisecond)
		if o = l.online.Load(); o != nil {
			if err := o.ask(ctx, func(pl partitions) { a, ok = pl.Anchor(tp.Key{Topic: "t"}) }); err != nil {
				b.Fatal(err)
			}
		}
	}
	headRecords := a.SrcNext
	stamp := a
	stamp.Spans, stamp.CkSrc, stamp.CkDst, stamp.Producers = nil, -1, -1, nil
	walk := stamp
	far := int64(perBatch*1000 + 3)
	walk.CkSrc, walk.CkDst = 0, 0 // the walk from the log start: 1,000 batches to the position
	for _, c := range []struct {
		name string
		a    translate.Anchor
		p    int64
		via  string
	}{
		{"head/window", a, headRecords - 5*perBatch - 3, "window"},
		{"far/timestamp", stamp, far, "timestamp"},
		{"far/checkpoint-walk", walk, far, "checkpoint"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var reqs, bytes int64
			b.ReportAllocs()
			for b.Loop() {
				tr, err := o.logs.Translate(ctx, c.a, c.p)
				if err != nil || tr.Via != c.via || tr.DestinationOffset != c.p {
					b.Fatalf("translate %d: %+v, %v; want %d via %s", c.p, tr, err, c.p, c.via)
				}
				reqs += int64(tr.Requests)
				bytes += tr.Bytes
			}
			b.ReportMetric(float64(reqs)/float64(b.N), "requests/op")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes-read/op")
		})
	}
}
