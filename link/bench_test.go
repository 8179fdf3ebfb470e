package link

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// BenchmarkMirror measures the whole path, fetch → filter → transform →
// append, over in-process kfake clusters: each iteration mirrors the same
// preloaded source topic into a fresh destination topic with a fresh link.
// b.SetBytes is the source's batch bytes, so MB/s is mirrored throughput
// (including the link's PREPARING, which is small next to the data). kfake
// runs in the same process and takes much of the CPU; the figure is a floor
// for the agent, not a broker benchmark. The benchmark fails if any batch
// took the re-encode path: normal batches are never decompressed.
func BenchmarkMirror(b *testing.B) {
	for _, codec := range []int{0, 3, 4} {
		b.Run(codecNames[codec], func(b *testing.B) { benchMirror(b, codec) })
	}
}

// benchClusters are a benchmark's source and destination: kfake clusters
// of one broker each.
func benchClusters(b *testing.B) (src, dst *cluster) {
	b.Helper()
	return mirrortest.NewCluster(b, mirrortest.Backend{}, "src", kafkatest.SourceClusterID, kfake.NumBrokers(1)),
		mirrortest.NewCluster(b, mirrortest.Backend{}, "dst", kafkatest.DestClusterID, kfake.NumBrokers(1))
}

// runBenchLink runs a link of a benchmark on its own goroutine, without a
// testLink (the benchmark stops it itself, inside its timed loop); stop
// cancels it and returns what Run returned.
func runBenchLink(ctx context.Context, b *testing.B, cfg Config, src, dst *cluster) (l *Link, stop func() error) {
	b.Helper()
	l, err := New(cfg, Deps{SourceOpts: src.Opts(), DestinationOpts: dst.Opts()})
	if err != nil {
		b.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	return l, func() error { cancel(); return <-done }
}

func benchMirror(b *testing.B, codec int) {
	e := &env{}
	src, dst := benchClusters(b)

	const partitions, records, valueSize = 4, 32 << 10, 1 << 10 // 32 MiB of values
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := src.Admin.CreateTopic(ctx, partitions, 1, nil, "bench"); err != nil {
		b.Fatal(err)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.ProducerBatchCompression(codecs[codec]),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	// Values of words drawn at random from a small vocabulary: they
	// compress two to three times, like typical JSON-ish payloads.
	rng := rand.New(rand.NewPCG(7, 7))
	words := make([]string, 256)
	for i := range words {
		w := make([]byte, 3+rng.IntN(8))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = string(w)
	}
	for i := range records {
		v := fmt.Appendf(make([]byte, 0, valueSize+16), "%08d ", i)
		for len(v) < valueSize {
			v = append(v, words[rng.IntN(len(words))]...)
			v = append(v, ' ')
		}
		v = v[:valueSize]
		pr.Produce(ctx, &kgo.Record{Topic: "bench", Key: fmt.Appendf(nil, "key-%08d", i), Value: v,
			Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := pr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	pr.Close()
	ends, err := src.Admin.ListEndOffsets(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	var srcBytes int64
	for p := range int32(partitions) {
		for _, h := range rawHeaders(b, src, "bench", p) {
			srcBytes += int64(h.Length) + 12
		}
	}
	b.SetBytes(srcBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		cfg := e.linkConfig(fmt.Sprintf("bench-%d", i), src, dst, "bench")
		cfg.Link.Rename = fmt.Sprintf("{topic}-%d", i)
		cfg.Link.StateTopic = fmt.Sprintf("__state_%d", i)
		cfg.Link.MaxBufferedBytes = 64 << 20
		cfg.Link.CheckCRCs = false
		dest := fmt.Sprintf("bench-%d", i)
		// Created here, not by the link, so that this client's metadata
		// cache knows the topic when it polls its end offsets.
		b.StopTimer()
		if _, err := dst.Admin.CreateTopic(ctx, partitions, 1, nil, dest); err != nil {
			b.Fatal(err)
		}
		if _, err := dst.Admin.ListEndOffsets(ctx, dest); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		l, stop := runBenchLink(ctx, b, cfg, src, dst)
		for {
			got, err := dst.Admin.ListEndOffsets(ctx, dest)
			caught := err == nil
			for p := range int32(partitions) {
				want, _ := ends.Lookup("bench", p)
				have, ok := got.Lookup(dest, p)
				if !ok || have.Err != nil || have.Offset < want.Offset {
					caught = false
				}
			}
			if caught {
				break
			}
			if ctx.Err() != nil {
				b.Fatal("mirror did not catch up")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		if n := l.Status().Counters.Get(BatchesReencoded); n != 0 {
			b.Fatalf("%v batches were re-encoded; normal batches must never be decompressed", n)
		}
	}
}
