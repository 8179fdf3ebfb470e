package main

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = dispatch(args, &o, &e)
	return o.String(), e.String(), code
}

// Guards the operator commands against the spec's worked example and their
// error paths.
func TestPIDCommands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stdout string
		stderr string // substring
		code   int
	}{
		{"map spec example", []string{"pid", "map", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAKg", "5"}, "-9223371946660462587\n", "", 0},
		{"map hex form", []string{"pid", "map", "--cluster-id", "00000000-0000-0000-0000-00000000002a", "5"}, "-9223371946660462587\n", "", 0},
		{"map with salt", []string{"pid", "map", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAKg", "--salt", "57", "5"}, "-9223371824253894651\n", "", 0},
		{"map negative salt", []string{"pid", "map", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAYw", "--salt", "-57", "5"}, "-9223371946660462587\n", "", 0},
		{"map negative passes through", []string{"pid", "map", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAKg", "-9223371946660462587"}, "-9223371946660462587\n", "", 0},
		{"map non-uuid warns", []string{"pid", "map", "--cluster-id", "kfake", "5"}, "", "is not a UUID", 0},
		{"map without cluster", []string{"pid", "map", "5"}, "", "need --cluster-id", 2},
		{"map bad pid", []string{"pid", "map", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAKg", "five"}, "", `PID "five" is not a decimal int64`, 2},
		{"decode", []string{"pid", "decode", "-9223371946660462587"}, "region 42 (0x0000002a) pid 5\n", "", 0},
		{"decode not mapped", []string{"pid", "decode", "-1"}, "-1 is not a mapped PID", "", 0},
		{"decode positive", []string{"pid", "decode", "17"}, "17 is not a mapped PID", "", 0},
		{"group alone", []string{"pid"}, "", "choose a subcommand", 2},
		{"help", []string{"pid", "map", "-h"}, "", "Usage: mirrord pid map", 0},
		{"unknown", []string{"frobnicate"}, "", `unknown command "frobnicate"`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if tc.stdout != "" && !strings.HasPrefix(out, tc.stdout) {
				t.Errorf("stdout %q, want prefix %q", out, tc.stdout)
			}
			if tc.stderr != "" && !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.stderr)
			}
		})
	}
}
