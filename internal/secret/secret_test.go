package secret

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is a manual clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func write(t *testing.T, path, s string) { t.Helper(); writeMode(t, path, s, 0o600) }
func writeMode(t *testing.T, path, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

// load calls Secret and fails the test on an unexpected outcome.
func load(t *testing.T, f *File, wantValue string, wantVersion uint64, wantErr bool) {
	t.Helper()
	v, ver, err := f.Secret()
	if v != wantValue || ver != wantVersion || (err != nil) != wantErr {
		t.Fatalf("Secret() = %q, %d, %v; want %q, %d, error %v", v, ver, err, wantValue, wantVersion, wantErr)
	}
}

// Guards the trimming and the refusals of Read: a trailing newline is not
// part of the secret, an empty file or a huge one is an error that names
// the path and not the content.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content string
		want          string
		err           error
	}{
		{"trailing newline", "s3cret-token\n", "s3cret-token", nil},
		{"surrounding whitespace", " \t s3cret \r\n", "s3cret", nil},
		{"inner space kept", "two words\n", "two words", nil},
		{"empty", "", "", ErrEmpty},
		{"only whitespace", " \n\n", "", ErrEmpty},
		{"too large", strings.Repeat("x", MaxSize+1), "", ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			write(t, path, tc.content)
			got, err := Read(path)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Read = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if err != nil && (!strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "xxxxxxxx")) {
				t.Errorf("error %q does not name the path, or shows the content", err)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Guards the reload: a changed file is read again once the check interval
// has passed, not before; an unchanged one is not read again.
func TestFileReloadsAfterChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, "first-token\n")
	c := newClock()
	f := &File{Path: path, CheckInterval: time.Second, Now: c.now}
	load(t, f, "first-token", 1, false)

	write(t, path, "second-token-longer\n")
	c.advance(999 * time.Millisecond)
	load(t, f, "first-token", 1, false) // within the interval: the stat is trusted
	c.advance(time.Millisecond)
	load(t, f, "second-token-longer", 2, false)
	c.advance(time.Hour)
	load(t, f, "second-token-longer", 2, false) // unchanged: the version stays

	// Same size, new modification time.
	write(t, path, "third--token-longer\n")
	if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	load(t, f, "third--token-longer", 3, false)
}

// Guards the Kubernetes way of rotating a mounted secret: the path is a
// symlink into a directory that is swapped atomically. The new file may
// have the same size and modification time; it is another file.
func TestFileFollowsSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Now().Add(-time.Hour)
	for i, tok := range []string{"token-aaaa", "token-bbbb"} {
		d := filepath.Join(dir, fmt.Sprintf("..data_%d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(d, "token"), tok)
		if err := os.Chtimes(filepath.Join(d, "token"), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..data_0", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "token")
	if err := os.Symlink(filepath.Join("..data", "token"), path); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	f := &File{Path: path, Now: c.now}
	load(t, f, "token-aaaa", 1, false)

	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..data_1", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	c.advance(DefaultCheckInterval)
	load(t, f, "token-bbbb", 2, false)
}

// Guards against a broken rotation locking the agent out: an emptied or
// removed file keeps the last good secret, the failure is reported once,
// and the file is read again when it is fixed.
func TestFileKeepsLastGoodSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, "good-token")
	c := newClock()
	f := &File{Path: path, Now: c.now}
	load(t, f, "good-token", 1, false)

	write(t, path, "\n")
	c.advance(time.Second)
	if v, ver, err := f.Secret(); v != "good-token" || ver != 1 || !errors.Is(err, ErrEmpty) {
		t.Fatalf("emptied file: %q, %d, %v; want the old token and ErrEmpty", v, ver, err)
	}
	c.advance(time.Second)
	load(t, f, "good-token", 1, false) // reported once

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	if v, _, err := f.Secret(); v != "good-token" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed file: %q, %v", v, err)
	}
	c.advance(time.Second)
	load(t, f, "good-token", 1, false)

	write(t, path, "fixed-token")
	c.advance(time.Second)
	load(t, f, "fixed-token", 2, false)
}

// Guards a File that never had a good read: every call fails, and the
// file is read again as soon as it appears, after the check interval.
func TestFileWithoutGoodContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	c := newClock()
	f := &File{Path: path, Now: c.now}
	for range 2 {
		if v, _, err := f.Secret(); v != "" || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("missing file: %q, %v", v, err)
		}
	}
	write(t, path, "")
	c.advance(time.Second)
	for range 2 {
		if _, _, err := f.Secret(); !errors.Is(err, ErrEmpty) {
			t.Fatalf("empty file: %v", err)
		}
		c.advance(time.Second)
	}
	write(t, path, "now-a-token")
	c.advance(time.Second)
	load(t, f, "now-a-token", 1, false)
}

// Guards against a File printing its content with any verb.
func TestFileNeverPrintsContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, "Distinctive-Secret-42")
	f := NewFile(path)
	if _, _, err := f.Load(); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if out := fmt.Sprintf(verb, f); strings.Contains(out, "Distinctive") || strings.Contains(out, fmt.Sprintf("%x", "Distinctive")) {
			t.Errorf("%s shows the content: %s", verb, out)
		}
	}
}
