package layout

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// nameProblem says what is wrong with the name of the package at rel (a
// path relative to the module), or "" if nothing is: a franz-go look-alike
// (kfetch, kclient send readers to look for them in franz-go; kafka and
// kafkatest name what they are), or a grab-bag name (STYLE.md: no
// util/common; shared helpers go to internal/<name>). Commands (under a
// cmd folder) are named for their binary: bench/cmd/kfakeserver serves
// franz-go's kfake.
func nameProblem(rel string) string {
	name := path.Base(rel)
	command := slices.Contains(strings.Split(rel, "/"), "cmd")
	switch {
	case !command && strings.HasPrefix(name, "k") && !strings.HasPrefix(name, "kafka"):
		return "named like a franz-go package (k-prefix); name it for what it is"
	case slices.Contains([]string{"util", "utils", "common", "misc", "helpers", "shared"}, name):
		return "a grab-bag name; one concept per package, named by a noun"
	}
	return ""
}

// TestPackageNames guards against a package named like franz-go's (issue
// 14 renamed kfetch and kclient) or a util/common grab bag.
func TestPackageNames(t *testing.T) {
	g := loadGraph(t)
	for _, p := range slices.Sorted(mapKeys(g)) {
		if why := nameProblem(p); why != "" {
			t.Errorf("package %s: %s", p, why)
		}
	}
}

// TestNameRuleCatches guards against a name rule that passes everything.
func TestNameRuleCatches(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		fail bool
	}{
		{"internal/kfetch", true},
		{"internal/kclient", true},
		{"internal/util", true},
		{"common", true},
		{"internal/kafka/rawfetch", false},
		{"internal/testkit/kafkatest", false},
		{"internal/kafka", false},
		{"link", false},
		{"bench/cmd/kfakeserver", false},
	} {
		if got := nameProblem(tc.rel) != ""; got != tc.fail {
			t.Errorf("%s: flagged %v, want %v", tc.rel, got, tc.fail)
		}
	}
}
