package harness

import (
	"bytes"
	"os"
	"strconv"
)

// peakRSS is the high-water mark of a running process's resident set in
// bytes (VmHWM in /proc/PID/status), or 0 once it has exited or off Linux.
//
// The kernel's ru_maxrss of a child is no use here: Go starts children with
// clone(CLONE_VM|CLONE_VFORK), so until exec the child runs in the parent's
// address space, and exec folds that address space's high-water mark into
// the child's ru_maxrss. A /bin/true started by a driver holding 400 MiB
// reports 400 MiB. VmHWM belongs to the address space the child got at
// exec, so it counts only the child's own memory.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nVmHWM:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(line), []byte(" kB"))), 10, 64)
	if err != nil {
		return 0
	}
	return kb << 10
}
