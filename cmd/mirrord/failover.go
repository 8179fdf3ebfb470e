package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/seed83556561/mirrord/agent/adminclient"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/backoff"
)

func init() {
	register(command{
		name:    "failover",
		summary: "move consumers to a link's destination: wait until it caught up, sync groups a last time, pause it, report (admin API)",
		run:     runFailover,
	})
}

// runFailover drives POST /v1/links/{name}/failover and follows the link's
// status until the failover ends. Exit 0: done (with --allow-lag, also
// behind); 1: not caught up within --timeout, or failed (the link was left
// as it was); 2: usage.
func runFailover(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("failover", "", stderr)
	f := &adminFlags{timeout: adminclient.DefaultTimeout}
	f.config = fs.String("config", "", "the agent's HCL configuration file (required): its agent block says where the agent listens, its TLS, and where the admin token is")
	fs.StringVar(&f.opts.Addr, "addr", "", "host:port of the agent, instead of agent.listen (a wildcard host is called on 127.0.0.1)")
	fs.StringVar(&f.opts.CAFile, "ca-file", "", "verify the agent's certificate against these CAs (PEM) instead of trusting the one in agent.admin.cert_file")
	fs.StringVar(&f.opts.ServerName, "server-name", "", "with --ca-file: the name to verify the agent's certificate for (default: the host of the address)")
	fs.StringVar(&f.opts.CertFile, "client-cert", "", "client certificate (PEM), for an agent with agent.admin.client_ca_file")
	fs.StringVar(&f.opts.KeyFile, "client-key", "", "the client certificate's private key (PEM)")
	name := fs.String("link", "", "the link (required)")
	timeout := fs.Duration("timeout", failover.DefaultTimeout, "how long the link may take to mirror up to the source's last stable offsets")
	allowLag := fs.Bool("allow-lag", false, "fail over after --timeout even if the link has not caught up, and report the lag")
	grantWrite := fs.Bool("grant-write", false, "after the final group sync, have the link's ACL sync grant the source's ALLOW WRITE on the mirrored topics at the destination (needs acl_sync), so that producers can move too")
	asJSON := fs.Bool("json", false, "print the failover's status (the failover field of GET /v1/links/{name}) as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *f.config == "" || *name == "" || fs.NArg() > 0 || *timeout <= 0 {
		fmt.Fprintln(stderr, "mirrord failover: need --config FILE, --link NAME, a positive --timeout and no arguments")
		fs.Usage()
		return exitUsage
	}
	c, code := f.client("failover", stderr)
	if c == nil {
		return code
	}
	ctx, stop := signalContext()
	defer stop()
	st, err := c.Failover(ctx, *name, failover.Options{Timeout: *timeout, AllowLag: *allowLag, GrantWrite: *grantWrite})
	if err != nil {
		fmt.Fprintf(stderr, "mirrord failover: %v\n", err)
		if errors.Is(err, adminclient.ErrNotFound) {
			return exitUsage
		}
		return exitError
	}
	if st.Failover == nil {
		fmt.Fprintln(stderr, "mirrord failover: the agent accepted the failover but its status shows none")
		return exitError
	}
	started := st.Failover.Started
	fmt.Fprintf(stderr, "mirrord failover: link %s: waiting up to %s for it to mirror up to the source's last stable offsets\n", *name, *timeout)
	// The link pauses after the wait: its drain and final checkpoint take
	// up to the agent's shutdown timeout; two minutes more is generous.
	deadline := time.Now().Add(*timeout + 2*time.Minute)
	for {
		if backoff.Sleep(ctx, 200*time.Millisecond) != nil {
			fmt.Fprintln(stderr, "mirrord failover: interrupted; the failover goes on in the agent (mirrord links shows the link)")
			return exitError
		}
		s, err := c.Link(ctx, *name)
		if err != nil {
			fmt.Fprintf(stderr, "mirrord failover: %v\n", err)
			return exitError
		}
		fo := s.Failover
		if fo != nil && fo.Started.Equal(started) && fo.Outcome != failover.Running {
			return reportFailover(*name, fo, *asJSON, stdout, stderr)
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "mirrord failover: the failover of link %s did not end within %s\n", *name, *timeout+2*time.Minute)
			return exitError
		}
	}
}

// reportFailover prints the outcome, each partition and each group's
// partitions, and returns the exit code.
func reportFailover(name string, fo *failover.Status, asJSON bool, stdout, stderr io.Writer) int {
	if asJSON {
		b, _ := json.MarshalIndent(fo, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintf(stdout, "link %s: failover %s (lag %d records)\n\n", name, fo.Outcome, fo.Lag)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tDESTINATION\tSOURCE LAST STABLE\tSOURCE HIGH WATERMARK\tLINK POSITION\tDESTINATION OFFSET\tLAG")
		for _, p := range fo.Partitions {
			fmt.Fprintf(tw, "%s[%d]\t%s[%d]\t%d\t%d\t%d\t%d\t%d\n", p.SourceTopic, p.Partition, p.DestinationTopic, p.Partition,
				p.SourceLastStable, p.SourceHighWatermark, p.SourceNext, p.DestinationNext, p.Lag)
		}
		_ = tw.Flush()
		// The reasons below the table: a partition whose lag its
		// position alone does not explain (an undecided transaction).
		for _, p := range fo.Partitions {
			if p.Reason != "" {
				fmt.Fprintf(stdout, "%s[%d]: %s\n", p.SourceTopic, p.Partition, p.Reason)
			}
		}
		if len(fo.Groups) > 0 {
			fmt.Fprintln(stdout)
			tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			// A share group's offsets are its share-partition start
			// offsets.
			fmt.Fprintln(tw, "GROUP\tTYPE\tSTATE\tSOURCE\tSOURCE COMMITTED\tDESTINATION\tDESTINATION COMMITTED\tACTION\tERROR")
			for _, g := range fo.Groups {
				if len(g.Partitions) == 0 {
					fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t%s\n", g.Group, g.Type, g.State, g.Error)
				}
				for _, p := range g.Partitions {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s[%d]\t%d\t%s[%d]\t%d\t%s\t%s\n", g.Group, g.Type, g.State, p.SourceTopic, p.Partition, p.SourceCommitted,
						p.DestinationTopic, p.Partition, p.DestinationCommitted, p.Action, p.Error)
				}
			}
			_ = tw.Flush()
		}
		if a := fo.ACLs; a != nil {
			fmt.Fprintf(stdout, "\nWRITE granted: %d ACLs created, %d deleted; the link holds %d ACLs at the destination\n", len(a.Created), len(a.Deleted), a.Managed)
			for _, c := range a.Created {
				fmt.Fprintf(stdout, "  created %s\n", c)
			}
			for _, d := range a.Deleted {
				fmt.Fprintf(stdout, "  deleted %s\n", d)
			}
		}
	}
	switch fo.Outcome {
	case failover.Done, failover.DoneWithLag:
		fmt.Fprintf(stderr, "mirrord failover: link %s is paused; consumers of the synced groups can start at the destination\n", name)
		return exitOK
	case failover.NotCaughtUp:
		fmt.Fprintf(stderr, "mirrord failover: link %s did not catch up (lag %d records); it keeps mirroring. Stop the source's producers (and let them commit or abort their open transactions), or pass --allow-lag\n", name, fo.Lag)
	default:
		fmt.Fprintf(stderr, "mirrord failover: link %s: failover %s: %s; the link was left as it was\n", name, fo.Outcome, fo.Error)
	}
	return exitError
}
