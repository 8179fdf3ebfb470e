package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/seed83556561/mirrord/transform"
)

func init() {
	register(command{
		name:    "pid map",
		summary: "print the PID that a source producer ID gets at the destination",
		run:     runPIDMap,
	})
	register(command{
		name:    "pid decode",
		summary: "print the region and original low 31 bits of a mapped PID",
		run:     runPIDDecode,
	})
}

func runPIDMap(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("pid map", "PID", stderr)
	clusterID := fs.String("cluster-id", "", "source cluster ID (22-character base64url or 8-4-4-4-12 hex UUID; required)")
	salt := fs.Int64("salt", 0, "collision salt recorded in the state topic for this producer, if any")
	args, pids := splitNegatives(args)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pids = append(fs.Args(), pids...)
	if *clusterID == "" || len(pids) != 1 {
		fmt.Fprintln(stderr, "mirrord pid map: need --cluster-id and exactly one PID")
		fs.Usage()
		return exitUsage
	}
	pid, err := strconv.ParseInt(pids[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord pid map: PID %q is not a decimal int64\n", pids[0])
		return exitUsage
	}
	r, hashed := transform.RegionOf(*clusterID)
	if hashed {
		fmt.Fprintf(stderr, "warning: cluster ID %q is not a UUID; its region is taken from its SHA-256 (%d)\n", *clusterID, r)
	}
	fmt.Fprintln(stdout, transform.MapPIDSalted(pid, r, *salt))
	return exitOK
}

func runPIDDecode(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("pid decode", "PID", stderr)
	args, pids := splitNegatives(args)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pids = append(fs.Args(), pids...)
	if len(pids) != 1 {
		fs.Usage()
		return exitUsage
	}
	pid, err := strconv.ParseInt(pids[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord pid decode: PID %q is not a decimal int64\n", pids[0])
		return exitUsage
	}
	r, low, ok := transform.DecodePID(pid)
	if !ok {
		fmt.Fprintf(stdout, "%d is not a mapped PID: mapped PIDs are below -1 (this is a PID as a producer got it from its own cluster, or -1 for no producer)\n", pid)
		return exitOK
	}
	fmt.Fprintf(stdout, "region %d (%#08x) pid %d\n", r, uint32(r), low)
	return exitOK
}

var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// splitNegatives takes negative numbers out of args: mapped PIDs are
// negative, and the flag package would read them as flags. A negative number
// right after a flag name without "=" is that flag's value (every flag of
// the pid commands takes a value).
func splitNegatives(args []string) (rest, negatives []string) {
	for i, a := range args {
		prev := ""
		if i > 0 {
			prev = args[i-1]
		}
		isFlagName := strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=") && !negativeNumber.MatchString(prev)
		if negativeNumber.MatchString(a) && !isFlagName {
			negatives = append(negatives, a)
		} else {
			rest = append(rest, a)
		}
	}
	return rest, negatives
}
