package topics

import (
	"regexp"
	"testing"
)

// TestSelects guards the order of the selection rules: internal and state
// topics never, exclude before include, anchored patterns.
func TestSelects(t *testing.T) {
	pat := func(exprs ...string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, e := range exprs {
			re, err := Pattern(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, re)
		}
		return out
	}
	for _, tc := range []struct {
		name, topic      string
		include, exclude []string
		want             bool
	}{
		{"included", "orders", []string{"orders"}, nil, true},
		{"anchored", "orders-eu", []string{"orders"}, nil, false},
		{"internal", "__consumer_offsets", []string{".*"}, nil, false},
		{"state topic", "state", []string{".*"}, nil, false},
		{"exclude wins", "orders", []string{".*"}, []string{"ord.*"}, false},
		{"no include", "orders", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Selects(tc.topic, "state", pat(tc.include...), pat(tc.exclude...)); got != tc.want {
				t.Fatalf("Selects(%q) = %v, want %v", tc.topic, got, tc.want)
			}
		})
	}
	if got := Rename("{source}.{topic}", "orders", "eu"); got != "eu.orders" {
		t.Fatalf("Rename = %q, want eu.orders", got)
	}
}
