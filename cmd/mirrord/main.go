// Command mirrord is the mirrord binary: the mirroring daemon and its operator
// subcommands. This package only parses flags, builds the root logger and the
// metrics registry, handles signals and wires components; the logic lives in
// the library packages.
//
// Each subcommand lives in its own file and registers itself with register in
// an init function, so that adding one never touches another's code.
//
// Goroutines: main owns what a subcommand starts. `run` starts the agent's
// Run on one goroutine and waits for it after the first signal (a graceful
// stop bounded by agent.shutdown_timeout); a second signal, or a stop past
// that bound, exits without waiting, which the next start reconciles.
// `demo` adds one goroutine that turns signals into stops and is waited
// for.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name (after any nested subcommand names) and the process's standard
// streams; it returns the process exit code.
type command struct {
	name    string // "pid map" for a nested command
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("mirrord: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad flags or arguments
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch finds the longest registered command name that prefixes args and
// runs it.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for n := min(len(args), 3); n > 0; n-- {
		if c, ok := commands[strings.Join(args[:n], " ")]; ok {
			return c.run(args[n:], stdout, stderr)
		}
	}
	// A group name alone ("pid") lists its subcommands.
	var sub []string
	for name := range commands {
		if strings.HasPrefix(name, args[0]+" ") {
			sub = append(sub, name)
		}
	}
	if len(sub) > 0 {
		sort.Strings(sub)
		fmt.Fprintf(stderr, "mirrord %s: choose a subcommand:\n", args[0])
		for _, name := range sub {
			fmt.Fprintf(stderr, "  mirrord %-14s %s\n", name, commands[name].summary)
		}
		return exitUsage
	}
	fmt.Fprintf(stderr, "mirrord: unknown command %q; run 'mirrord -h' for the list\n", strings.Join(args, " "))
	return exitUsage
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "mirrord mirrors Kafka topics from a source cluster to a destination cluster, batch by batch.")
	fmt.Fprintln(w, "\nUsage: mirrord <command> [flags]   (mirrord <command> -h for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	for _, name := range names {
		fmt.Fprintf(w, "  %-16s %s\n", name, commands[name].summary)
	}
}

// newFlagSet returns a flag set that prints its usage to stderr and reports
// errors instead of exiting, so that tests can drive commands.
func newFlagSet(name, argsUsage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mirrord "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: mirrord %s [flags] %s\n", name, argsUsage)
		if c, ok := commands[name]; ok {
			fmt.Fprintf(stderr, "\n%s\n", c.summary)
		}
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args and maps the outcome to an exit code: ok is false
// when the command must return code at once (help asked for, or bad flags).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return exitOK, true
}
