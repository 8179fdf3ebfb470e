// Package topics holds the one definition of which source topics a link
// mirrors and what their mirrors are called, shared by package config
// (which validates a link block and answers verify and the demo) and
// package link (which takes its own settings and must not import config).
// It is pure: no I/O, no state, no goroutines.
package topics

import (
	"regexp"
	"strings"
)

// Selects reports whether a link with the given state topic and patterns
// mirrors topic: internal topics (names starting with "__") and the
// link's own state topic never, then any exclude pattern wins, then any
// include pattern selects.
func Selects(topic, stateTopic string, include, exclude []*regexp.Regexp) bool {
	if strings.HasPrefix(topic, "__") || topic == stateTopic {
		return false
	}
	for _, re := range exclude {
		if re.MatchString(topic) {
			return false
		}
	}
	for _, re := range include {
		if re.MatchString(topic) {
			return true
		}
	}
	return false
}

// Rename applies a rename template ({topic} and {source}) to a source
// topic that comes from the cluster labelled sourceCluster.
func Rename(template, sourceTopic, sourceCluster string) string {
	return strings.NewReplacer("{topic}", sourceTopic, "{source}", sourceCluster).Replace(template)
}

// Pattern compiles a topics include or exclude pattern: Go RE2 syntax,
// anchored so that it matches whole topic names only ("orders" does not
// select "orders-eu").
func Pattern(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}
