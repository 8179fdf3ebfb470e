package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// module is mirrord's module path; imports are compared relative to it.
const module = "github.com/seed83556561/mirrord"

// components are the product's parts: each takes its own config struct
// and sits below the top layer (agent, demo, cmd) that wires them.
var components = []string{"fetcher", "appender", "statestore", "transform", "barrier", "twin", "translate", "failover", "link", "verify", "slots"}

// topLayer wires components together; no component imports it.
var topLayer = []string{"agent", "demo", "cmd", "bench"}

// graph maps a package (relative to the module, "" for the root) to the
// mirrord packages its non-test files import.
type graph map[string][]string

// pure are the packages that decide and never do I/O (DESIGN §12): the
// batch codec and producer state (transform), the one decision per batch
// and the twin relation (twin), the barrier and salt records (barrier).
var pure = []string{"transform", "twin", "barrier"}

// ioImports are the imports by which a package reaches the network, files,
// processes or the operator: a pure package imports none of them directly.
// transform imports franz-go's kgo for its compression codecs only, so kgo
// is not on the list; kadm (the admin client) is.
var ioImports = []string{"net", "os", "syscall", "io/fs", "github.com/twmb/franz-go/pkg/kadm",
	"github.com/hashicorp/go-hclog", "github.com/prometheus/client_golang"}

// rule is one dependency direction: check returns a message naming each
// offending import.
type rule struct {
	name  string
	check func(from, to string) string
}

// under reports whether pkg is dir or inside it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

func underAny(pkg string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return under(pkg, d) })
}

// rules are the directions docs/architecture.md states.
var rules = []rule{
	{"transform is pure", func(from, to string) string {
		if under(from, "transform") && !under(to, "transform") {
			return "transform imports no other mirrord package"
		}
		return ""
	}},
	{"fetcher and appender are independent", func(from, to string) string {
		if under(from, "fetcher") && under(to, "appender") || under(from, "appender") && under(to, "fetcher") {
			return "fetcher and appender never import each other; link joins them"
		}
		return ""
	}},
	{"twin decides from transform alone", func(from, to string) string {
		if under(from, "twin") && !under(to, "twin") && !under(to, "transform") {
			return "twin (the one decision per batch) imports nothing of mirrord but transform"
		}
		return ""
	}},
	{"translation is below failover", func(from, to string) string {
		if under(from, "translate") && under(to, "failover") {
			return "failover translates with package translate, never the other way"
		}
		return ""
	}},
	{"link is the top component", func(from, to string) string {
		if underAny(from, components) && !under(from, "link") && under(to, "link") {
			return "no component imports link: link runs them, and hands translate its anchors and readers and failover a small interface of itself"
		}
		return ""
	}},
	{"components take their own config", func(from, to string) string {
		if underAny(from, components) && under(to, "config") {
			return "a component takes its own config struct; agent translates package config into it"
		}
		return ""
	}},
	{"components are below the top layer", func(from, to string) string {
		if underAny(from, components) && underAny(to, topLayer) {
			return "a component never imports the layer that wires it (agent, demo, cmd, bench)"
		}
		return ""
	}},
	{"only link drives fetcher and appender", func(from, to string) string {
		if underAny(to, []string{"fetcher", "appender"}) && !underAny(from, []string{"link", "agent", "fetcher", "appender"}) {
			return "fetcher and appender are one link's parts: only link runs them (agent builds their metrics)"
		}
		return ""
	}},
	{"plumbing is below the components", func(from, to string) string {
		if under(from, "internal") && !under(from, "internal/testkit") && (underAny(to, components) || underAny(to, topLayer)) {
			return "internal plumbing (internal/kafka, mailbox, backoff, secret, oauth) imports no component"
		}
		return ""
	}},
	// bench (the benchmark tool) and faults (the broker-fault suite and
	// its soak command) are test harnesses, not the product: they start
	// the same clusters the tests start (realkafka).
	{"test kits are for tests", func(from, to string) string {
		if under(to, "internal/testkit") && !under(from, "internal/testkit") && !under(from, "bench") && !under(from, "faults") {
			return "only tests, other test kits, the bench and the fault suite import internal/testkit"
		}
		return ""
	}},
}

// violations applies every rule to every import of g, in a stable order.
func violations(g graph) []string {
	var out []string
	for _, from := range slices.Sorted(func(yield func(string) bool) {
		for p := range g {
			if !yield(p) {
				return
			}
		}
	}) {
		for _, to := range g[from] {
			for _, r := range rules {
				if why := r.check(from, to); why != "" {
					out = append(out, fmt.Sprintf("%s imports %s: %s (rule %q)", from, to, why, r.name))
				}
			}
		}
	}
	return out
}

// impureImports returns, for each pure package of imports (a package
// relative to the module → everything its non-test files import, module
// or not), the imports that do I/O, as "pkg imports imp: why" lines in a
// stable order.
func impureImports(imports map[string][]string) []string {
	var out []string
	for _, from := range slices.Sorted(mapKeys(imports)) {
		if !underAny(from, pure) {
			continue
		}
		for _, imp := range imports[from] {
			for _, bad := range ioImports {
				if imp == bad || strings.HasPrefix(imp, bad+"/") {
					out = append(out, fmt.Sprintf("%s imports %s: a pure package does no I/O (rule %q)", from, imp, "pure packages import no I/O"))
				}
			}
		}
	}
	return out
}

// listPackage is the part of `go list -json` this test reads.
type listPackage struct {
	ImportPath string
	Imports    []string
	Error      *struct{ Err string }
}

// loadGraph reads the module's import graph (non-test imports only) from
// `go list -json ./...`, run at the module's root once per test binary.
func loadGraph(t *testing.T) graph {
	t.Helper()
	graphOnce.Do(func() { loaded, loadedImports, loadErr = listGraph(moduleRoot(t)) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

var (
	graphOnce     sync.Once
	loaded        graph
	loadedImports map[string][]string // every import, module or not
	loadErr       error
)

func listGraph(root string) (graph, map[string][]string, error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list -json ./...: %w\n%s", err, stderr.String())
	}
	g, all := graph{}, map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("decode go list output: %w", err)
		}
		if p.Error != nil {
			return nil, nil, fmt.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		from, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		g[from] = nil
		all[from] = p.Imports
		for _, imp := range p.Imports {
			if to, ok := relative(imp); ok {
				g[from] = append(g[from], to)
			}
		}
	}
	return g, all, nil
}

// relative returns an import path relative to the module, and whether it
// is one of the module's packages.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rest, ok := strings.CutPrefix(path, module+"/")
	return rest, ok
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatal("not inside a module")
	}
	return strings.TrimSuffix(gomod, "/go.mod")
}

// TestDependencyDirections guards the layering docs/architecture.md
// describes: it fails on the change that adds an import against it.
func TestDependencyDirections(t *testing.T) {
	g := loadGraph(t)
	// The graph must hold the packages the rules are about, or a renamed
	// folder would make every rule pass vacuously.
	for _, p := range append(slices.Clone(components), "config", "agent", "internal/kafka/tp", "internal/testkit/kafkatest") {
		if _, ok := g[p]; !ok {
			t.Errorf("package %s is not in go list's output: update the rules with the layout", p)
		}
	}
	for _, v := range violations(g) {
		t.Error(v)
	}
	for _, v := range impureImports(loadedImports) {
		t.Error(v)
	}
}

// TestPureRuleCatches guards against a purity rule that passes everything:
// a pure package importing the network, the file system, the admin client
// or a logger is caught; kgo (transform's codecs) and another package's
// I/O are not its concern.
func TestPureRuleCatches(t *testing.T) {
	for _, tc := range []struct {
		from, imp string
		caught    bool
	}{
		{"twin", "net", true},
		{"transform", "net/http", true},
		{"barrier", "os", true},
		{"twin", "github.com/twmb/franz-go/pkg/kadm", true},
		{"barrier", "github.com/hashicorp/go-hclog", true},
		{"transform", "github.com/prometheus/client_golang/prometheus", true},
		{"transform", "github.com/twmb/franz-go/pkg/kgo", false},
		{"twin", "bytes", false},
		{"twin", "osx", false},
		{"link", "net", false},
	} {
		got := impureImports(map[string][]string{tc.from: {tc.imp}})
		if tc.caught != (len(got) == 1) {
			t.Errorf("%s imports %s: violations %q, want caught %v", tc.from, tc.imp, got, tc.caught)
		}
	}
}

// TestRulesCatchViolations guards against a rule that can never fail:
// each case is a synthetic graph with one import that breaks one rule.
func TestRulesCatchViolations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		rule     string // "" for an import every rule allows
	}{
		{"transform imports a mirrord package", "transform", "internal/kafka/tp", "transform is pure"},
		{"transform imports its own subpackage", "transform", "transform/sub", ""},
		{"fetcher imports appender", "fetcher", "appender", "fetcher and appender are independent"},
		{"appender imports fetcher", "appender", "fetcher", "fetcher and appender are independent"},
		{"statestore imports link", "statestore", "link", "link is the top component"},
		{"link imports config", "link", "config", "components take their own config"},
		{"verify imports config", "verify", "config", "components take their own config"},
		{"barrier imports agent", "barrier", "agent", "components are below the top layer"},
		{"link imports demo", "link", "demo", "components are below the top layer"},
		{"statestore imports fetcher", "statestore", "fetcher", "only link drives fetcher and appender"},
		{"verify imports appender", "verify", "appender", "only link drives fetcher and appender"},
		{"internal/kafka imports a component", "internal/kafka/leaders", "statestore", "plumbing is below the components"},
		{"internal/mailbox imports link", "internal/mailbox", "link", "plumbing is below the components"},
		{"internal/kafka imports agent", "internal/kafka/dial", "agent", "plumbing is below the components"},
		{"non-test package imports a test kit", "link", "internal/testkit/kafkatest", "test kits are for tests"},
		{"twin imports statestore", "twin", "statestore", "twin decides from transform alone"},
		{"translate imports link", "translate", "link", "link is the top component"},
		{"failover imports link", "failover", "link", "link is the top component"},
		{"translate imports failover", "translate", "failover", "translation is below failover"},
		{"verify imports link", "verify", "link", "link is the top component"},
		{"translate imports config", "translate", "config", "components take their own config"},
		{"plumbing imports a test kit", "internal/kafka/tp", "internal/testkit/batchtest", "test kits are for tests"},
		// Imports the layering allows.
		{"a test kit imports a test kit", "internal/testkit/javaclient", "internal/testkit/realkafka", ""},
		{"the bench's harness imports a test kit", "bench/harness", "internal/testkit/realkafka", ""},
		{"the fault suite imports a test kit", "faults", "internal/testkit/realkafka", ""},
		{"agent imports a test kit", "agent", "internal/testkit/logtest", "test kits are for tests"},
		{"demo imports a test kit", "demo", "internal/testkit/kafkatest", "test kits are for tests"},
		{"link imports fetcher", "link", "fetcher", ""},
		{"twin imports transform", "twin", "transform", ""},
		{"failover imports translate", "failover", "translate", ""},
		{"link imports failover", "link", "failover", ""},
		{"agent imports link", "agent", "link", ""},
		{"the fault suite imports link", "faults", "link", ""},
		{"agent imports config", "agent", "config", ""},
		{"agent imports appender", "agent", "appender", ""},
		{"dial reads config's cluster block", "internal/kafka/dial", "config", ""},
		{"a component imports plumbing", "fetcher", "internal/kafka/leaders", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(graph{tc.from: {tc.to}})
			if tc.rule == "" {
				if len(got) != 0 {
					t.Fatalf("%s -> %s: want no violation, got %q", tc.from, tc.to, got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%s -> %s: want one violation of %q, got %q", tc.from, tc.to, tc.rule, got)
			}
			want := fmt.Sprintf("%s imports %s: ", tc.from, tc.to)
			if !strings.HasPrefix(got[0], want) || !strings.Contains(got[0], fmt.Sprintf("(rule %q)", tc.rule)) {
				t.Fatalf("got %q, want it to start with %q and name rule %q", got[0], want, tc.rule)
			}
		})
	}
}
