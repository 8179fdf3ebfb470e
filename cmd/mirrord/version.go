package main

import (
	"fmt"
	"io"

	"github.com/seed83556561/mirrord/agent"
)

// version is the release version, stamped at build time with
// -ldflags "-X main.version=v1.2.3". Empty: the version the Go toolchain
// recorded in the binary ("(devel)" or a pseudo-version from version
// control).
var version string

func init() {
	register(command{
		name:    "version",
		summary: "print mirrord's version and the Go and franz-go versions it was built with",
		run:     runVersion,
	})
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "", stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mirrord version: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	b := agent.ReadBuild(version)
	fmt.Fprintf(stdout, "mirrord %s\ngo %s\nfranz-go %s\n", b.Version, b.GoVersion, b.FranzGo)
	return exitOK
}
