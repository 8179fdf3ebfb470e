package faults

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteReport writes a run's summary: the faults with their stalls, the
// stall figures, and the check.
func (r *Run) WriteReport(w io.Writer, res CheckResult, elapsed time.Duration) {
	fmt.Fprintf(w, "fault run: %s, %d faults, %d agent kills, %d clean agent stops, %d destination and %d source broker kills\n",
		elapsed.Round(time.Second), len(r.Faults), r.AgentKills, r.AgentLeaves, r.BrokerKills[Destination], r.BrokerKills[Source])
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tside\ttook\tleaders moved\tstall p50\tstall max\tlongest sampling gap")
	for _, f := range r.Faults {
		fg := figures(append([]time.Duration(nil), f.Stalls...))
		p50, mx, gap := "-", "-", "-"
		if fg.Moves > 0 {
			p50, mx = fg.P50.Round(10*time.Millisecond).String(), fg.Max.Round(10*time.Millisecond).String()
			gap = f.Gap.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", f.Name, f.Side, f.End.Sub(f.Start).Round(100*time.Millisecond), len(f.Moved), p50, mx, gap)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "stalls of moved destination partitions (time a moved partition did not append while the source had more; a stall is known to within the fault's longest sampling gap, the time the watcher could not list the partition's end offset):")
	for _, row := range []struct{ name, prefix string }{
		{"all destination leader moves", ""},
		{"controlled restarts", "controlled restart"},
		{"preferred-leader elections", "preferred-leader"},
		{"reassignments", "reassignment"},
		{"broker SIGKILLs (include Kafka's failure detection)", "SIGKILL broker"},
	} {
		fg := r.StallFigures(Destination, row.prefix)
		fmt.Fprintf(w, "  %-52s %s\n", row.name+":", fg)
	}
	fg := r.StallFigures(Source, "")
	fmt.Fprintf(w, "  %-52s %s\n", "source leader moves (fetch side):", fg)
	fmt.Fprintf(w, "check: %s\n", res)
}

func (f Figures) String() string {
	if f.Moves == 0 {
		return "no moves"
	}
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("%d moves, p50 %s, p99 %s, max %s", f.Moves, r(f.P50), r(f.P99), r(f.Max))
}

// FailedFaults lists the faults that returned an error.
func (r *Run) FailedFaults() string {
	var b strings.Builder
	for _, f := range r.Faults {
		if f.Err != nil {
			fmt.Fprintf(&b, "%s on the %s: %v\n", f.Name, f.Side, f.Err)
		}
	}
	return b.String()
}
