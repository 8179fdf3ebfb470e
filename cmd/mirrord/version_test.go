package main

import (
	"bytes"
	"regexp"
	"testing"
)

// TestVersion guards `mirrord version`: the stamped version when -ldflags
// set one, else the recorded one, and the Go and franz-go versions.
func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		stamped string
		want    *regexp.Regexp
	}{
		{"", regexp.MustCompile(`^mirrord \S+\ngo go1\.\d+\S*\nfranz-go v1\.\d+\.\d+\S*\n$`)},
		{"v1.2.3", regexp.MustCompile(`^mirrord v1\.2\.3\ngo go1\.\d+\S*\nfranz-go v1\.\d+\.\d+\S*\n$`)},
	} {
		old := version
		version = tc.stamped
		var out, errb bytes.Buffer
		code := dispatch([]string{"version"}, &out, &errb)
		version = old
		if code != exitOK || !tc.want.MatchString(out.String()) {
			t.Errorf("version %q: exit %d, output %q, want %v", tc.stamped, code, out.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"version", "extra"}, &out, &errb); code != exitUsage {
		t.Errorf("version with an argument: exit %d", code)
	}
}
