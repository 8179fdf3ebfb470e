package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/link"
)

// runAgent runs an agent of cfgPath in this process, with the quick fetch
// wait and backoff the command tests use; stop ends it and reports its
// error. done delivers Run's result if the agent ends by itself.
func runAgent(t *testing.T, cfgPath string) (a *agent.Agent, done <-chan error, stop func()) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err = agent.New(cfg, agent.Deps{Tune: func(c *link.Config) {
		c.Tuning.FetchMaxWait = 100 * time.Millisecond
		c.Tuning.BackoffBase = 50 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- a.Run(ctx) }()
	return a, ch, func() {
		cancel()
		if err := <-ch; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
}

// mirrorOnce runs an agent in this process until link l has mirrored the
// topics up to ends, then stops it cleanly.
func mirrorOnce(t *testing.T, cfgPath string, ends map[string]map[int32]int64) {
	t.Helper()
	a, done, stop := runAgent(t, cfgPath)
	defer stop()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	}
	waitMirroring(t, a.Addr().String(), ends)
}

func runVerifyCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = dispatch(append([]string{"verify"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestVerifyCommand guards `mirrord verify` on a pair that a link
// mirrored: exit 0 with a line per partition when the mirror is exact,
// exit 0 naming how far behind the destination is when the source has
// more, exit 1 naming the partition and offset of a record someone else
// wrote into the destination, and exit 2 for usage and configuration
// errors.
func TestVerifyCommand(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl := manualProducer(t, srcC)
	createTopics(t, srcCl, 2, "orders", "events", "private")
	ends := map[string]map[int32]int64{
		"orders": produceTo(t, srcCl, "orders", 2, "a", 30),
		"events": produceTo(t, srcCl, "events", 2, "a", 12),
	}
	produceTo(t, srcCl, "private", 2, "a", 5)
	cfgPath := writeFile(t, "mirrord.hcl", linkHCL(srcC, dstC, ""))
	mirrorOnce(t, cfgPath, ends)

	code, out, errOut := runVerifyCmd("--config", cfgPath, "--link", "l")
	want := `comparing 2 topics of link l: src -> dst (preserve delivery)
events[0] -> events[0]: 12 records equal, up to date
events[1] -> events[1]: 12 records equal, up to date
orders[0] -> orders[0]: 30 records equal, up to date
orders[1] -> orders[1]: 30 records equal, up to date
ok: 84 records in 4 partitions are equal; the destination is the mirror of the source
`
	if code != exitOK || out != want {
		t.Fatalf("exact mirror: exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}

	// The source moves on while the link is stopped.
	produceTo(t, srcCl, "orders", 2, "b", 3)
	code, out, errOut = runVerifyCmd("--config", cfgPath, "--link", "l", "--topic", "orders")
	want = `comparing 1 topic of link l: src -> dst (preserve delivery)
orders[0] -> orders[0]: 30 records equal, 3 behind
orders[1] -> orders[1]: 30 records equal, 3 behind
ok: 60 records in 2 partitions are equal; the destination is 6 records behind the source (the link has not mirrored them yet)
`
	if code != exitOK || out != want {
		t.Fatalf("behind: exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}

	// Someone writes into the mirror.
	dstCl := kafkatest.Client(t, dstC, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := dstCl.ProduceSync(ctx, &kgo.Record{Topic: "events", Partition: 1, Key: []byte("intruder"), Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runVerifyCmd("--config", cfgPath, "--link", "l")
	for _, line := range []string{
		"events[0] -> events[0]: 12 records equal, up to date\n",
		"events[1] -> events[1]: 12 records equal, then DIFFERENT\n",
		"DIFFERENT: events[1] -> events[1]: extra record in destination at source offset none, destination offset 12: ",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("tampered destination: stdout lacks %q", line)
		}
	}
	if code != exitError {
		t.Errorf("tampered destination: exit %d, want 1; stdout:\n%s\nstderr: %s", code, out, errOut)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no link", []string{"--config", cfgPath}, "mirrord verify: need --config FILE and --link NAME\n"},
		{"unknown link", []string{"--config", cfgPath, "--link", "m"}, "mirrord verify: " + cfgPath + ` has no link "m"; its links are: l` + "\n"},
		{"topic not mirrored", []string{"--config", cfgPath, "--link", "l", "--topic", "private"},
			`mirrord verify: link l does not mirror topic "private" (see its topics include and exclude, and note that topics starting with "__" are never mirrored)` + "\n"},
		{"bad config", []string{"--config", writeFile(t, "bad.hcl", "agent {\n  x = 1\n}\n"), "--link", "l"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runVerifyCmd(tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want 2; stderr: %s", code, errOut)
			}
			if tc.stderr != "" && !strings.HasPrefix(errOut, tc.stderr) {
				t.Errorf("stderr:\n%s\nwant it to start with:\n%s", errOut, tc.stderr)
			}
		})
	}
}
