package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every configuration problem that
// Parse, Load and Validate report, and so by the joined error they return.
// Errors that do not match it are I/O errors (the file could not be read).
var ErrInvalid = errors.New("invalid configuration")

// Problem is one thing wrong with a configuration. Parse joins all of them
// with errors.Join, in file order, then environment variables by name; use
// errors.As to get the first, or the Unwrap() []error of the joined error
// to get them all.
type Problem struct {
	// Where is "file:line:column" for a value from the file, the name of
	// the environment variable for an override, and "" for a Config built
	// in code.
	Where string
	Key   string // key path, e.g. link.eu.checkpoint_interval; "" for syntax errors
	Msg   string // what is wrong
	Hint  string // what to do about it

	pos origin // for sorting
}

// Error formats the problem as "where: key: msg (hint)".
func (p *Problem) Error() string {
	var b strings.Builder
	if p.Where != "" {
		b.WriteString(p.Where)
		b.WriteString(": ")
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	if p.Hint != "" {
		b.WriteString(" (")
		b.WriteString(p.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Is makes every Problem match ErrInvalid.
func (p *Problem) Is(target error) bool { return target == ErrInvalid }

// origin is where a value came from: a position in the file, or an
// environment variable.
type origin struct {
	file            string
	line, col, byte int
	env             string
}

func (o origin) String() string {
	switch {
	case o.env != "":
		return o.env
	case o.line > 0:
		return fmt.Sprintf("%s:%d:%d", o.file, o.line, o.col)
	default:
		return ""
	}
}

// rank orders origins: file positions first, by offset, then environment
// variables by name, then values without an origin.
func (o origin) rank() int {
	switch {
	case o.env != "":
		return 1
	case o.line > 0:
		return 0
	default:
		return 2
	}
}

// problems collects Problems. A key whose value could not be decoded is
// marked failed, so that the checks that follow do not report a
// consequence of the same mistake (a default standing in for a bad value).
type problems struct {
	list   []*Problem
	failed map[string]bool
}

func (ps *problems) add(at origin, key, msg, hint string) {
	ps.list = append(ps.list, &Problem{Where: at.String(), Key: key, Msg: msg, Hint: hint, pos: at})
}

func (ps *problems) fail(key string) {
	if ps.failed == nil {
		ps.failed = map[string]bool{}
	}
	ps.failed[key] = true
}

// hasFailed reports whether key or one of its ancestors failed to decode.
func (ps *problems) hasFailed(key string) bool {
	for k := key; k != ""; k = parentKey(k) {
		if ps.failed[k] {
			return true
		}
	}
	return false
}

// keep drops the problems for which keep returns false.
func (ps *problems) keep(keep func(*Problem) bool) {
	ps.list = slices.DeleteFunc(ps.list, func(p *Problem) bool { return !keep(p) })
}

// err returns the problems, sorted, as one error, or nil.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	slices.SortStableFunc(ps.list, func(a, b *Problem) int {
		if c := cmp.Compare(a.pos.rank(), b.pos.rank()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pos.byte, b.pos.byte); c != 0 {
			return c
		}
		return cmp.Compare(a.pos.env, b.pos.env)
	})
	errs := make([]error, len(ps.list))
	for i, p := range ps.list {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// parentKey strips the last element of a key path: "a.b[1]" → "a.b",
// "a.b" → "a", "a" → "".
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
		return key[:i]
	}
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}
