package harness

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// TestSmokeKafka runs the kafka backend on a little data: two Apache Kafka
// clusters, mirrord, the peer and MirrorMaker 2 with exactly-once, each
// destination compared record by record. It guards what the kfake smoke
// test cannot: the broker launch, MirrorMaker's resolution, configuration
// and clean stop, and the end of an exactly-once run told by its committed
// offsets (its destination's end offsets count transaction markers).
// Nothing about timing is asserted.
func TestSmokeKafka(t *testing.T) {
	vs := realkafka.TestVersions(t)
	realkafka.RequireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{
		Backend:      BackendKafka,
		KafkaVersion: vs[0],
		Size:         2 << 20,
		Runs:         1,
		Codecs:       []string{"lz4"},
		Partitions:   2,
		Sides:        []string{Mirrord, Peer, MM2EOS},
		Verify:       true,
		WorkDir:      t.TempDir(),
		Progress:     &progress,
		LogLevel:     "warn",
	})
	if err != nil {
		realkafka.SkipMissingTool(t, err)
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Samples) != 3 {
		t.Fatalf("%d samples, want 3:\n%s", len(rep.Samples), progress.String())
	}
	for i, s := range rep.Samples {
		if s.Side != []string{Mirrord, Peer, MM2EOS}[i] || s.Records != rep.Topics[0].Records || s.Wall <= 0 || s.CPU() <= 0 || s.MaxRSS <= 0 {
			t.Errorf("sample %d: %+v", i, s)
		}
	}
	var out bytes.Buffer
	rep.Write(&out)
	if !strings.Contains(out.String(), "| lz4 | "+sideName(MM2EOS)+" |") {
		t.Errorf("report has no mirrord ÷ mm2-eos row:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}
