package realkafka

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The Apache Kafka versions the real tier is pinned to: the newest 4.x and
// the newest 3.9.x that Maven Central serves and that start here (3.9.3 is
// not published).
const (
	Kafka4 = "4.4.0"
	Kafka3 = "3.9.2"
)

// Log4j is the version of the log4j2 backend (log4j-api, log4j-core and the
// SLF4J binding) added to a broker's classpath when the Kafka release does
// not bring log4j2 itself (3.x); a release that does (4.x) keeps its own and
// gets the binding of that version.
const Log4j = "2.25.3"

// EnvVersions is the environment variable that switches the real tier on.
// EnvCache overrides the cache root (default $XDG_CACHE_HOME/mirrord or
// ~/.cache/mirrord).
const (
	EnvVersions = "MIRRORD_TEST_KAFKA"
	EnvCache    = "MIRRORD_KAFKA_CACHE"
)

// Pinned lists the pinned versions, newest first.
func Pinned() []string { return []string{Kafka4, Kafka3} }

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// Versions reads MIRRORD_TEST_KAFKA: empty gives none (the kfake tier
// only), "all" gives every pinned version, anything else is a comma
// separated list of versions, each a pinned one or something that looks like
// a Kafka version (4.3.1, 3.9.0, 4.1.0-rc1).
func Versions() ([]string, error) {
	return parseVersions(os.Getenv(EnvVersions))
}

func parseVersions(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return nil, nil
	case "all":
		return Pinned(), nil
	}
	var out []string
	seen := map[string]bool{}
	for s := range strings.SplitSeq(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !versionRE.MatchString(s) {
			return nil, fmt.Errorf("%s=%q: %q is not a Kafka version (want \"all\" or a list such as %s,%s)", EnvVersions, v, s, Kafka4, Kafka3)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s=%q names no version (want \"all\" or a list such as %s,%s)", EnvVersions, v, Kafka4, Kafka3)
	}
	return out, nil
}

// major returns the major version number of a Kafka version (4 for 4.4.0).
func major(version string) int {
	m, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return m
}
