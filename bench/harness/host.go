package harness

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Host describes the machine the benchmark ran on.
type Host struct {
	CPU       string
	NumCPU    int
	GoVersion string
	OS, Arch  string
}

func host() Host {
	h := Host{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

// execOutput runs a command and returns its combined output.
func execOutput(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}
