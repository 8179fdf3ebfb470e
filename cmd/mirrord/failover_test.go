package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// TestFailoverCommand drives `mirrord failover` against an agent in this
// process, with the admin token from the agent's token file: it waits for
// the link, syncs group g (committed at source offset 12 of orders[0],
// inside the last transaction, with metadata) to destination offset 7,
// pauses the link and prints the report; a second failover of the paused
// link is exit 1 and leaves it paused; usage errors are exit 2.
func TestFailoverCommand(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl := manualProducer(t, srcC)
	createTopics(t, srcCl, 1, "orders")
	produceTxns(t, srcC, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 12, LeaderEpoch: -1, Metadata: "m12"})
	if r, err := kadm.NewClient(srcCl).CommitOffsets(ctx, "g", offs); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("failover-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hcl := strings.Replace(linkHCL(srcC, dstC, fmt.Sprintf("admin { token_file = %q }", tokenFile)), `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", freeAddr(t)), 1)
	hcl = strings.Replace(hcl, `destination_replication_factor = 1`, "destination_replication_factor = 1\n  groups { include = [\"g\"] }\n  group_sync_interval = \"1h\"", 1)
	cfgPath := writeFile(t, "mirrord.hcl", hcl)
	a, _, stop := runAgent(t, cfgPath)
	defer stop()
	<-a.Ready()
	waitState(t, cfgPath, "MIRRORING")

	code, out, errs := runCmd("failover", "--config", cfgPath, "--link", "l", "--timeout", "30s")
	if code != exitOK {
		t.Fatalf("mirrord failover: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("mirrord failover --config mirrord.hcl --link l --timeout 30s:\n%s%s", out, errs)
	for _, re := range []string{
		`(?m)^link l: failover done \(lag 0 records\)$`,
		`(?m)^SOURCE\s+DESTINATION\s+SOURCE LAST STABLE\s+SOURCE HIGH WATERMARK\s+LINK POSITION\s+DESTINATION OFFSET\s+LAG$`,
		`(?m)^orders\[0\]\s+orders\[0\]\s+15\s+15\s+1[45]\s+9\s+0$`,
		`(?m)^g\s+consumer\s+synced\s+orders\[0\]\s+12\s+orders\[0\]\s+7\s+committed\s*$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("report does not match %s:\n%s", re, out)
		}
	}
	if !strings.Contains(errs, "link l is paused") {
		t.Errorf("stderr %q", errs)
	}
	dstOffs, err := kadm.NewClient(kafkatest.Client(t, dstC)).FetchOffsets(ctx, "g")
	if o, _ := dstOffs.Lookup("orders", 0); err != nil || o.At != 7 || o.Metadata != "m12" {
		t.Errorf("group g at the destination: %+v, %v; want orders[0] at 7 with metadata m12", o, err)
	}
	waitState(t, cfgPath, "PAUSED")

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"paused link", []string{"--config", cfgPath, "--link", "l"}, exitError, "the link is not mirroring (it is PAUSED)"},
		{"unknown link", []string{"--config", cfgPath, "--link", "nope"}, exitUsage, `no link "nope"`},
		{"no link", []string{"--config", cfgPath}, exitUsage, "need --config FILE, --link NAME"},
		{"bad timeout", []string{"--config", cfgPath, "--link", "l", "--timeout", "0s"}, exitUsage, "a positive --timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(append([]string{"failover"}, tc.args...)...)
			if code != tc.code || out != "" || !strings.Contains(errs, tc.stderr) {
				t.Errorf("exit %d, want %d; stdout %q; stderr %q, want it to contain %q", code, tc.code, out, errs, tc.stderr)
			}
		})
	}
	waitState(t, cfgPath, "PAUSED")
}

// A failover that did not catch up because of an undecided transaction at
// the source prints, below the table, the partition's reason with the
// high watermark in its column, and tells the operator to let the
// producers end their transactions. Guards against a report that shows
// only a lag an operator cannot explain.
func TestFailoverReportUndecidedTransaction(t *testing.T) {
	reason := "the source has an undecided transaction from offset 20; records up to the high watermark 35 are not stable yet"
	var out, errs strings.Builder
	code := reportFailover("l", &failover.Status{Outcome: failover.NotCaughtUp, Lag: 15, Partitions: []failover.Partition{{
		SourceTopic: "orders", DestinationTopic: "orders", Partition: 0, SourceLastStable: 20, SourceHighWatermark: 35,
		SourceNext: 20, DestinationNext: 20, Lag: 15, Reason: reason,
	}}}, false, &out, &errs)
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	for _, re := range []string{
		`(?m)^link l: failover not_caught_up \(lag 15 records\)$`,
		`(?m)^orders\[0\]\s+orders\[0\]\s+20\s+35\s+20\s+20\s+15$`,
		`(?m)^orders\[0\]: ` + regexp.QuoteMeta(reason) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("report does not match %s:\n%s", re, out.String())
		}
	}
	if !strings.Contains(errs.String(), "commit or abort their open transactions") {
		t.Errorf("stderr %q", errs.String())
	}
}

// A failover that granted WRITE lists, below the tables, what the grant
// created and deleted.
func TestFailoverReportGrant(t *testing.T) {
	var out, errs strings.Builder
	created := `ALLOW WRITE on literal topic "orders" for User:app from host *`
	code := reportFailover("l", &failover.Status{Outcome: failover.Done, GrantWrite: true, ACLs: &failover.ACLGrant{
		Created: []string{created}, Deleted: []string{}, Managed: 3,
	}}, false, &out, &errs)
	if code != exitOK {
		t.Errorf("exit %d, want %d", code, exitOK)
	}
	for _, re := range []string{
		`(?m)^WRITE granted: 1 ACLs created, 0 deleted; the link holds 3 ACLs at the destination$`,
		`(?m)^  created ` + regexp.QuoteMeta(created) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("report does not match %s:\n%s", re, out.String())
		}
	}
}
