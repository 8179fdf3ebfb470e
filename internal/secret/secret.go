// Package secret reads secrets (passwords, tokens, private keys) from files
// and reads a file again when it changes, so that a secret that Kubernetes
// rotates in a mounted volume is picked up without a restart.
//
// A File stats its path at most once per CheckInterval and reads it again
// when the file differs from the one last read (another file — Kubernetes
// swaps a symlink —, another size or modification time). A read that fails
// or finds nothing but whitespace keeps the last good content: a secret
// half-written by a non-atomic writer, or removed for a moment, does not
// lock the agent out; the failure is reported once, by the call that found
// it, and the file is read again when it changes.
//
// Nothing here ever puts a file's content in an error or a printed value:
// errors name the path only, and File prints as its path.
//
// The package starts no goroutines. File is safe for concurrent use.
package secret

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Errors of Read and File.
var (
	// ErrEmpty: the file holds nothing but whitespace.
	ErrEmpty = errors.New("file is empty")
	// ErrTooLarge: the file is larger than MaxSize, so it is not a
	// secret (a wrong path, a device).
	ErrTooLarge = errors.New("file is too large for a secret")
)

const (
	// DefaultCheckInterval is how often a File stats its path at most.
	DefaultCheckInterval = time.Second
	// MaxSize is the largest secret file read (a certificate chain fits).
	MaxSize = 1 << 20
)

// Read returns the content of the file at path with surrounding
// whitespace (a trailing newline) removed, as Prometheus reads its
// password_file. An error names the path, never the content.
func Read(path string) (string, error) {
	b, _, err := read(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// read reads the file at path and returns its content and the FileInfo of
// the file it read.
func read(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	case len(b) > MaxSize:
		return nil, nil, fmt.Errorf("%s: %w (more than %d bytes)", path, ErrTooLarge, MaxSize)
	case len(bytes.TrimSpace(b)) == 0:
		return nil, nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	return b, info, nil
}

// File is a secret held in a file, read again when the file changes. Set
// Path (and, in tests, CheckInterval and Now) before the first call; a
// File must not be copied after first use.
type File struct {
	Path string
	// CheckInterval is how long a stat of Path is trusted; zero means
	// DefaultCheckInterval.
	CheckInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu        sync.Mutex
	content   []byte      // the last good content; nil before the first good read
	version   uint64      // increases with every good read
	attempted bool        // Path was checked at least once
	checked   time.Time   // when Path was last checked
	seen      os.FileInfo // the file last read, well or not; nil if Path could not be stat'ed
	lastErr   error       // why the last read failed, while there is no good content
}

// NewFile returns a File for path with the default check interval. It does
// no I/O.
func NewFile(path string) *File { return &File{Path: path} }

// Load returns the file's content as of the last good read and its
// version, which increases each time a changed file is read well. The
// first call reads the file; later calls stat it once CheckInterval has
// passed since the last check and read it again if it changed.
//
// err is non-nil when this call's check or read failed. content is then
// still the last good content, or nil if there never was one: a caller
// with content goes on with it (and logs err), a caller without fails.
// With good content, a failure is reported once, by the call that found
// it; the file is read again when it changes. Without, every call reports
// the last failure, and the file is checked again each CheckInterval.
func (f *File) Load() (content []byte, version uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	interval := f.CheckInterval
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	if f.attempted && now.Sub(f.checked) < interval {
		if f.content == nil {
			return nil, f.version, f.lastErr
		}
		return f.content, f.version, nil
	}
	f.checked = now
	info, err := os.Stat(f.Path)
	if err != nil {
		reported := f.attempted && f.seen == nil
		f.attempted, f.seen = true, nil
		if f.content == nil {
			f.lastErr = err
			return nil, f.version, err
		}
		if reported {
			return f.content, f.version, nil
		}
		return f.content, f.version, err
	}
	if f.attempted && same(f.seen, info) {
		if f.content == nil {
			return nil, f.version, f.lastErr
		}
		return f.content, f.version, nil
	}
	f.attempted = true
	b, readInfo, err := read(f.Path)
	if err != nil {
		f.seen, f.lastErr = info, err
		return f.content, f.version, err
	}
	f.content, f.seen, f.lastErr = b, readInfo, nil
	f.version++
	return f.content, f.version, nil
}

// Secret is Load with the content as a string, surrounding whitespace
// removed.
func (f *File) Secret() (string, uint64, error) {
	b, v, err := f.Load()
	return string(bytes.TrimSpace(b)), v, err
}

// String names the file, never its content.
func (f *File) String() string { return "secret file " + f.Path }

// GoString is the %#v form: the path only.
func (f *File) GoString() string { return fmt.Sprintf("secret.File{Path:%q}", f.Path) }

// Format prints the path with any verb, never the content.
func (f *File) Format(s fmt.State, verb rune) {
	if verb == 'v' && s.Flag('#') {
		fmt.Fprint(s, f.GoString())
		return
	}
	fmt.Fprint(s, f.String())
}

func (f *File) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// same reports whether cur is the file prev described, unchanged.
func same(prev, cur os.FileInfo) bool {
	return prev != nil && os.SameFile(prev, cur) && prev.Size() == cur.Size() && prev.ModTime().Equal(cur.ModTime())
}
