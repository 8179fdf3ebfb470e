package profile

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/bench/harness"
	"github.com/seed83556561/mirrord/bench/load"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

var (
	sizeFlag    = flag.String("profile.size", "256MiB", "source data over all codec topics (KiB, MiB, GiB)")
	codecsFlag  = flag.String("profile.codecs", "lz4,zstd,none", "codec topics, one sub-benchmark each")
	partsFlag   = flag.Int("profile.partitions", 6, "partitions per topic")
	bufferFlag  = flag.Int64("profile.max-buffered-bytes", 64<<20, "the link's max_buffered_bytes")
	cpuFlag     = flag.String("profile.cpuprofile", "", "write a CPU profile of the mirroring only to this file")
	memFlag     = flag.String("profile.memprofile", "", "write the heap profile of the collection that left the most live heap during the mirroring to this file")
	logFlag     = flag.String("profile.log-level", "warn", "the agent's log level (stderr)")
	clusterLogs = flag.String("profile.workdir", "", "directory for the clusters' files and logs (default: a temporary one)")
	backendFlag = flag.String("profile.backend", harness.BackendKfake, "clusters: kfake or kafka (Apache Kafka brokers from realkafka, one JVM per cluster)")
	batchFlag   = flag.Int("profile.load-batch-bytes", 0, "batch size of the producers that load the source (0: 1 MiB)")
	delivFlag   = flag.String("profile.delivery", "", "the link's delivery mode: preserve (default) or transactional")
	lingerFlag  = flag.Duration("profile.load-linger", 0, "linger of the producers that load the source (0: 10ms; negative: none)")
)

func parseSize(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"", 1}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseFloat(num, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("size %q: want a positive number with KiB, MiB or GiB", s)
			}
			return int64(n * u.mult), nil
		}
	}
	return 0, fmt.Errorf("size %q", s)
}

// BenchmarkMirrordRun mirrors each codec topic with an in-process agent
// into fresh destination topics per iteration; bytes/s are source bytes as
// stored.
func BenchmarkMirrordRun(b *testing.B) {
	size, err := parseSize(*sizeFlag)
	if err != nil {
		b.Fatal(err)
	}
	codecs := strings.Split(*codecsFlag, ",")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	dir := *clusterLogs
	if dir == "" {
		dir = b.TempDir()
	}
	mod, err := harness.ModuleDir(ctx)
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "kfakeserver")
	if err := harness.BuildPackage(ctx, mod, bin, "./bench/cmd/kfakeserver"); err != nil {
		b.Fatal(err)
	}
	start := func(name string) *harness.Cluster {
		data := filepath.Join(dir, name)
		if err := os.MkdirAll(data, 0o755); err != nil {
			b.Fatal(err)
		}
		var c *harness.Cluster
		var err error
		if *backendFlag == harness.BackendKafka {
			c, err = harness.StartKafka(ctx, name, newID(name), realkafka.Kafka4, "", data)
		} else {
			c, err = harness.StartCluster(ctx, bin, name, newID(name), 1, data, filepath.Join(dir, name+".log"))
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := c.Stop(); err != nil {
				b.Error(err)
			}
		})
		return c
	}
	src, dst := start("source"), start("destination")
	topics, err := harness.LoadSourceWith(ctx, src, load.Config{Codecs: codecs, BytesPerTopic: size / int64(len(codecs)),
		Partitions: int32(*partsFlag), BatchMaxBytes: int32(*batchFlag), Linger: *lingerFlag})
	if err != nil {
		b.Fatal(err)
	}
	dstCl, err := dst.PollClient()
	if err != nil {
		b.Fatal(err)
	}
	defer dstCl.Close()

	if *cpuFlag != "" {
		f, err := os.Create(*cpuFlag)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				b.Error(err)
			}
		}()
	}
	if *memFlag != "" {
		stop := peakHeapProfile(b, *memFlag)
		defer stop()
	}
	id := 0
	for _, top := range topics {
		b.Run(top.Codec, func(b *testing.B) {
			b.SetBytes(top.Bytes)
			for b.Loop() {
				id++
				mirror(ctx, b, src, dst, dstCl, top, id)
			}
		})
	}
}

// mirror runs an agent with one link over top until the destination holds
// all of it, then stops the agent cleanly and deletes what it created.
func mirror(ctx context.Context, b *testing.B, src, dst *harness.Cluster, dstCl *kgo.Client, top harness.SourceTopic, id int) {
	state := fmt.Sprintf("__mirror_state.p%d", id)
	hcl := harness.MirrordConfig(harness.MirrordLink{
		Name:             fmt.Sprintf("profile-p%d", id),
		Source:           src.Addrs,
		Dest:             dst.Addrs,
		Topics:           []string{top.Name},
		Rename:           fmt.Sprintf("{topic}.p%d", id),
		StateTopic:       state,
		MaxBufferedBytes: *bufferFlag,
		LogLevel:         *logFlag,
		Delivery:         *delivFlag,
	})
	cfg, err := config.Parse("profile.hcl", []byte(hcl), nil)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := agent.New(cfg, agent.Deps{Registry: reg, Logger: hclog.New(&hclog.LoggerOptions{Name: "mirrord", Level: hclog.LevelFromString(*logFlag), Output: os.Stderr})})
	if err != nil {
		b.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = a.Run(actx)
	}()
	dstTopic := fmt.Sprintf("%s.p%d", top.Name, id)
	var werr error
	if *delivFlag == "transactional" {
		werr = harness.WaitCheckpointed(ctx, dst.Opts(), state, top, done)
	} else {
		werr = harness.WaitMirrored(ctx, dstCl, top, dstTopic, done)
	}
	stop()
	<-done
	if werr != nil || runErr != nil {
		b.Fatalf("mirror %s into %s: %v; agent: %v", top.Name, dstTopic, werr, runErr)
	}
	b.StopTimer()
	reportFullness(b, reg)
	resps, err := kadm.NewClient(dstCl).DeleteTopics(ctx, dstTopic, state)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		b.Fatalf("delete %s and %s: %v", dstTopic, state, err)
	}
	b.StartTimer()
}

// reportFullness reports how full the link's Produce requests and Fetch
// responses were: batches per request, requests and fetches per second.
func reportFullness(b *testing.B, reg *prometheus.Registry) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	val := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				val[mf.GetName()+"_sum"] += m.GetHistogram().GetSampleSum()
				val[mf.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				val[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	if n := val["mirrord_produce_request_batches_count"]; n > 0 {
		b.ReportMetric(val["mirrord_produce_request_batches_sum"]/n, "batches/produce")
		b.ReportMetric(n, "produces/op")
	}
	if n := val["mirrord_fetch_requests_total"]; n > 0 {
		b.ReportMetric(n, "fetches/op")
	}
}

// newID is a fixed, valid cluster ID per role: real 22-character base64url
// UUIDs, distinct.
func newID(role string) string {
	if role == "source" {
		return "MkU3OEVBNTcwNTJENDM2Qg"
	}
	return "LqsXsMnTTYq0dBuyEJh1_A"
}

// peakHeapProfile samples the live heap every 50 ms and keeps the heap
// profile (as of the last collection) whenever the live heap is the
// largest yet; stop ends the sampling and writes the kept one to path.
func peakHeapProfile(b *testing.B, path string) (stop func()) {
	var (
		peak uint64
		best bytes.Buffer
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak {
				peak = v
				best.Reset()
				if err := pprof.Lookup("heap").WriteTo(&best, 0); err != nil {
					b.Error(err)
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if err := os.WriteFile(path, best.Bytes(), 0o644); err != nil {
			b.Error(err)
		}
		b.Logf("peak live heap %d MiB; its heap profile: %s", peak>>20, path)
	}
}
