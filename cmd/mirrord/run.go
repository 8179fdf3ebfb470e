package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/config"
)

func init() {
	register(command{
		name:    "run",
		summary: "run the links of a configuration file until SIGINT or SIGTERM",
		run:     runRun,
	})
}

// Exit codes of run beyond the common ones.
const (
	// exitSecondSignal: a second SIGINT or SIGTERM during the graceful
	// stop ended the process without waiting for final checkpoints (128
	// + SIGINT, as a shell reports an interrupted command).
	exitSecondSignal = 130
)

// stopGrace is how long run waits beyond agent.shutdown_timeout for the
// agent to return after a signal before it exits anyway: the links' stops
// are bounded by shutdown_timeout, and closing their sessions and clients
// takes a little longer.
const stopGrace = 10 * time.Second

// applyMemoryLimit sets the Go runtime's soft memory limit to
// agent.memory_limit or, unset, to the links' max_buffered_bytes (twice for
// a link that joins batches) plus 48 MiB,
// unless GOMEMLIMIT is in the environment (the runtime applied it already;
// GOMEMLIMIT=off means no limit). It returns the limit it set and where it
// came from, or 0.
func applyMemoryLimit(cfg *config.Config, getenv func(string) string) (int64, string) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, "GOMEMLIMIT"
	}
	from := "the links' max_buffered_bytes (twice for a link with coalesce_bytes) + 48MiB"
	if cfg.Agent.MemoryLimit > 0 {
		from = "agent.memory_limit"
	}
	limit := cfg.EffectiveMemoryLimit()
	debug.SetMemoryLimit(limit)
	return limit, from
}

func runRun(args []string, _, stderr io.Writer) int {
	fs := newFlagSet("run", "", stderr)
	path := fs.String("config", "", "mirrord HCL configuration file (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mirrord run: need --config FILE and no arguments")
		fs.Usage()
		return exitUsage
	}
	cfg, ok := loadConfig("run", *path, stderr)
	if !ok {
		return exitUsage
	}
	log := agent.NewLogger(cfg.Agent, stderr)
	if limit, from := applyMemoryLimit(cfg, os.Getenv); limit > 0 {
		log.Info("memory limit set", "mib", limit>>20, "from", from)
	} else {
		log.Info("memory limit left to the environment", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	}
	a, err := agent.New(cfg, agent.Deps{Logger: log, Version: version})
	if err != nil {
		// What the file names cannot be used (TLS files): a configuration
		// problem like the others.
		fmt.Fprintf(stderr, "mirrord run: %v\n", err)
		return exitUsage
	}

	// Two signals fit, so that a second one is never lost while the
	// first is handled.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	build := agent.ReadBuild(version)
	log.Info("starting", "version", build.Version, "config", *path, "agent", cfg.Agent.Name, "links", len(cfg.Links))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	select {
	case err := <-done:
		// Run ends by itself only on a failure (it could not listen, or
		// the HTTP server or a link broke).
		fmt.Fprintf(stderr, "mirrord run: %v\n", err)
		return exitError
	case sig := <-sigs:
		log.Info("signal received: stopping gracefully; send it again to exit at once", "signal", sig.String(), "shutdown_timeout", cfg.Agent.ShutdownTimeout)
		cancel()
	}

	limit := time.NewTimer(cfg.Agent.ShutdownTimeout + stopGrace)
	defer limit.Stop()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(stderr, "mirrord run: %v\n", err)
			return exitError
		}
		return exitOK
	case sig := <-sigs:
		log.Warn("second signal: exiting without waiting for the final checkpoints; the next start reconciles what was in flight", "signal", sig.String())
		return exitSecondSignal
	case <-limit.C:
		log.Error("the graceful stop took longer than agent.shutdown_timeout; exiting; the next start reconciles what was in flight",
			"shutdown_timeout", cfg.Agent.ShutdownTimeout)
		return exitError
	}
}
