//go:build unix

package dial

import (
	"fmt"
	"syscall"
)

// lingerZero sets SO_LINGER to 0 on a socket before it connects (see
// netDialer).
func lingerZero(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set SO_LINGER 0: %w", serr)
	}
	return nil
}
