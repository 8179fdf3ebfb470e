package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/seed83556561/mirrord/config"
)

func init() {
	register(command{
		name:    "validate",
		summary: "check a configuration file and summarize its links, or list every problem in it",
		run:     runValidate,
	})
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "", stderr)
	path := fs.String("config", "", "mirrord HCL configuration file (required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mirrord validate: need --config FILE and no arguments")
		fs.Usage()
		return exitUsage
	}
	cfg, ok := loadConfig("validate", *path, stderr)
	if !ok {
		return exitUsage
	}
	fmt.Fprintf(stdout, "ok: %s, %s\n", plural(len(cfg.Clusters), "cluster"), plural(len(cfg.Links), "link"))
	for _, l := range cfg.Links {
		fmt.Fprintf(stdout, "link %s: %s -> %s\n", l.Name, l.Source, l.Destination)
		topics := "include " + patternList(l.Include)
		if len(l.Exclude) > 0 {
			topics += "; exclude " + patternList(l.Exclude)
		}
		fmt.Fprintf(stdout, "  topics       %s\n", topics)
		fmt.Fprintf(stdout, "  rename       %s\n", l.Rename)
		fmt.Fprintf(stdout, "  state topic  %s on %s\n", l.StateTopic, l.Destination)
	}
	return exitOK
}

// loadConfig loads the configuration file for command cmd. On failure it
// prints what is wrong, each problem on its own line as the config package
// formats it (file:line:column: key: what is wrong (what to do)).
func loadConfig(cmd, path string, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.Load(path)
	if err == nil {
		return cfg, true
	}
	printConfigError(cmd, path, err, stderr)
	return nil, false
}

// printConfigError prints an error of config.Load or LoadAgent: every
// problem on its own line, or the I/O error.
func printConfigError(cmd, path string, err error, stderr io.Writer) {
	if !errors.Is(err, config.ErrInvalid) {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return
	}
	problems := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		problems = j.Unwrap()
	}
	fmt.Fprintf(stderr, "mirrord %s: %s has %s:\n", cmd, path, plural(len(problems), "problem"))
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
}

// patternList shows topic patterns as written in the file (the config
// anchors each as ^(?:pattern)$).
func patternList(res []*regexp.Regexp) string {
	out := make([]string, 0, len(res))
	for _, re := range res {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(re.String(), "^(?:"), ")$"))
	}
	return strings.Join(out, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
