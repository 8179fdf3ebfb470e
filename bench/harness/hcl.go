package harness

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// MirrordLink is what the benchmark asks of one `mirrord run`: a link from
// the source to the destination cluster over the given source topics.
type MirrordLink struct {
	Name             string   // link name
	Source, Dest     []string // bootstrap servers
	Topics           []string // source topics, matched exactly
	Rename           string   // e.g. "{topic}.r3"
	StateTopic       string   // fresh per run
	MaxBufferedBytes int64
	LogLevel         string
	// Delivery is the link's delivery mode; "" keeps the default
	// (preserve).
	Delivery string
	// Extra are more link keys (the bench's -mirrord-link), written as
	// given after the others: `checkpoint_interval = "500ms"`.
	Extra map[string]string
}

// MirrordConfig is the HCL file of `mirrord run --config` for l (see
// config.example.hcl). The HTTP listener takes a free port.
func MirrordConfig(l MirrordLink) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent {\n  name      = %s\n  listen    = \"127.0.0.1:0\"\n  log_level = %s\n}\n\n", hclString("bench"), hclString(l.LogLevel))
	fmt.Fprintf(&b, "cluster \"source\" {\n  bootstrap_servers = %s\n}\n\n", hclList(l.Source))
	fmt.Fprintf(&b, "cluster \"destination\" {\n  bootstrap_servers = %s\n}\n\n", hclList(l.Dest))
	pats := make([]string, len(l.Topics))
	for i, t := range l.Topics {
		pats[i] = regexp.QuoteMeta(t)
	}
	fmt.Fprintf(&b, "link %s {\n", hclString(l.Name))
	fmt.Fprintf(&b, "  source      = \"source\"\n  destination = \"destination\"\n\n")
	fmt.Fprintf(&b, "  topics {\n    include = %s\n  }\n\n", hclList(pats))
	fmt.Fprintf(&b, "  rename             = %s\n", hclString(l.Rename))
	fmt.Fprintf(&b, "  start_from         = \"earliest\"\n")
	fmt.Fprintf(&b, "  state_topic        = %s\n", hclString(l.StateTopic))
	fmt.Fprintf(&b, "  max_buffered_bytes = %d\n", l.MaxBufferedBytes)
	if l.Delivery != "" {
		fmt.Fprintf(&b, "  delivery           = %s\n", hclString(l.Delivery))
	}
	for _, k := range slices.Sorted(maps.Keys(l.Extra)) {
		fmt.Fprintf(&b, "  %s = %s\n", k, l.Extra[k])
	}
	b.WriteString("}\n")
	return b.String()
}

// hclString quotes s as an HCL string literal: backslashes and quotes
// escaped, and template sequences (${, %{) written so that they stay text.
func hclString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "${", "$${", "%{", "%%{")
	return `"` + r.Replace(s) + `"`
}

func hclList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = hclString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
