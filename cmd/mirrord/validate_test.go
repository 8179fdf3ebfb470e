package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidate guards `mirrord validate`: the shipped example is valid and
// summarized link by link; a bad file is refused with exit 2 and every
// problem on its own line, as the config package formats it; usage errors.
func TestValidate(t *testing.T) {
	t.Setenv("DC1_KAFKA_PASSWORD", "pw")
	bad := writeFile(t, "bad.hcl", `agent {
  log_format = "xml"
}
cluster "a" {
  bootstrap_servers = ["a:9092"]
  tsl {
  }
}
link "l" {
  source = "a"
  destination = "nope"
  topics { include = ["("] }
  checkpoint_interval = "1d"
  settle_delay = "0s"
}
`)
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string // exact
	}{{
		name: "example",
		args: []string{"validate", "--config", "../../config.example.hcl"},
		code: exitOK,
		stdout: `ok: 2 clusters, 1 link
link dc1_to_cloud: dc1 -> cloud
  topics       include orders\..*, payments; exclude .*\.tmp, .*-scratch
  rename       {source}.{topic}
  state topic  __mirror_state on cloud
`,
	}, {
		name: "problems",
		args: []string{"validate", "--config", bad},
		code: exitUsage,
		stderr: "mirrord validate: " + bad + " has 6 problems:\n" +
			bad + `:2:16: agent.log_format: "xml" is not allowed (use text or json)` + "\n" +
			bad + `:6:3: cluster.a.tsl: unknown block (did you mean tls?)` + "\n" +
			bad + `:11:17: link.l.destination: cluster "nope" is not defined (define cluster "nope" { ... } or use one of: a)` + "\n" +
			bad + `:12:23: link.l.topics.include[0]: invalid regular expression "(": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole topic name)` + "\n" +
			bad + `:13:25: link.l.checkpoint_interval: invalid duration "1d" (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")` + "\n" +
			bad + `:14:18: link.l.settle_delay: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")` + "\n",
	}, {
		name:   "missing file",
		args:   []string{"validate", "--config", filepath.Join("testdata", "none.hcl")},
		code:   exitUsage,
		stderr: "mirrord validate: read config: open testdata/none.hcl: no such file or directory\n",
	}, {
		name:   "no config",
		args:   []string{"validate"},
		code:   exitUsage,
		stderr: "mirrord validate: need --config FILE and no arguments\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			if out.String() != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), tc.stdout)
			}
			got := errb.String()
			if tc.name == "no config" { // followed by the usage
				got = got[:strings.IndexByte(got, '\n')+1]
			}
			if got != tc.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tc.stderr)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"validate", "-h"}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "Usage: mirrord validate") {
		t.Errorf("validate -h: %d %s", code, errb.String())
	}
}
