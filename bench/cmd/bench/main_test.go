package main

import (
	"errors"
	"testing"
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
