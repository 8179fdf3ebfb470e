package harness

import (
	"context"
	"strings"
	"testing"
)

// TestConfigErrors guards validation: every problem at once, before any
// build or process starts.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"codecs and sides", Config{Codecs: []string{"snappy"}, Sides: []string{"mm2"}}, []string{`codec "snappy"`, `side "mm2"`}},
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
