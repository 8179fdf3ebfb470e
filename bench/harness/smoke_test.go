package harness

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/bench/load"
)

// TestSmoke runs the whole benchmark on 8 MiB, once per side and codec,
// with every destination compared to its source record by record: it
// guards the command end to end (builds, cluster processes, mirrord run
// with the generated config, the peer, completion polling, rusage, report)
// without asserting anything about timing.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{
		Size:       8 << 20,
		Runs:       1,
		Partitions: 3,
		Verify:     true,
		WorkDir:    t.TempDir(),
		Progress:   &progress,
	})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Topics) != len(load.Codecs) {
		t.Fatalf("%d source topics, want %d", len(rep.Topics), len(load.Codecs))
	}
	sides := []string{Mirrord, MirrordTxn, Peer}
	if want := len(sides) * len(load.Codecs); len(rep.Samples) != want {
		t.Fatalf("%d samples, want %d", len(rep.Samples), want)
	}
	for i, s := range rep.Samples {
		top := rep.Topics[i/len(sides)]
		wantSide := sides[i%len(sides)]
		if s.Side != wantSide || s.Codec != top.Codec || s.Run != 1 {
			t.Errorf("sample %d is %s %s run %d, want %s %s run 1 (interleaved)", i, s.Side, s.Codec, s.Run, wantSide, top.Codec)
		}
		if s.Records != top.Records || s.SourceBytes != top.Bytes || s.Wall <= 0 || s.CPU() <= 0 || s.MaxRSS <= 0 {
			t.Errorf("sample %d: %+v; want the topic's %d records and %d bytes, and positive wall, CPU and RSS", i, s, top.Records, top.Bytes)
		}
	}
	var out bytes.Buffer
	rep.Write(&out)
	for _, codec := range load.Codecs {
		if !strings.Contains(out.String(), "| "+codec+" | "+sideName(Peer)+" |") {
			t.Errorf("report has no mirrord ÷ peer row for %s:\n%s", codec, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

// TestSmokeLatency runs the latency profile on kfake, briefly: for each of
// mirrord and the peer one run whose steady producer's records all reach
// the destination, are compared record by record, and are measured after
// the warm-up. It guards the profile's path (the steady producer, the
// destination consumer, the end of a run, the report) without a JVM;
// nothing about the latencies themselves is asserted beyond their order.
func TestSmokeLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{
		Profile:         ProfileLatency,
		Runs:            1,
		Partitions:      2,
		LatencyRate:     200,
		LatencyDuration: time.Second,
		LatencyWarmup:   200 * time.Millisecond,
		Verify:          true,
		WorkDir:         t.TempDir(),
		Progress:        &progress,
		LogLevel:        "warn",
	})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	sides := []string{Mirrord, MirrordTxn, Peer}
	if len(rep.Samples) != 0 || len(rep.Latency) != len(sides) {
		t.Fatalf("%d throughput samples and %d latency samples, want 0 and %d:\n%s", len(rep.Samples), len(rep.Latency), len(sides), progress.String())
	}
	for i, l := range rep.Latency {
		// 200 records/s for 1 s are measured; on a loaded machine the
		// ticker may fall behind (fewer) and catch up in a burst after the
		// warm-up (more).
		if l.Side != sides[i] || l.Codec != load.None || l.Records < 100 {
			t.Errorf("latency sample %d: %+v; want %s, none, at least 100 of the about 200 records measured", i, l, sides[i])
		}
		if l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max || l.SourceP50 <= 0 || l.SourceP50 > l.SourceP99 {
			t.Errorf("latency sample %d: quantiles out of order: %+v", i, l)
		}
	}
	if !strings.Contains(progress.String(), "holds the") {
		t.Errorf("no destination was verified:\n%s", progress.String())
	}
	var out bytes.Buffer
	rep.Write(&out)
	if !strings.Contains(out.String(), "| none | mirrord | 1 |") || !strings.Contains(out.String(), "| none | mirrord-txn | 1 |") || !strings.Contains(out.String(), "| none | peer | 1 |") {
		t.Errorf("report has no latency rows:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}
