package main

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/seed83556561/mirrord/demo"
)

// TestDemoCommand runs `mirrord demo --duration 3s --records 400` as an
// operator would and checks the verdict line against the figures the same
// run printed. Guards the wiring: flags reach the demo, the exit code follows
// the verdict, and a --listen port that is taken falls back to a free one.
func TestDemoCommand(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	out, errOut, code := run(t, "demo", "--duration", "3s", "--records", "400", "--listen", busy.Addr().String())
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != exitOK {
		t.Fatalf("exit code %d, want %d", code, exitOK)
	}
	m := regexp.MustCompile(`(?m)^source: +(\d+) records committed, (\d+) aborted$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no source figures line")
	}
	committed, _ := strconv.Atoi(m[1])
	aborted, _ := strconv.Atoi(m[2])
	// The 3s may end the load before the budget on a slow machine; it
	// never produces more.
	if committed+aborted > 400 || committed == 0 {
		t.Errorf("committed %d + aborted %d records, want at most 400 and some committed", committed, aborted)
	}
	want := fmt.Sprintf("\nverified: destination holds exactly the committed source records (%d partitions, %d records)\n",
		demo.TotalPartitions(), committed)
	if !strings.Contains(out, want) {
		t.Errorf("stdout lacks %q", want)
	}
	if !strings.Contains(out, "cannot listen on "+busy.Addr().String()) {
		t.Errorf("stdout does not say that %s is taken", busy.Addr())
	}
	url := regexp.MustCompile(`(?m)^  curl http://(127\.0\.0\.1:\d+)/v1/links$`).FindStringSubmatch(out)
	if url == nil || url[1] == busy.Addr().String() {
		t.Errorf("stdout lacks the admin API URL on a free port: %q", url)
	}
	if page := regexp.MustCompile(`(?m)^  status page  http://(127\.0\.0\.1:\d+)/$`).FindStringSubmatch(out); page == nil || url == nil || page[1] != url[1] {
		t.Errorf("stdout lacks the status page's address beside the API's: %q, %q", page, url)
	}
	if !strings.Contains(out, fmt.Sprintf("\nmirrored:    %d records in ", committed)) {
		t.Errorf("stdout lacks the mirrored figure of %d records", committed)
	}
}

// TestDemoFlags: bad flags exit 2 before anything starts, -h exits 0.
func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
		code   int
	}{
		{"help", []string{"demo", "-h"}, "Usage: mirrord demo", exitOK},
		{"argument", []string{"demo", "now"}, `unexpected argument "now"`, exitUsage},
		{"zero duration", []string{"demo", "--duration", "0s"}, "--duration 0s must be positive", exitUsage},
		{"negative records", []string{"demo", "--records", "-1"}, "records -1 is negative", exitUsage},
		{"bad log level", []string{"demo", "--log-level", "loud"}, `agent.log_level: "loud" is not allowed`, exitUsage},
		{"bad listen", []string{"demo", "--listen", "localhost"}, `agent.listen: "localhost" is not host:port`, exitUsage},
		{"zero rate", []string{"demo", "--rate", "0"}, "--rate 0 must be positive", exitUsage},
		{"unknown flag", []string{"demo", "--speed", "9"}, "flag provided but not defined: -speed", exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, tc.stderr)
			}
		})
	}
}
