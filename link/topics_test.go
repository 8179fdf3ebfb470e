package link

import (
	"regexp"
	"slices"
	"testing"

	"github.com/seed83556561/mirrord/config"
)

// Guards the topic names discovery asks the source about directly: a
// pattern that names a finite set of topics gives exactly them (a topic in
// it that the principal may not describe is then an error, not a topic
// silently left out); a pattern without bound gives none.
func TestNamedTopics(t *testing.T) {
	cases := []struct {
		include []string
		exclude []string
		want    []string
	}{
		{[]string{"orders"}, nil, []string{"orders"}},
		{[]string{`orders|payments`}, nil, []string{"orders", "payments"}},
		{[]string{`orders\.(eu|us)`, "audit"}, nil, []string{"audit", "orders.eu", "orders.us"}},
		{[]string{`t[0-2]`}, nil, []string{"t0", "t1", "t2"}},
		{[]string{`logs-?x`}, nil, []string{"logs-x", "logsx"}},
		{[]string{`orders|payments`}, []string{"pay.*"}, []string{"orders"}},
		{[]string{`__consumer_offsets|orders`, "__mirror_state"}, nil, []string{"orders"}}, // never mirrored
		{[]string{`orders\..*`}, nil, nil},
		{[]string{`.*`}, nil, nil},
		{[]string{`t[0-9]{3}`}, nil, nil},  // a repetition: not enumerated
		{[]string{`(?i)orders`}, nil, nil}, // case folding: not enumerated
		{[]string{`a b|c`}, nil, nil},      // not a topic name
		{[]string{`[a-z][a-z]`}, nil, nil}, // more than maxNamed
		{[]string{`orders`, `x.*`}, nil, []string{"orders"}},
	}
	for _, tc := range cases {
		l := settingsOf(config.Default().Links[0])
		l.Include, l.Exclude = nil, nil
		for _, p := range tc.include {
			re, err := config.TopicPattern(p)
			if err != nil {
				t.Fatal(err)
			}
			l.Include = append(l.Include, re)
		}
		for _, p := range tc.exclude {
			l.Exclude = append(l.Exclude, regexp.MustCompile(`^(?:`+p+`)$`))
		}
		if got := namedTopics(&l); !slices.Equal(got, tc.want) {
			t.Errorf("include %q exclude %q: named %q, want %q", tc.include, tc.exclude, got, tc.want)
		}
	}
}
