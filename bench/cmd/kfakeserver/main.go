// Command kfakeserver runs one kfake cluster in its own process for the
// benchmark, so that the broker's CPU and heap are not charged to the
// mirror being measured. Its batches live in files under -data-dir rather
// than in the heap.
//
// It prints one line to stdout once the cluster listens:
//
//	listening 127.0.0.1:PORT[,127.0.0.1:PORT...]
//
// and runs until SIGTERM or SIGINT, then closes the cluster (flushing its
// files) and exits 0.
//
// Goroutines: main owns the cluster (kfake runs and stops its own) and
// waits for the signal; nothing else is started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("kfakeserver", flag.ContinueOnError)
	var (
		clusterID = fs.String("cluster-id", "", "cluster ID to report: a 22-character base64url UUID (required)")
		dataDir   = fs.String("data-dir", "", "directory for the cluster's log files (required)")
		port      = fs.Int("port", 0, "port of the broker; 0 picks a free one")
		brokers   = fs.Int("brokers", 1, "number of brokers (with -port 0)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *clusterID == "" || *dataDir == "" {
		fmt.Fprintln(os.Stderr, "kfakeserver: -cluster-id and -data-dir are required")
		return 2
	}
	opts := []kfake.Opt{
		kfake.ClusterID(*clusterID),
		kfake.DataDir(*dataDir),
		kfake.NumBrokers(*brokers),
	}
	if *port != 0 {
		opts = append(opts, kfake.Ports(*port))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakeserver: start cluster %s in %s: %v\n", *clusterID, *dataDir, err)
		return 1
	}
	fmt.Printf("listening %s\n", strings.Join(c.ListenAddrs(), ","))
	<-ctx.Done()
	c.Close()
	return 0
}
