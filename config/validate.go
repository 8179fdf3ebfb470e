package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed83556561/mirrord/internal/topicconfig"
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
	if a.MemoryLimit != 0 && a.MemoryLimit < 32<<20 {
		c.report("agent.memory_limit", fmt.Sprintf("%d bytes is less than the minimum of 32MiB", a.MemoryLimit),
			"remove it to use the sum of the links' max_buffered_bytes (twice for a link that joins batches) plus 48MiB, or set GOMEMLIMIT=off in the environment for no limit")
	}
	validateAdmin(c, a)

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
	validateReverse(c, cfg.Links)
}

// validateReverse checks links in both directions between two clusters
// over the same topic names (active-active, failback; DESIGN §16). The
// origin check skips a batch that started at the destination by its
// producer ID's region, which preserve delivery keeps; a transactional
// link appends under its session's producer ID, which it records in its
// state topic, and the reverse link reads those records from the topic of
// its own state_topic's name at its source: the two names must be equal,
// or every record would come back once. A batch without a producer ID carries no
// origin at all and would go back and forth for ever, unless the links
// skip them or mirror different topics, which only the operator knows:
// both links must say which (unattributed).
func validateReverse(c checker, links []*Link) {
	for i, a := range links {
		for _, b := range links[i+1:] {
			if a.Source != b.Destination || a.Destination != b.Source || a.Source == a.Destination ||
				a.Rename != DefaultRename || b.Rename != DefaultRename {
				continue
			}
			pair := fmt.Sprintf("links %q and %q mirror in both directions between clusters %q and %q under the same topic names", a.Name, b.Name, a.Source, a.Destination)
			for _, l := range []*Link{a, b} {
				other := a
				if l == a {
					other = b
				}
				if l.Delivery == DeliveryTransactional && l.StateTopic != other.StateTopic {
					c.report("link."+l.Name+".state_topic", pair+fmt.Sprintf(`; link %q delivers transactionally and records its sessions' producer IDs in its state topic %q, and link %q looks for them in the topic named by its own state_topic (%q) at its source to keep those batches from going back`, l.Name, l.StateTopic, other.Name, other.StateTopic),
						`give both links the same state_topic (README, "Active-active and failback")`)
				}
				if !l.unattributedSet {
					c.report("link."+l.Name+".unattributed", pair+"; a batch without a producer ID (a producer with enable.idempotence off) does not say where it was first produced, and forwarded by both links it would go back and forth for ever",
						`set unattributed = "skip" on both links for active-active (README, "Active-active and failback"), or "forward" if the two links mirror different topics`)
				}
			}
		}
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

	validateSASL(c, key+".sasl", cl.SASL)
}

// validateAdmin checks the admin block, and that a listener other hosts
// can reach is not open to them.
func validateAdmin(c checker, a Agent) {
	const key = "agent.admin"
	ad := a.Admin
	// A token whose env or file failed is reported there; it counts as
	// configured, so that its absence is not reported again.
	hasToken := ad.Token != "" || c.ps.hasFailed(key+".token")
	if ad.Token != "" {
		at := key + ".token"
		switch {
		case ad.TokenEnv != "":
			at = key + ".token_env"
		case ad.TokenFile != "":
			at = key + ".token_file"
		}
		if len(ad.Token) < MinAdminTokenLength {
			c.report(at, fmt.Sprintf("the admin token from %s is shorter than %d characters", ad.TokenSource(), MinAdminTokenLength),
				"use a long random token, e.g. the output of: openssl rand -hex 32")
		} else if strings.IndexFunc(ad.Token, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			c.report(at, fmt.Sprintf("the admin token from %s has characters other than visible ASCII", ad.TokenSource()),
				"an HTTP header carries it; use e.g. the output of: openssl rand -hex 32")
		}
	}
	if ad.ProtectMetrics && !hasToken {
		c.report(key+".protect_metrics", "needs an admin token", "set token_env or token_file, or remove protect_metrics")
	}
	if ad.InsecureNoAuth && (hasToken || ad.ClientCAFile != "") {
		c.report(key+".insecure_no_auth", "is set together with a token or client_ca_file",
			"remove insecure_no_auth: the listener is not open without authentication")
	}
	if ad.CertFile != "" && ad.KeyFile == "" {
		c.report(key+".key_file", "required with cert_file", "set key_file to the listener certificate's private key, or remove cert_file")
	}
	if ad.KeyFile != "" && ad.CertFile == "" {
		c.report(key+".cert_file", "required with key_file", "set cert_file to the listener's certificate, or remove key_file")
	}
	if ad.ClientCAFile != "" && ad.CertFile == "" {
		c.report(key+".cert_file", "required with client_ca_file", "client certificates need TLS: set cert_file and key_file")
	}
	if !hasToken && ad.ClientCAFile == "" && !ad.InsecureNoAuth && !a.ListensOnLoopback() &&
		checkHostPort(a.Listen, true) == "" && !c.ps.hasFailed("agent.listen") {
		c.reportAt("agent.listen", key+".token_env",
			fmt.Sprintf("required when agent.listen (%q) is not a loopback address: without it, anyone who can reach the port can pause and resume links", a.Listen),
			"set agent.admin.token_env to the name of an environment variable that holds the admin token, or agent.admin.token_file to a file that holds it; "+
				"or listen on 127.0.0.1; or require client certificates with agent.admin.client_ca_file; "+
				"agent.admin.insecure_no_auth = true accepts it without authentication")
	}
}

// validateSASL checks a cluster's sasl block.
func validateSASL(c checker, key string, s SASL) {
	password, passwordKey := s.Password != "" || s.PasswordEnv != "" || s.PasswordFile != "" || c.ps.hasFailed(key+".password"), key+".password"
	switch {
	case s.PasswordEnv != "":
		passwordKey = key + ".password_env"
	case s.PasswordFile != "":
		passwordKey = key + ".password_file"
	}
	clientSecret := s.ClientSecret != "" || s.ClientSecretEnv != "" || s.ClientSecretFile != "" || c.ps.hasFailed(key+".client_secret")
	clientSecretKey := key + ".client_secret_file"
	if s.ClientSecretEnv != "" {
		clientSecretKey = key + ".client_secret_env"
	}
	// The OAUTHBEARER keys that are set, in schema order.
	var oauthSet []string
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"token_file", s.TokenFile != ""}, {"token_endpoint", s.TokenEndpoint != ""}, {"client_id", s.ClientID != ""},
		{strings.TrimPrefix(clientSecretKey, key+"."), clientSecret}, {"scope", s.Scope != ""}, {"extensions", len(s.Extensions) > 0},
	} {
		if k.set {
			oauthSet = append(oauthSet, k.name)
		}
	}

	switch {
	case s.Mechanism == "":
		if s.Username != "" || password || len(oauthSet) > 0 {
			c.report(key+".mechanism", "required when other sasl keys are set", "set mechanism = "+oneOf(quoteAll(mechanisms)))
		}
	case !contains(mechanisms, s.Mechanism):
		c.enum(key+".mechanism", s.Mechanism, mechanisms)
	case s.Mechanism == MechanismOAuthBearer:
		validateOAuth(c, key, s, clientSecret, clientSecretKey)
		if s.Username != "" {
			c.report(key+".username", "is not used by OAUTHBEARER", "remove it; the token says who mirrord is")
		}
		if password {
			c.report(passwordKey, "is not used by OAUTHBEARER", "remove it; OAUTHBEARER sends a token, from token_file or token_endpoint")
		}
	default:
		if s.Username == "" {
			c.report(key+".username", "required for SASL", "set username")
		}
		if !password {
			c.report(key+".password", "required for SASL",
				"set password_file to a file that holds it, password_env to the name of an environment variable that holds it, or password")
		}
		for _, k := range oauthSet {
			c.report(key+"."+k, "is only for mechanism = \"OAUTHBEARER\"", "remove it, or set mechanism = \"OAUTHBEARER\"")
		}
	}
}

// validateOAuth checks the keys of an OAUTHBEARER sasl block.
func validateOAuth(c checker, key string, s SASL, clientSecret bool, clientSecretKey string) {
	switch {
	case s.TokenFile != "" && s.TokenEndpoint != "":
		c.report(key+".token_endpoint", "token_file and token_endpoint are both set",
			"keep token_file for a token that something else keeps fresh, or token_endpoint for mirrord to get tokens itself")
	case s.TokenFile == "" && s.TokenEndpoint == "":
		c.report(key+".token_file", "required for OAUTHBEARER",
			"set token_file to a file that holds a token, or token_endpoint, client_id and client_secret_file (or client_secret_env) for the client-credentials grant")
	case s.TokenEndpoint != "":
		if msg, hint := checkEndpoint(s.TokenEndpoint); msg != "" {
			c.report(key+".token_endpoint", msg, hint)
		}
		if s.ClientID == "" {
			c.report(key+".client_id", "required with token_endpoint", "set client_id to the OAuth client's ID")
		}
		if !clientSecret {
			c.report(key+".client_secret_file", "required with token_endpoint",
				"set client_secret_file to a file that holds the OAuth client's secret, or client_secret_env to the name of an environment variable that holds it")
		}
	default: // token_file
		for _, k := range []struct {
			key string
			set bool
		}{{key + ".client_id", s.ClientID != ""}, {clientSecretKey, clientSecret}, {key + ".scope", s.Scope != ""}} {
			if k.set {
				c.report(k.key, "is only used with token_endpoint", "remove it; with token_file the token comes from the file")
			}
		}
	}
	var names []string
	for name := range s.Extensions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ek := key + ".extensions." + name
		switch {
		case !extensionKeyRE.MatchString(name):
			c.report(ek, fmt.Sprintf("invalid extension name %q", name), "SASL extension names are letters only (RFC 7628)")
		case name == "auth":
			c.report(ek, `"auth" is not an extension`, "OAUTHBEARER sends the token as auth; remove it")
		case !extensionValueRE.MatchString(s.Extensions[name]):
			c.report(ek, "has characters that an extension value cannot have", "use printable ASCII, spaces and tabs (RFC 7628)")
		}
	}
}

var (
	extensionKeyRE   = regexp.MustCompile(`^[A-Za-z]+$`)
	extensionValueRE = regexp.MustCompile(`^[\x20-\x7e\t\r\n]*$`)
)

// checkEndpoint returns what is wrong with a token endpoint URL, or "". A
// URL with credentials in it is not shown.
func checkEndpoint(s string) (msg, hint string) {
	const hint0 = `write the token endpoint's URL, e.g. "https://idp.example.com/oauth2/token"`
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		if err == nil && u.User != nil {
			return "has credentials in it", "put the client's ID in client_id and its secret in client_secret_file"
		}
		return fmt.Sprintf("%q is not an http or https URL", s), hint0
	case u.User != nil:
		return "has credentials in it", "put the client's ID in client_id and its secret in client_secret_file"
	case u.Scheme == "http" && !isLoopbackHost(u.Hostname()):
		return fmt.Sprintf("%q is not https: the client secret would cross the network unencrypted", s),
			"use https; http is accepted only for a token endpoint on a loopback address"
	case u.Fragment != "":
		return fmt.Sprintf("%q has a fragment", s), "remove the part from #"
	}
	return "", ""
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
	c.positive(key+".produce_timeout", l.ProduceTimeout)
	if l.ProduceTimeout > 0 && l.ProduceTimeout > math.MaxInt32*time.Millisecond {
		c.report(key+".produce_timeout", fmt.Sprintf("%v is longer than a Produce request can say (%v)", l.ProduceTimeout, math.MaxInt32*time.Millisecond), "use a few seconds to a few minutes")
	}
	c.positive(key+".discovery_interval", l.DiscoveryInterval)
	c.positive(key+".group_sync_interval", l.GroupSyncInterval)
	if l.Groups != nil && len(l.Groups.Include) == 0 {
		c.report(key+".groups.include", "at least one pattern is required", `to sync every group write include = [".*"]; to sync none, leave the groups block out`)
	}
	if l.ShareGroups != nil && len(l.ShareGroups.Include) == 0 {
		c.report(key+".share_groups.include", "at least one pattern is required", `to sync every share group write include = [".*"]; to sync none, leave the share_groups block out`)
	}
	c.positive(key+".config_sync_interval", l.ConfigSyncInterval)
	c.positive(key+".acl_sync_interval", l.ACLSyncInterval)
	validateConfigSync(c, key+".config_sync", l.ConfigSync)
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
	switch {
	case l.CoalesceBytes < 0:
		c.report(key+".coalesce_bytes", fmt.Sprintf("%d bytes is negative", l.CoalesceBytes),
			`use "0" to append every source batch alone, or a size such as "1000000" (the default)`)
	case l.CoalesceBytes > l.MaxBufferedBytes && l.MaxBufferedBytes >= MinMaxBufferedBytes:
		c.report(key+".coalesce_bytes", fmt.Sprintf("%d bytes is more than max_buffered_bytes (%d): a run of batches to join must be buffered whole", l.CoalesceBytes, l.MaxBufferedBytes),
			"lower coalesce_bytes; keep it below the destination topics' max.message.bytes (1048588 by default)")
	}
	c.enum(key+".on_offset_out_of_range", string(l.OnOffsetOutOfRange), outOfRanges)
	c.enum(key+".delivery", string(l.Delivery), deliveries)
	c.enum(key+".unattributed", string(l.Unattributed), unattributed)
	c.positive(key+".transaction_timeout", l.TransactionTimeout)
	if l.Delivery == DeliveryTransactional {
		if l.TransactionTimeout > 0 && l.TransactionTimeout < 3*l.CheckpointInterval && !c.ps.hasFailed(ci) {
			c.report(key+".transaction_timeout", fmt.Sprintf("%v is less than three checkpoint intervals (%v): a transaction stays open one checkpoint_interval, and the coordinator aborts it at transaction_timeout",
				l.TransactionTimeout, 3*l.CheckpointInterval), fmt.Sprintf("raise transaction_timeout to at least %v (the default is 1m; brokers cap it at transaction.max.timeout.ms, 15m by default)", 3*l.CheckpointInterval))
		}
	}
}

// validateConfigSync checks a config_sync block: include names only
// settings excluded by default, and never a pinned one.
func validateConfigSync(c checker, key string, cs ConfigSync) {
	var excluded []string
	for _, e := range topicconfig.DefaultExcluded {
		excluded = append(excluded, e.Name())
	}
	for i, name := range cs.Include {
		ik := fmt.Sprintf("%s.include[%d]", key, i)
		if v, ok := topicconfig.Pinned[name]; ok {
			c.report(ik, fmt.Sprintf("%s is pinned to %s on every mirror", name, v),
				"remove it: mirrord forwards batches unchanged, which needs compression.type=producer and message.timestamp.type=CreateTime at the destination")
			continue
		}
		if _, ok := topicconfig.DefaultExclusion(name); !ok {
			c.report(ik, fmt.Sprintf("%q is not excluded by default, so it follows already", name),
				"include only re-enables settings excluded by default, by name: "+strings.Join(excluded, ", "))
		}
	}
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
