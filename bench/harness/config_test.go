package harness

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestConfigErrors guards validation: every problem at once, before any
// build or process starts.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"codecs and sides", Config{Codecs: []string{"brotli"}, Sides: []string{"mm3"}}, []string{`codec "brotli"`, `side "mm3"`}},
		{"MirrorMaker on kfake", Config{Sides: []string{MM2, MM2EOS}}, []string{`side "mm2" runs against real Kafka only`, `side "mm2-eos" runs against real Kafka only`}},
		{"backend and profile", Config{Backend: "docker", Profile: "huge"}, []string{`backend "docker"`, `profile "huge"`}},
		// The kafka backend's checks come before any JVM starts: the test
		// needs no MIRRORD_TEST_KAFKA, java or mvn.
		{"kafka backend", Config{Backend: BackendKafka, Brokers: 2, MM2Tasks: -1}, []string{"the kafka backend runs one broker per cluster", "mm2 tasks is -1"}},
		{"latency profile", Config{Profile: ProfileLatency, LatencyRate: -5, LatencyWarmup: -time.Second}, []string{"latency profile: rate -5/s"}},
		{"numbers", Config{Runs: -1, Size: 100, MaxBufferedBytes: 1000, PeerTasks: -2},
			[]string{"runs is -1", "size 100 is below one value per topic", "max buffered bytes 1000", "peer tasks is -2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil {
				t.Fatal("Run accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
