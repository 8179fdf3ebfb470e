package main

import (
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/seed83556561/mirrord/bench/harness"
)

// TestParseSize guards the -size syntax.
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"1GiB", 1 << 30, false},
		{"256MiB", 256 << 20, false},
		{"1.5MiB", 3 << 19, false},
		{"64KiB", 64 << 10, false},
		{"4096", 4096, false},
		{"10B", 10, false},
		{"1GB", 0, true},
		{"-1MiB", 0, true},
		{"", 0, true},
		{"MiB", 0, true},
	} {
		got, err := parseSize(tc.in)
		if tc.err {
			if !errors.Is(err, errSize) {
				t.Errorf("parseSize(%q) = %d, %v; want errSize", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestFlagsDocumented guards bench/README.md's flag table: every flag the
// command defines has a row (the first column names it, several flags may
// share a row), and every flag a row names exists.
func TestFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	in := false
	for line := range strings.SplitSeq(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| flag | default | what |"):
			in = true
		case in && !strings.HasPrefix(line, "|"):
			in = false
		case in && !strings.HasPrefix(line, "|---"):
			rows = append(rows, strings.Split(line, "|")[1])
		}
	}
	if len(rows) == 0 {
		t.Fatal("bench/README.md has no flag table (a row \"| flag | default | what |\")")
	}
	documented := map[string]bool{}
	for _, r := range rows {
		for _, m := range regexp.MustCompile("`-([a-z0-9-]+)`").FindAllStringSubmatch(r, -1) {
			documented[m[1]] = true
		}
	}
	var cfg harness.Config
	fs, _ := flags(&cfg)
	defined := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		defined[f.Name] = true
		if !documented[f.Name] {
			t.Errorf("flag -%s is not in bench/README.md's flag table", f.Name)
		}
	})
	for name := range documented {
		if !defined[name] {
			t.Errorf("bench/README.md's flag table has -%s, which the command does not define", name)
		}
	}
}
