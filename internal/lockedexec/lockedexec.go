// Package lockedexec starts a child process from a goroutine locked to its
// OS thread for the child's whole life.
//
// Linux delivers a child's Pdeathsig when the thread that forked it exits,
// not when the parent process does (prctl(2) PR_SET_PDEATHSIG;
// golang/go#27505). A Go program's threads are shared by its goroutines, and
// a goroutine that calls runtime.LockOSThread and returns without unlocking
// takes its thread down with it. So a child started with Pdeathsig from an
// ordinary goroutine is killed whenever any later locked goroutine happens
// to run on the thread that forked it and ends: the fault suite's agent was
// SIGKILLed that way, silently, when the test restarted a broker (whose
// launcher goroutine is locked and ends with the JVM). Started here, the
// forking thread belongs to the child's waiter alone and ends only after the
// child has exited, so Pdeathsig fires only when the whole parent dies.
package lockedexec

import (
	"os/exec"
	"runtime"
)

// Hooks run on the locked goroutine, one after the other, so that they
// need no locking between them. Either may be nil.
type Hooks struct {
	// Started runs once the child is running, before Start returns.
	Started func(pid int)
	// Exited runs after the child has exited and been waited for (err is
	// cmd.Wait's), before Done is closed.
	Exited func(err error)
}

// Proc is a child started by Start.
type Proc struct {
	pid  int
	done chan struct{}
	err  error // cmd.Wait's result; read only after done is closed
}

// Start starts cmd (whose SysProcAttr, Pdeathsig included, is the
// caller's) from a goroutine that is locked to its thread, waits for the
// child and then ends, taking the thread with it. The goroutine is owned by
// the returned Proc: Done is closed when it has finished.
func Start(cmd *exec.Cmd, hooks Hooks) (*Proc, error) {
	p := &Proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, after the
		// child has exited.
		runtime.LockOSThread()
		defer close(p.done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		if hooks.Started != nil {
			hooks.Started(p.pid)
		}
		started <- nil
		p.err = cmd.Wait()
		if hooks.Exited != nil {
			hooks.Exited(p.err)
		}
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, err
	}
	return p, nil
}

// Pid is the child's process ID.
func (p *Proc) Pid() int { return p.pid }

// Done is closed once the child has exited and the hooks have run.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the child's exit status (cmd.Wait's error); valid once Done is
// closed.
func (p *Proc) Err() error { return p.err }
