package appender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// BenchmarkAppend appends 256 KiB batches to a kfake cluster over 8
// partitions, one batch in the appender per partition at a time, as the
// link's pump does. A byte is a byte of batch acknowledged with acks=all.
func BenchmarkAppend(b *testing.B) {
	const partitions = 8
	c := kafkatest.NewCluster(b, kafkatest.DestClusterID, kfake.NumBrokers(1))
	cl := kafkatest.Client(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// kfake keeps every batch in memory; retention keeps the benchmark's
	// footprint flat.
	retention := fmt.Sprint(8 << 20)
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, map[string]*string{"retention.bytes": &retention}, "bench")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{Link: "bench"}, Deps{
		Client:  cl,
		Leaders: leaders.New(cl, 0),
		Logger:  hclog.NewNullLogger(),
		Lease:   func() (time.Time, bool) { return time.Now().Add(time.Hour), true },
	})
	if err != nil {
		b.Fatal(err)
	}
	batches := make([]Request, partitions)
	for i := range batches {
		p := tp.Partition{Topic: "bench", ID: resp.ID, Partition: int32(i)}
		recs := make([]rec, 256)
		for j := range recs {
			recs[j] = rec{key: fmt.Sprintf("key-%d", j), value: strings.Repeat(string(rune('a'+j%26)), 1000), header: "h"}
		}
		batches[i] = Request{Partition: p, Batch: makeBatch(b, false, 1, recs)}
	}
	size := len(batches[0].Batch)
	if size < 250<<10 || size > 260<<10 {
		b.Fatalf("batch is %d bytes, want about 256 KiB", size)
	}

	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-runDone; err != nil {
			b.Error(err)
		}
	}()

	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	submitted, done := 0, 0
	for i := 0; i < partitions && submitted < b.N; i++ {
		if err := a.Submit(batches[i]); err != nil {
			b.Fatal(err)
		}
		submitted++
	}
	for done < b.N {
		<-a.Results().Wake()
		for _, r := range a.Results().Take() {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			done++
			if done%256 == 0 {
				c.ApplyRetention()
			}
			if submitted < b.N {
				if err := a.Submit(batches[r.Partition.Partition]); err != nil {
					b.Fatal(err)
				}
				submitted++
			}
		}
	}
	b.StopTimer()
}
