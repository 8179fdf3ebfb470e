package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checker reports problems of a runtime config at the origin of their key,
// leaving out keys that already failed to decode.
type checker struct {
	where func(key string) (o origin, exact bool)
	ps    *problems
}

func (c checker) report(key, msg, hint string) {
	c.reportAt(key, key, msg, hint)
}

// reportAt reports a problem of key at the origin of at.
func (c checker) reportAt(at, key, msg, hint string) {
	if c.ps.hasFailed(key) {
		return
	}
	o, _ := c.where(at)
	c.ps.add(o, key, msg, hint)
}

func (c checker) enum(key, value string, allowed []string) {
	if !contains(allowed, value) {
		c.report(key, fmt.Sprintf("%q is not allowed", value), "use "+oneOf(allowed))
	}
}

func (c checker) positive(key string, d time.Duration) {
	if d <= 0 {
		c.report(key, fmt.Sprintf("%v is not positive", d), durationHint)
	}
}

// validate checks everything that Parse cannot check while decoding:
// required keys, allowed values, ranges, references between blocks and
// combinations of keys.
func validate(cfg *Config, where func(string) (origin, bool), ps *problems) {
	c := checker{where: where, ps: ps}

	a := cfg.Agent
	if a.Name == "" {
		c.report("agent.name", "must not be empty", fmt.Sprintf("remove it to use the default %q", DefaultAgentName))
	}
	if msg := checkHostPort(a.Listen, true); msg != "" {
		c.report("agent.listen", msg, `write host:port, e.g. "127.0.0.1:9644" or ":9644" for every interface`)
	}
	c.enum("agent.log_level", a.LogLevel, logLevels)
	c.enum("agent.log_format", a.LogFormat, logFormats)
	c.positive("agent.shutdown_timeout", a.ShutdownTimeout)

	var names []string
	for name := range cfg.Clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		validateCluster(c, name, cfg.Clusters[name])
	}

	if len(cfg.Links) == 0 {
		c.report("link", "at least one link block is required", `add link "name" { source = ..., destination = ..., topics { include = [...] } }`)
	}
	seen := map[string]bool{}
	for _, l := range cfg.Links {
		key := "link." + l.Name
		if !labelRE.MatchString(l.Name) {
			c.report("link", fmt.Sprintf("invalid name %q", l.Name), labelHint)
			continue
		}
		if seen[l.Name] {
			c.report(key, fmt.Sprintf("duplicate link %q", l.Name), "each link needs its own name")
			continue
		}
		seen[l.Name] = true
		validateLink(c, key, l, cfg.Clusters, names)
	}
}

func validateCluster(c checker, name string, cl *Cluster) {
	key := "cluster." + name
	switch {
	case !labelRE.MatchString(name):
		c.report("cluster", fmt.Sprintf("invalid name %q", name), labelHint)
		return
	case cl == nil:
		c.report(key, "is nil", "remove it or fill it in")
		return
	case cl.Name != name:
		c.report(key, fmt.Sprintf("Name is %q but the map key is %q", cl.Name, name), "make them equal")
	}
	if len(cl.BootstrapServers) == 0 {
		c.report(key+".bootstrap_servers", "required", `list the brokers as host:port, e.g. ["kafka1:9092", "kafka2:9092"]`)
	}
	for i, s := range cl.BootstrapServers {
		if msg := checkHostPort(s, false); msg != "" {
			c.report(fmt.Sprintf("%s.bootstrap_servers[%d]", key, i), msg, `write host:port, e.g. "kafka1:9092"`)
		}
	}
	if cl.ClientID == "" {
		c.report(key+".client_id", "must not be empty", fmt.Sprintf("remove it to use the default %q", DefaultClientID))
	}

	if t := cl.TLS; t.Enabled {
		if t.CertFile != "" && t.KeyFile == "" {
			c.report(key+".tls.key_file", "required with cert_file", "set key_file to the client certificate's private key, or remove cert_file")
		}
		if t.KeyFile != "" && t.CertFile == "" {
			c.report(key+".tls.cert_file", "required with key_file", "set cert_file to the client certificate, or remove key_file")
		}
	}

	s := cl.SASL
	switch {
	case s.Mechanism == "":
		if s.Username != "" || s.Password != "" || s.PasswordEnv != "" {
			c.report(key+".sasl.mechanism", "required when other sasl keys are set", "set mechanism = "+oneOf(quoteAll(mechanisms)))
		}
	case !contains(mechanisms, s.Mechanism):
		c.enum(key+".sasl.mechanism", s.Mechanism, mechanisms)
	default:
		if s.Username == "" {
			c.report(key+".sasl.username", "required for SASL", "set username")
		}
		if s.Password == "" {
			c.report(key+".sasl.password", "required for SASL",
				"set password, or password_env to the name of an environment variable that holds it")
		}
	}
}

func quoteAll(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = strconv.Quote(v)
	}
	return out
}

func validateLink(c checker, key string, l *Link, clusters map[string]*Cluster, names []string) {
	for _, ref := range []struct{ key, value string }{{"source", l.Source}, {"destination", l.Destination}} {
		k := key + "." + ref.key
		switch _, ok := clusters[ref.value]; {
		case ref.value == "":
			c.report(k, "required", "name one of the cluster blocks: "+strings.Join(names, ", "))
		case !ok:
			hint := fmt.Sprintf("define cluster %q { ... }", ref.value)
			if len(names) > 0 {
				hint += " or use one of: " + strings.Join(names, ", ")
			}
			c.report(k, fmt.Sprintf("cluster %q is not defined", ref.value), hint)
		}
	}
	if l.Source != "" && l.Source == l.Destination {
		c.report(key+".destination", fmt.Sprintf("is the source cluster %q too", l.Source),
			"a link copies from one cluster to another; name two different clusters")
	}

	if len(l.Include) == 0 {
		c.report(key+".topics.include", "at least one pattern is required", `to mirror every topic write include = [".*"]`)
	}
	if msg, hint := checkRename(l.Rename); msg != "" {
		c.report(key+".rename", msg, hint)
	}
	c.enum(key+".start_from", string(l.StartFrom), startFroms)
	if msg := checkTopicName(l.StateTopic); msg != "" {
		c.report(key+".state_topic", msg, `use up to 249 letters, digits, '.', '_' and '-', e.g. "__mirror_state"`)
	}
	if l.StateTopicPartitions < 1 {
		c.report(key+".state_topic_partitions", fmt.Sprintf("%d is out of range", l.StateTopicPartitions), "use 1 to 2147483647")
	}
	if rf := l.StateTopicReplicationFactor; rf < -1 || rf == 0 {
		c.report(key+".state_topic_replication_factor", fmt.Sprintf("%d is out of range", rf), rfHint)
	}
	if rf := l.DestinationReplicationFactor; rf < -1 || rf == 0 {
		c.report(key+".destination_replication_factor", fmt.Sprintf("%d is out of range", rf), rfHint)
	}

	ci, st := key+".checkpoint_interval", key+".session_timeout"
	c.positive(ci, l.CheckpointInterval)
	c.positive(st, l.SessionTimeout)
	c.positive(key+".producer_state_expiry", l.ProducerStateExpiry)
	c.positive(key+".settle_delay", l.SettleDelay)
	c.positive(key+".discovery_interval", l.DiscoveryInterval)
	if l.CheckpointInterval > 0 && l.SessionTimeout > 0 && 3*l.CheckpointInterval > l.SessionTimeout && !c.ps.hasFailed(st) {
		// Reported at whichever of the two was set, checkpoint_interval first.
		at := ci
		if _, set := c.where(ci); !set {
			at = st
		}
		c.reportAt(at, ci, fmt.Sprintf("%v is more than session_timeout/3 (%v); a session renews its lease by checkpointing, at least three times per session_timeout",
			l.CheckpointInterval, l.SessionTimeout/3),
			fmt.Sprintf("lower checkpoint_interval to at most %v, or raise session_timeout to at least %v", l.SessionTimeout/3, 3*l.CheckpointInterval))
	}

	if l.MaxBufferedBytes < MinMaxBufferedBytes {
		c.report(key+".max_buffered_bytes", fmt.Sprintf("%d bytes is less than the minimum of 1MiB", l.MaxBufferedBytes),
			`one maximum-size batch must fit; use at least "1MiB", the default is "64MiB"`)
	}
	c.enum(key+".on_offset_out_of_range", string(l.OnOffsetOutOfRange), outOfRanges)
}

const rfHint = "use -1 for the broker's default, or 1 to 32767"

// checkHostPort returns what is wrong with a host:port address, or "".
// An empty host (":9644", every interface) and port 0 are allowed only for
// a listener.
func checkHostPort(s string, listener bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port", s)
	}
	if host == "" && !listener {
		return fmt.Sprintf("%q has no host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !listener) {
		return fmt.Sprintf("%q has an invalid port", s)
	}
	return ""
}

var topicNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// checkTopicName returns what is wrong with a Kafka topic name, or "".
func checkTopicName(s string) string {
	if !topicNameRE.MatchString(s) || s == "." || s == ".." {
		return fmt.Sprintf("%q is not a valid topic name", s)
	}
	return ""
}

// checkRename returns what is wrong with a rename template, or "".
func checkRename(tmpl string) (msg, hint string) {
	const which = "the placeholders are {topic} and {source}"
	hasTopic := false
	rest := tmpl
	var literal strings.Builder
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			literal.WriteString(rest)
			break
		}
		literal.WriteString(rest[:open])
		if rest[open] == '}' {
			return fmt.Sprintf("unmatched } in %q", tmpl), which
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return fmt.Sprintf("unclosed { in %q", tmpl), which
		}
		ph := rest[open : open+end+1]
		if !contains(placeholders, ph) {
			return fmt.Sprintf("unknown placeholder %s in %q", ph, tmpl), which
		}
		hasTopic = hasTopic || ph == "{topic}"
		rest = rest[open+end+1:]
	}
	if !hasTopic {
		return fmt.Sprintf("%q has no {topic} placeholder", tmpl), `include {topic}, e.g. "{source}.{topic}"`
	}
	if lit := literal.String(); lit != "" && !regexp.MustCompile(`^[A-Za-z0-9._-]*$`).MatchString(lit) {
		return fmt.Sprintf("%q has characters that are not allowed in topic names", tmpl), "use letters, digits, '.', '_' and '-' around the placeholders"
	}
	return "", ""
}
