package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// adminHCL is a configuration with a SCRAM source whose password comes
// from SRC_PW, the admin token from tokenFile, and link "l".
func adminHCL(src, dst *kfake.Cluster, listen, tokenFile string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`agent {
  listen     = %q
  log_format = "json"
  admin { token_file = %q }
}
cluster "src" {
  bootstrap_servers = %s
  sasl {
    mechanism    = "SCRAM-SHA-512"
    username     = "mirror"
    password_env = "SRC_PW"
  }
}
cluster "dst" { bootstrap_servers = %s }
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = ["orders"] }
  checkpoint_interval            = "200ms"
  session_timeout                = "3s"
  settle_delay                   = "200ms"
  discovery_interval             = "300ms"
  destination_replication_factor = 1
}
`, listen, tokenFile, list(src.ListenAddrs()), list(dst.ListenAddrs()))
}

// runCmd runs a mirrord command in this process.
func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = dispatch(args, &out, &errb)
	return code, out.String(), errb.String()
}

// waitState polls `mirrord links --json` until link l is in state.
func waitState(t *testing.T, cfg, state string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last string
	for time.Now().Before(deadline) {
		code, out, errs := runCmd("links", "--config", cfg, "--json")
		if code != exitOK {
			t.Fatalf("mirrord links --json: exit %d: %s", code, errs)
		}
		var links []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 || links[0].Name != "l" {
			t.Fatalf("mirrord links --json: %v %s", err, out)
		}
		if last = links[0].State; last == state {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("link l is %s, want %s", last, state)
}

// TestAdminCommands drives a `mirrord run` process with `mirrord links`,
// `pause` and `resume` from the same file, as an operator does: the
// commands read the agent's token file and find it on agent.listen, even
// without the Kafka password the agent has in its environment; their
// refusals name what to fix.
func TestAdminCommands(t *testing.T) {
	const password = "scram-Pa55word-1"
	srcC := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "mirror", password))
	dstC := kafkatest.NewCluster(t, kafkatest.DestClusterID)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("cli-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := writeFile(t, "mirrord.hcl", adminHCL(srcC, dstC, addr, tokenFile))
	p := startMirrordEnv(t, []string{"SRC_PW=" + password}, "run", "--config", cfg)
	p.waitLog(t, "http listening")
	if _, set := os.LookupEnv("SRC_PW"); set {
		t.Fatal("SRC_PW is set in the test's environment: the test would not show that the commands do without it")
	}

	waitState(t, cfg, "MIRRORING")
	code, out, errs := runCmd("links", "--config", cfg)
	if code != exitOK || !strings.HasPrefix(out, "LINK  STATE      SOURCE  DESTINATION  DELIVERY  LAG  SINCE") || !strings.Contains(out, "\nl     MIRRORING  src     dst          preserve  0    ") {
		t.Errorf("mirrord links: exit %d\n%s%s", code, out, errs)
	}

	// The state in the answer is the link's when the agent answered: the
	// one before the command, or already the next.
	answer := regexp.MustCompile(`^link l: (pause|resume) requested; the link was (MIRRORING|PAUSED|PREPARING) when the agent answered ` +
		`\(it acts on the command asynchronously: mirrord links shows when it is (PAUSED|MIRRORING)\)\n$`)
	code, out, errs = runCmd("pause", "--config", cfg, "--link", "l")
	if m := answer.FindStringSubmatch(out); code != exitOK || m == nil || m[1] != "pause" || m[3] != "PAUSED" {
		t.Errorf("mirrord pause: exit %d\n%s%s", code, out, errs)
	}
	waitState(t, cfg, "PAUSED")
	code, out, errs = runCmd("resume", "--config", cfg, "--link", "l")
	if m := answer.FindStringSubmatch(out); code != exitOK || m == nil || m[1] != "resume" || m[2] == "MIRRORING" || m[3] != "MIRRORING" {
		t.Errorf("mirrord resume: exit %d\n%s%s", code, out, errs)
	}
	waitState(t, cfg, "MIRRORING")
	if !strings.Contains(p.stderr(), `"command":"pause","link":"l"`) {
		t.Errorf("the agent did not log the pause:\n%s", p.stderr())
	}

	// Refusals.
	wrongFile := filepath.Join(dir, "wrong-token")
	if err := os.WriteFile(wrongFile, []byte("not-the-admin-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := writeFile(t, "wrong.hcl", adminHCL(srcC, dstC, addr, wrongFile))
	nobody := freeAddr(t)
	stopped := writeFile(t, "stopped.hcl", adminHCL(srcC, dstC, nobody, tokenFile))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string // exact, or a prefix ending in "..."
	}{
		{"unknown link", []string{"pause", "--config", cfg, "--link", "nope"}, exitUsage,
			"mirrord pause: not found: no link \"nope\"; the links are: l\n"},
		{"wrong token", []string{"resume", "--config", wrong, "--link", "l"}, exitError,
			"mirrord resume: the agent refused the admin token from file " + wrongFile + " (agent.admin.token_file): it is not the agent's token; check that this command and the agent read the same variable or file, with the same content\n"},
		{"no agent", []string{"links", "--config", stopped}, exitError,
			fmt.Sprintf("mirrord links: no agent answers on %s (agent.listen %q in %s): is mirrord run running with this configuration? (...", nobody, nobody, stopped)},
		{"no --link", []string{"pause", "--config", cfg}, exitUsage, "mirrord pause: need --config FILE, --link NAME and no arguments\n..."},
		{"no --config", []string{"links"}, exitUsage, "mirrord links: need --config FILE and no arguments\n..."},
		{"a bad file", []string{"links", "--config", filepath.Join(dir, "none.hcl")}, exitUsage,
			"mirrord links: read config: open " + filepath.Join(dir, "none.hcl") + ": no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(tc.args...)
			if code != tc.code || out != "" {
				t.Errorf("exit %d, want %d; stdout %q", code, tc.code, out)
			}
			if prefix, ok := strings.CutSuffix(tc.stderr, "..."); ok {
				if !strings.HasPrefix(errs, prefix) {
					t.Errorf("stderr:\n%s\nwant prefix\n%s", errs, prefix)
				}
			} else if errs != tc.stderr {
				t.Errorf("stderr:\n%s\nwant\n%s", errs, tc.stderr)
			}
		})
	}
}
