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
	if want := 2 * len(load.Codecs); len(rep.Samples) != want {
		t.Fatalf("%d samples, want %d", len(rep.Samples), want)
	}
	for i, s := range rep.Samples {
		top := rep.Topics[i/2]
		wantSide := []string{Mirrord, Peer}[i%2]
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
