package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/demo"
)

func init() {
	register(command{
		name:    "demo",
		summary: "mirror a built-in load between two embedded Kafka clusters and verify the copy",
		run:     runDemo,
	})
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "", stderr)
	var cfg demo.Config
	fs.DurationVar(&cfg.Duration, "duration", demo.DefaultDuration, "how long the load runs")
	fs.Int64Var(&cfg.Records, "records", 0, "stop the load after this many records, committed and aborted (0: no limit within --duration)")
	fs.Float64Var(&cfg.Rate, "rate", demo.DefaultRate, "records per second over all producers")
	fs.StringVar(&cfg.Listen, "listen", config.DefaultListen, "host:port of the agent's HTTP listener (a free port on 127.0.0.1 if it is taken)")
	fs.StringVar(&cfg.LogLevel, "log-level", demo.DefaultLogLevel, "level of the agent's logs on stderr: trace, debug, info, warn or error")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mirrord demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	if cfg.Duration <= 0 {
		fmt.Fprintf(stderr, "mirrord demo: --duration %s must be positive\n", cfg.Duration)
		return exitUsage
	}
	if cfg.Rate <= 0 {
		fmt.Fprintf(stderr, "mirrord demo: --rate %g must be positive\n", cfg.Rate)
		return exitUsage
	}
	cfg.Interactive = isTerminal(stdout)

	d, err := demo.New(cfg, demo.Deps{Out: stdout, LogOutput: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "mirrord demo: %v\n", err)
		return exitUsage
	}

	// The first SIGINT or SIGTERM stops the load (the demo still waits
	// for the destination and verifies); a second one aborts.
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-sigs:
				if n == 0 {
					fmt.Fprintln(stderr, "\nmirrord demo: stopping the load; verifying next (interrupt again to abort)")
					d.Stop()
					continue
				}
				fmt.Fprintln(stderr, "\nmirrord demo: aborted")
				abort()
				return
			}
		}
	}()
	res, err := d.Run(ctx)
	close(done)
	<-watched
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return exitError
		}
		fmt.Fprintf(stderr, "mirrord demo: %v\n", err)
		return exitError
	}
	if !res.Verified {
		return exitError
	}
	return exitOK
}

// isTerminal reports whether w is a character device (a terminal), where the
// progress line may be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
