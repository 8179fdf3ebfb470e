package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/seed83556561/mirrord/agent/adminclient"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/link"
)

func init() {
	register(command{
		name:    "links",
		summary: "list the links of a running agent and their states, through its admin API",
		run:     runLinks,
	})
	register(command{
		name:    "pause",
		summary: "pause a link of a running agent after a final checkpoint, through its admin API",
		run: func(args []string, stdout, stderr io.Writer) int {
			return runLinkCommand("pause", args, stdout, stderr)
		},
	})
	register(command{
		name:    "resume",
		summary: "resume a paused link of a running agent, through its admin API",
		run: func(args []string, stdout, stderr io.Writer) int {
			return runLinkCommand("resume", args, stdout, stderr)
		},
	})
}

// adminFlags are the flags of the commands that call the admin API.
type adminFlags struct {
	config  *string
	opts    adminclient.Options
	timeout time.Duration
}

func addAdminFlags(fs *flag.FlagSet) *adminFlags {
	f := &adminFlags{}
	f.config = fs.String("config", "", "the agent's HCL configuration file (required): its agent block says where the agent listens, its TLS, and where the admin token is")
	fs.StringVar(&f.opts.Addr, "addr", "", "host:port of the agent, instead of agent.listen (a wildcard host is called on 127.0.0.1)")
	fs.StringVar(&f.opts.CAFile, "ca-file", "", "verify the agent's certificate against these CAs (PEM) instead of trusting the one in agent.admin.cert_file")
	fs.StringVar(&f.opts.ServerName, "server-name", "", "with --ca-file: the name to verify the agent's certificate for (default: the host of the address)")
	fs.StringVar(&f.opts.CertFile, "client-cert", "", "client certificate (PEM), for an agent with agent.admin.client_ca_file")
	fs.StringVar(&f.opts.KeyFile, "client-key", "", "the client certificate's private key (PEM)")
	fs.DurationVar(&f.timeout, "timeout", adminclient.DefaultTimeout, "give up on a request after this long")
	return f
}

// client loads the agent block and builds the client; on failure it
// prints why and returns the exit code.
func (f *adminFlags) client(cmd string, stderr io.Writer) (*adminclient.Client, int) {
	a, err := config.LoadAgent(*f.config)
	if err != nil {
		printConfigError(cmd, *f.config, err, stderr)
		return nil, exitUsage
	}
	f.opts.ConfigFile, f.opts.Timeout = *f.config, f.timeout
	c, err := adminclient.New(a, f.opts)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	return c, exitOK
}

func runLinks(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("links", "", stderr)
	f := addAdminFlags(fs)
	asJSON := fs.Bool("json", false, "print the agent's answer (GET /v1/links) as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *f.config == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mirrord links: need --config FILE and no arguments")
		fs.Usage()
		return exitUsage
	}
	c, code := f.client("links", stderr)
	if c == nil {
		return code
	}
	ctx, stop := signalContext()
	defer stop()
	links, err := c.Links(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord links: %v\n", err)
		return exitError
	}
	if *asJSON {
		b, _ := json.MarshalIndent(links, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tSTATE\tSOURCE\tDESTINATION\tDELIVERY\tLAG\tSINCE\tLAST ERROR")
	for _, l := range links {
		state := l.State.String()
		if l.StandingBy != "" {
			state += " (standby for " + l.StandingBy + ")"
		}
		name := l.Name
		if l.Slot != nil { // a link with slots: one row per slot the agent runs
			name = fmt.Sprintf("%s (slot %d)", l.Name, *l.Slot)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, state, l.Source, l.Destination, l.Delivery, l.Lag, since(l.Since), l.LastError)
	}
	_ = tw.Flush()
	return exitOK
}

func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// runLinkCommand runs pause or resume.
func runLinkCommand(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet(cmd, "", stderr)
	f := addAdminFlags(fs)
	name := fs.String("link", "", "the link (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *f.config == "" || *name == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mirrord %s: need --config FILE, --link NAME and no arguments\n", cmd)
		fs.Usage()
		return exitUsage
	}
	c, code := f.client(cmd, stderr)
	if c == nil {
		return code
	}
	ctx, stop := signalContext()
	defer stop()
	do, want := c.Pause, link.Paused
	if cmd == "resume" {
		do, want = c.Resume, link.Mirroring
	}
	s, err := do(ctx, *name)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		if errors.Is(err, adminclient.ErrNotFound) {
			return exitUsage
		}
		return exitError
	}
	fmt.Fprintf(stdout, "link %s: %s requested; the link was %s when the agent answered (it acts on the command asynchronously: mirrord links shows when it is %s)\n",
		s.Name, cmd, s.State, want)
	return exitOK
}

// signalContext ends on SIGINT, so that a hanging request can be cut
// short.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}
