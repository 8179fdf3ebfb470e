package harness

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPeakRSSIsTheChilds guards the RSS figure against the ru_maxrss trap:
// a small child of a parent holding 256 MiB must report its own few MiB.
func TestPeakRSSIsTheChilds(t *testing.T) {
	ballast := make([]byte, 256<<20)
	ballast[0] = 1
	for n := 1; n < len(ballast); n *= 2 {
		copy(ballast[n:], ballast[:n]) // touch every page
	}
	p, err := start("sleep", "/bin/sh", []string{"-c", "sleep 0.3"}, filepath.Join(t.TempDir(), "log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := p.stop(10 * time.Second)
	if err != nil && !strings.Contains(err.Error(), "signal: terminated") {
		t.Fatal(err)
	}
	if ps == nil {
		t.Fatal("no process state")
	}
	if got := p.peakRSS(); got <= 0 || got > 64<<20 {
		t.Fatalf("peak RSS of sh is %d bytes; want a few MiB, not the parent's %d", got, len(ballast))
	}
	_ = ballast[len(ballast)-1]
}

// TestStopKillsAHungProcess guards the run's end: a mirror that ignores
// SIGTERM is killed after the timeout and the run reports it.
func TestStopKillsAHungProcess(t *testing.T) {
	p, err := start("stubborn", "/bin/sh", []string{"-c", `trap "" TERM; echo ready; sleep 30`}, filepath.Join(t.TempDir(), "log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell set its trap
	_, err = p.stop(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "was killed") || !strings.Contains(err.Error(), "ready") {
		t.Fatalf("stop = %v; want an error saying it was killed, with the log's tail", err)
	}
	if !p.exited() {
		t.Fatal("process still running after stop")
	}
}
