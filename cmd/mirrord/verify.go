package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/verify"
)

func init() {
	register(command{
		name:    "verify",
		summary: "compare a link's source topics with their mirrors record by record and report the first difference",
		run:     runVerify,
	})
}

// topicFlags collects repeated --topic flags.
type topicFlags []string

func (t *topicFlags) String() string { return strings.Join(*t, ",") }

func (t *topicFlags) Set(v string) error {
	if v == "" {
		return errors.New("empty topic name")
	}
	*t = append(*t, v)
	return nil
}

func runVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("verify", "", stderr)
	path := fs.String("config", "", "mirrord HCL configuration file (required)")
	linkName := fs.String("link", "", "the link whose topics to compare (required)")
	var topics topicFlags
	fs.Var(&topics, "topic", "a source `topic` to compare (repeatable); default: every source topic the link selects")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "mirrord verify: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *path == "" || *linkName == "":
		return usageErr("need --config FILE and --link NAME")
	}
	cfg, ok := loadConfig("verify", *path, stderr)
	if !ok {
		return exitUsage
	}
	l, ok := cfg.Link(*linkName)
	if !ok {
		names := make([]string, 0, len(cfg.Links))
		for _, l := range cfg.Links {
			names = append(names, l.Name)
		}
		fmt.Fprintf(stderr, "mirrord verify: %s has no link %q; its links are: %s\n", *path, *linkName, strings.Join(names, ", "))
		return exitUsage
	}
	for _, t := range topics {
		if !l.Selects(t) {
			fmt.Fprintf(stderr, "mirrord verify: link %s does not mirror topic %q (see its topics include and exclude, and note that topics starting with \"__\" are never mirrored)\n", l.Name, t)
			return exitUsage
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mirrord verify: could not compare: "+format+"\n", a...)
		return exitError
	}

	src, srcOpts, err := clusterClient(cfg, l.Source)
	if err != nil {
		return fail("%v", err)
	}
	defer src.Close()
	dst, dstOpts, err := clusterClient(cfg, l.Destination)
	if err != nil {
		return fail("%v", err)
	}
	defer dst.Close()

	srcID, err := clusterID(ctx, src, "source", cfg.Clusters[l.Source])
	if err != nil {
		return fail("%v", err)
	}
	dstID, err := clusterID(ctx, dst, "destination", cfg.Clusters[l.Destination])
	if err != nil {
		return fail("%v", err)
	}
	if len(topics) == 0 {
		tds, err := kadm.NewClient(src).ListTopics(ctx)
		if err != nil {
			return fail("list topics of source cluster %s: %v", l.Source, err)
		}
		for _, t := range tds.Names() {
			if l.Selects(t) {
				topics = append(topics, t)
			}
		}
		if len(topics) == 0 {
			return fail("link %s selects no topic of source cluster %s: nothing to compare", l.Name, l.Source)
		}
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	pairs := make(map[string]string, len(topics))
	for _, t := range topics {
		pairs[t] = l.DestinationTopic(t, l.Source)
	}

	salts, err := verify.StateSalts(ctx, dst, dstOpts, l.StateTopic)
	if err != nil {
		return fail("read collision salts from state topic %q of cluster %s: %v", l.StateTopic, l.Destination, err)
	}
	txn := l.Delivery == config.DeliveryTransactional
	fmt.Fprintf(stdout, "comparing %s of link %s: %s -> %s (%s delivery)\n", plural(len(topics), "topic"), l.Name, l.Source, l.Destination, l.Delivery)
	returns := transform.ReturnsOf(srcID, dstID, l.ReturnHome, l.Unattributed == config.UnattributedSkip)
	var screen func(ctx context.Context, hs []transform.Header) error
	if returns.Check {
		// Batches a transactional link from the destination appended at
		// the source are not sent back either (DESIGN §16).
		origins, err := statestore.NewOrigins(statestore.OriginsConfig{Topic: l.StateTopic, SourceOpts: srcOpts,
			SourceClusterID: srcID, DestinationClusterID: dstID, Strict: returns.SkipUnattributed})
		if err != nil {
			return fail("%v", err)
		}
		defer origins.Close()
		returns.Sessions, screen = origins.Sessions(), origins.Learn
	}
	rep, err := verify.Run(ctx, verify.Config{
		Source: src, Destination: dst, Topics: pairs, SourceClusterID: srcID, Salt: salts, Transactional: txn,
		Returns: returns, Screen: screen, SharedDestination: l.SharedDestination,
	})
	if err != nil {
		return fail("%v", err)
	}
	for _, p := range rep.Partitions {
		line := fmt.Sprintf("%s[%d] -> %s[%d]: %d records equal", p.SourceTopic, p.Partition, p.DestTopic, p.Partition, p.Records)
		switch {
		case p.Difference != nil:
			line += ", then DIFFERENT"
		case p.Behind > 0:
			line += fmt.Sprintf(", %d behind", p.Behind)
		default:
			line += ", up to date"
		}
		fmt.Fprintln(stdout, line)
	}
	switch {
	case rep.First != nil:
		fmt.Fprintf(stdout, "DIFFERENT: %v\n", rep.First)
		return exitError
	case rep.Behind > 0:
		fmt.Fprintf(stdout, "ok: %d records in %d partitions are equal; the destination is %d records behind the source (the link has not mirrored them yet)\n",
			rep.Records, len(rep.Partitions), rep.Behind)
	default:
		fmt.Fprintf(stdout, "ok: %d records in %d partitions are equal; the destination is the mirror of the source\n", rep.Records, len(rep.Partitions))
	}
	return exitOK
}

// clusterClient returns a client for the named cluster and the options it
// was built from.
func clusterClient(cfg *config.Config, name string) (*kgo.Client, []kgo.Opt, error) {
	opts, err := dial.Options(cfg.Clusters[name])
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	return cl, opts, nil
}

var _ flag.Value = (*topicFlags)(nil)

// clusterID is the cluster's ID: the one its block pins, or the one it
// reports.
func clusterID(ctx context.Context, cl *kgo.Client, side string, c *config.Cluster) (string, error) {
	if c.ClusterID != "" {
		return c.ClusterID, nil
	}
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("%s cluster %s: read cluster ID: %w", side, c.Name, err)
	}
	if md.Cluster == "" {
		return "", fmt.Errorf("%s cluster %s reports no cluster ID: set cluster_id in its cluster block", side, c.Name)
	}
	return md.Cluster, nil
}
