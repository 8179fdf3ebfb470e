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
	p, err := start("sleep", "/bin/sh", []string{"-c", "sleep 30"}, filepath.Join(t.TempDir(), "log"), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	// Stop only once the sampler has read the child at least once: a
	// SIGTERM sent at once can end it before the first sample on a
	// loaded machine, which left the peak at 0 and failed the test for a
	// reason that has nothing to do with what it guards.
	for deadline := time.Now().Add(10 * time.Second); p.peakRSS() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
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
	p, err := start("stubborn", "/bin/sh", []string{"-c", `trap "" TERM; echo ready; sleep 30`}, filepath.Join(t.TempDir(), "log"), nil, false)
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

// TestCPUTime guards the /proc/PID/stat parsing: a process that spins for
// a while has used CPU time, and one that does not exist has none.
func TestCPUTime(t *testing.T) {
	p, err := start("spin", "/bin/sh", []string{"-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30"}, filepath.Join(t.TempDir(), "log"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = p.stop(10 * time.Second) }()
	deadline := time.Now().Add(60 * time.Second)
	for cpuTime(p.cmd.Process.Pid) < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("cpuTime of a spinning shell stayed at %s", cpuTime(p.cmd.Process.Pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := cpuTime(1 << 30); got != 0 {
		t.Fatalf("cpuTime of a missing process = %s, want 0", got)
	}
}
