// Package logtest gives tests a goroutine-safe place to collect hclog
// output and read it back, for assertions on what a component logged.
package logtest

import (
	"bytes"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Buffer is a goroutine-safe sink for log output.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger writes to w at INFO and above, without timestamps, so that tests
// can compare whole lines.
func Logger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Info, DisableTime: true})
}
