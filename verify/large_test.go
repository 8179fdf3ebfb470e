package verify

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// largeRecords is the size of TestRunLarge: a few hundred thousand records,
// fewer under -short.
func largeRecords() int {
	if testing.Short() {
		return 20_000
	}
	return 300_000
}

// Verify keeps up with a few hundred thousand records: partitions are read
// concurrently, each side fetching ahead of the comparator. The rate is
// logged, not asserted.
func TestRunLarge(t *testing.T) {
	const partitions = 4
	total := largeRecords()
	srcC, dstC := kafkatest.Pair(t)
	f := &fixture{srcC: srcC, dstC: dstC, src: kafkatest.Client(t, srcC), dst: kafkatest.Client(t, dstC), partitions: partitions, batches: map[int32][]*mbatch{}}
	createTopic(t, f.src, srcTopic, partitions, nil)
	ctx := testCtx(t)

	start := time.Now()
	// One idempotent producer per partition, each with its own codec.
	// Not lz4: its reader takes a fresh 4 MiB block buffer for every
	// batch, which the race detector makes cost seconds (lz4 is in the
	// other tests).
	var prods [partitions]*kgo.Client
	for p, codec := range []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.ZstdCompression(), kgo.NoCompression(), kgo.GzipCompression()} {
		prods[p] = kafkatest.Client(t, srcC, kgo.DefaultProduceTopic(srcTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(5*time.Millisecond))
	}
	pad := strings.Repeat("0123456789", 8)
	const chunk = 10_000
	for n := 0; n < total; n += chunk {
		var rs [partitions][]*kgo.Record
		for i := n; i < n+chunk && i < total; i++ {
			p := i % partitions
			rs[p] = append(rs[p], &kgo.Record{
				Partition: int32(p),
				Key:       fmt.Appendf(nil, "k%d", i),
				Value:     fmt.Appendf(nil, "v%d %s", i, pad),
				Timestamp: tsBase.Add(time.Duration(i) * time.Microsecond),
			})
		}
		for p, prod := range prods {
			if err := prod.ProduceSync(ctx, rs[p]...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produced := time.Since(start)

	start = time.Now()
	for p := range int32(partitions) {
		f.batches[p] = fetchSource(t, f.src, srcTopic, p)
	}
	kept := f.kept()
	f.mirror(t, srcTopic, partitions, kept)
	mirrored := time.Since(start)

	start = time.Now()
	rep, err := Run(ctx, f.config(srcTopic))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if rep.First != nil || rep.Records != int64(total) {
		t.Fatalf("difference %v, %d records; want none, %d", rep.First, rep.Records, total)
	}
	t.Logf("%d records: produced in %v, mirrored in %v, verified in %v (%.0f records/s)",
		total, produced.Round(time.Millisecond), mirrored.Round(time.Millisecond), took.Round(time.Millisecond), float64(total)/took.Seconds())
}
