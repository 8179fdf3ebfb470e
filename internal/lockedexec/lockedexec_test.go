package lockedexec

import (
	"errors"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// endLockedThreads ends n goroutines locked to their threads, each taking
// its thread down; the runtime starts new ones as needed. Whichever threads
// these goroutines ran on are gone afterwards.
func endLockedThreads(n int) {
	for range n {
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) + 2 {
			wg.Go(func() {
				runtime.LockOSThread()
				time.Sleep(time.Millisecond)
			})
		}
		wg.Wait()
	}
}

func sleeper() *exec.Cmd {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// The hazard the package exists for, shown with a plain cmd.Start: the
// child is SIGKILLed once a locked goroutine ends on the thread that forked
// it, long before the test process dies. If this stops failing, the runtime
// or the kernel changed and the package may no longer be needed.
func TestPlainStartDiesWithItsThread(t *testing.T) {
	cmd := sleeper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	for range 100 {
		endLockedThreads(5)
		select {
		case <-exited:
			var ee *exec.ExitError
			if !errors.As(waitErr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child ended with %v, not SIGKILL", waitErr)
			}
			return
		default:
		}
	}
	t.Skip("no locked goroutine landed on the forking thread in 500 rounds; the hazard was not shown this time")
}

// A child started by Start outlives any number of locked goroutines ending,
// and its hooks run in order on its waiter.
func TestStartSurvivesEndingThreads(t *testing.T) {
	var events []string
	p, err := Start(sleeper(), Hooks{
		Started: func(pid int) { events = append(events, "started") },
		Exited:  func(err error) { events = append(events, "exited") },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(p.Pid(), syscall.SIGTERM)
		<-p.Done()
	}()
	for range 100 {
		endLockedThreads(5)
		select {
		case <-p.Done():
			t.Fatalf("the child died while the test process lives: %v", p.Err())
		default:
		}
	}
	_ = syscall.Kill(p.Pid(), syscall.SIGTERM)
	<-p.Done()
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the child ended with %v, not the SIGTERM the test sent", p.Err())
	}
	if len(events) != 2 || events[0] != "started" || events[1] != "exited" {
		t.Fatalf("hooks ran as %v", events)
	}
}

func TestStartError(t *testing.T) {
	if _, err := Start(exec.Command("/nonexistent/mirrord-test"), Hooks{Started: func(int) { t.Error("Started ran for a failed start") }}); err == nil {
		t.Fatal("no error for a missing binary")
	}
}
