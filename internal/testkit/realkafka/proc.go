package realkafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/internal/lockedexec"
)

// proc is one JVM, started by launch through lockedexec: from a thread
// locked for the process's lifetime, so that Pdeathsig, which fires when
// the forking thread exits (golang/go#27505), fires only when the whole
// test process dies. That goroutine waits for the process, removes the pid
// file, records the exit in err and closes done.
type proc struct {
	pid  int
	done <-chan struct{}
	err  error // the exit status; read only after done is closed
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group of p.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.pid, sig)
}

// pidRecord is the content of a pid file in the run directory: enough for a
// later process to tell that the owner is gone and that pid is still the
// JVM it started.
type pidRecord struct {
	Owner      int    `json:"owner"`       // pid of the process that started the JVM
	OwnerStart string `json:"owner_start"` // its start time (/proc/<pid>/stat field 22), against pid reuse
	Pid        int    `json:"pid"`         // the JVM, leader of its own process group
	Dir        string `json:"dir"`         // the node directory, which is on the JVM's command line
}

// launch starts java with args in its own process group, stdout and stderr
// appended to logPath, and records it in runDir.
func launch(java string, args []string, logPath, runDir, nodeDir string, pdeathsig bool) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node log: %w", err)
	}
	cmd := exec.Command(java, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	p := &proc{}
	var pidFile string // written and removed on the launcher's goroutine
	lp, err := lockedexec.Start(cmd, lockedexec.Hooks{
		Started: func(pid int) { pidFile = writePidFile(runDir, pid, nodeDir) },
		Exited: func(err error) {
			p.err = err
			if pidFile != "" {
				_ = os.Remove(pidFile)
			}
		},
	})
	_ = logf.Close() // the JVM has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", java, err)
	}
	p.pid, p.done = lp.Pid(), lp.Done()
	return p, nil
}

// writePidFile records pid; a failure only costs the sweep, so it is not
// an error.
func writePidFile(runDir string, pid int, nodeDir string) string {
	if runDir == "" {
		return ""
	}
	rec := pidRecord{Owner: os.Getpid(), OwnerStart: procStart(os.Getpid()), Pid: pid, Dir: nodeDir}
	b, _ := json.Marshal(rec)
	path := filepath.Join(runDir, fmt.Sprintf("%d-%d.json", rec.Owner, pid))
	if os.WriteFile(path, b, 0o644) != nil {
		return ""
	}
	return path
}

// procStart is the start time of pid in clock ticks since boot, or "" if
// pid does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// isKafkaOf reports whether pid runs kafka.Kafka from nodeDir.
func isKafkaOf(pid int, nodeDir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	cmd := strings.ReplaceAll(string(b), "\x00", " ")
	return strings.Contains(cmd, "kafka.Kafka") && strings.Contains(cmd, nodeDir)
}

// sweep kills the JVMs of pid files whose owner is gone (a test process
// killed before it could stop its brokers, when Pdeathsig did not take them
// along) and removes those files. It returns the pids it killed.
func sweep(runDir string) ([]int, error) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var killed []int
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(runDir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue // removed by its owner or another sweep meanwhile
		}
		var rec pidRecord
		if json.Unmarshal(b, &rec) != nil || rec.Pid <= 0 {
			_ = os.Remove(path)
			continue
		}
		if start := procStart(rec.Owner); start != "" && start == rec.OwnerStart {
			continue // its owner runs and will stop it
		}
		if isKafkaOf(rec.Pid, rec.Dir) {
			_ = syscall.Kill(-rec.Pid, syscall.SIGKILL)
			killed = append(killed, rec.Pid)
		}
		_ = os.Remove(path)
	}
	// A SIGKILLed process disappears quickly; wait a little so that its
	// ports and memory are free when the caller goes on.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) && procStart(pid) != "" && !isZombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return killed, nil
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
