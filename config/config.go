package config

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/seed83556561/mirrord/internal/topics"
)

// Defaults, applied by Parse to every key the file and the environment leave
// unset. Default() uses them too.
const (
	DefaultAgentName                   = "mirrord"
	DefaultListen                      = "127.0.0.1:9644"
	DefaultLogLevel                    = "info"
	DefaultLogFormat                   = "text"
	DefaultClientID                    = "mirrord"
	DefaultRename                      = "{topic}"
	DefaultStartFrom                   = StartEarliest
	DefaultStateTopic                  = "__mirror_state"
	DefaultStateTopicPartitions        = int32(1)
	DefaultStateTopicReplicationFactor = int16(-1) // the broker's default.replication.factor
	DefaultCheckpointInterval          = 5 * time.Second
	DefaultSessionTimeout              = 30 * time.Second
	DefaultMaxBufferedBytes            = int64(64 << 20)
	// DefaultCoalesceBytes stays 48,588 bytes below Kafka's default
	// max.message.bytes (1048588): a merged batch's records are re-framed
	// (larger offset and timestamp deltas) or recompressed, so it may come
	// out a little larger than the batches it joins.
	DefaultCoalesceBytes       = int64(1000000)
	DefaultOnOffsetOutOfRange  = OutOfRangeFail
	DefaultProducerStateExpiry = 24 * time.Hour
	DefaultSettleDelay         = 5 * time.Second
	DefaultProduceTimeout      = 30 * time.Second
	DefaultDelivery            = DeliveryPreserve
	DefaultUnattributed        = UnattributedForward
	DefaultTransactionTimeout  = 60 * time.Second
	DefaultDiscoveryInterval   = 30 * time.Second
	DefaultGroupSyncInterval   = 10 * time.Second
	DefaultConfigSyncInterval  = time.Minute
	DefaultACLSyncInterval     = time.Minute
	// DefaultSlots: one session per link.
	DefaultSlots = 1
	// MaxSlots bounds the slots key: each slot is a session with its
	// own transactional.id and lease, and a partition of the link's
	// slots topic.
	MaxSlots                            = 1024
	DefaultDestinationReplicationFactor = int16(-1) // the broker's default.replication.factor
	DefaultCheckCRCs                    = false
	DefaultShutdownTimeout              = 15 * time.Second

	// MinAdminTokenLength is the shortest admin token accepted.
	MinAdminTokenLength = 16

	// MinMaxBufferedBytes is the smallest accepted max_buffered_bytes: one
	// batch of the broker's default maximum size (1 MiB) must fit.
	MinMaxBufferedBytes = int64(1 << 20)
)

// StartFrom is where a partition without a checkpoint starts at the source
// (start_from).
type StartFrom string

// OutOfRange is what a link does when its source position is below the log
// start offset (on_offset_out_of_range).
type OutOfRange string

// Unattributed is what a link does with a batch without a producer ID
// (unattributed, DESIGN §16).
type Unattributed string

// Delivery is how a link appends to the destination (delivery, DESIGN
// §14).
type Delivery string

// Allowed values of the enumerated keys.
const (
	StartEarliest StartFrom = "earliest"
	StartLatest   StartFrom = "latest"

	OutOfRangeFail     OutOfRange = "fail"
	OutOfRangeEarliest OutOfRange = "earliest"

	// DeliveryPreserve keeps the source producer's identity on every
	// forwarded batch; DeliveryTransactional appends as the session's
	// transactional producer, data and checkpoints in one transaction.
	DeliveryPreserve      Delivery = "preserve"
	DeliveryTransactional Delivery = "transactional"

	// UnattributedForward appends batches without a producer ID like any
	// other; UnattributedSkip leaves them out (active-active links: such a
	// batch does not say where it was first produced).
	UnattributedForward Unattributed = "forward"
	UnattributedSkip    Unattributed = "skip"

	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

var (
	logLevels    = []string{"trace", "debug", "info", "warn", "error"}
	logFormats   = []string{"text", "json"}
	startFroms   = []string{string(StartEarliest), string(StartLatest)}
	outOfRanges  = []string{string(OutOfRangeFail), string(OutOfRangeEarliest)}
	deliveries   = []string{string(DeliveryPreserve), string(DeliveryTransactional)}
	unattributed = []string{string(UnattributedForward), string(UnattributedSkip)}
	mechanisms   = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512, MechanismOAuthBearer}
	placeholders = []string{"{topic}", "{source}"}
)

// Config is the validated runtime configuration of one agent.
type Config struct {
	Agent    Agent
	Clusters map[string]*Cluster // by cluster label
	Links    []*Link             // in file order
	File     string              // the file it was parsed from; "" when built in code
}

// Link returns the link called name.
func (c *Config) Link(name string) (*Link, bool) {
	for _, l := range c.Links {
		if l.Name == name {
			return l, true
		}
	}
	return nil, false
}

// Agent is the agent block: the process-wide settings.
type Agent struct {
	Name      string // shown in logs and recorded with the link's session
	Listen    string // host:port of the HTTP listener (metrics, health, admin API)
	LogLevel  string // trace | debug | info | warn | error
	LogFormat string // text | json
	// ShutdownTimeout bounds a graceful stop: the drain of in-flight
	// appends and the final checkpoints of every link.
	ShutdownTimeout time.Duration
	// MemoryLimit is the Go runtime's soft memory limit that `mirrord run`
	// sets (runtime/debug.SetMemoryLimit); 0: AutoMemoryLimit.
	MemoryLimit int64
	// Admin secures the HTTP listener.
	Admin Admin
}

// MemoryHeadroom is what the automatic memory limit allows above the
// links' max_buffered_bytes: the clients' metadata and request buffers,
// per-partition state, goroutine stacks and the runtime, measured at 28 MiB
// of live heap above a 64 MiB buffer with 1,000 partitions, with room for
// the garbage collector to work in.
const MemoryHeadroom = int64(48 << 20)

// AutoMemoryLimit is the memory limit when agent.memory_limit is unset: the
// sum of the links' max_buffered_bytes (twice for a link that joins small
// batches, see MemoryOf) plus MemoryHeadroom. Without a limit Go lets the
// heap grow to twice the live heap before it collects (GOGC=100), which
// put mirrord's resident memory at 2-3.5 times its buffer.
func (c *Config) AutoMemoryLimit() int64 {
	sum := MemoryHeadroom
	for _, l := range c.Links {
		sum += l.MemoryOf()
	}
	return sum
}

// MemoryOf is what the automatic memory limit counts for link l: its
// max_buffered_bytes, twice with coalesce_bytes above 0 (in either
// delivery), where every joined batch in flight is a copy of the fetched
// batches it was joined from, which stay buffered until it is answered (at
// 1,000 partitions the live heap peaked at 120 MB with a 64 MiB buffer,
// and a limit of 112 MiB had the collector take 40% of the CPU).
func (l *Link) MemoryOf() int64 {
	if l.CoalesceBytes > 0 {
		return 2 * l.MaxBufferedBytes
	}
	return l.MaxBufferedBytes
}

// EffectiveMemoryLimit is agent.memory_limit, or AutoMemoryLimit.
func (c *Config) EffectiveMemoryLimit() int64 {
	if c.Agent.MemoryLimit > 0 {
		return c.Agent.MemoryLimit
	}
	return c.AutoMemoryLimit()
}

// ListensOnLoopback reports whether Listen is a loopback address, which
// only processes on the same host (or in the same network namespace) can
// reach.
func (a Agent) ListensOnLoopback() bool { return IsLoopback(a.Listen) }

// IsLoopback reports whether the host of a host:port address is a loopback
// address: localhost, 127.0.0.0/8 or ::1. Any other host, and an empty one
// (every interface), is not; host names other than localhost are not
// resolved.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	return isLoopbackHost(host)
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Admin is the agent's admin block: who may use the HTTP listener and how
// it is encrypted.
//
// With a token, every request under /v1/ (and /metrics with
// ProtectMetrics) needs "Authorization: Bearer <token>". Parse reads Token
// from TokenEnv or TokenFile; the agent reads TokenFile again when it
// changes. Its String, GoString, Format and MarshalJSON never show the
// token.
type Admin struct {
	TokenEnv  string // the environment variable Token was read from, if any
	TokenFile string // the file Token was read from, if any; read again when it changes
	Token     string // never printed

	// ProtectMetrics makes /metrics need the token too.
	ProtectMetrics bool
	// InsecureNoAuth lets the listener be reachable from other hosts
	// without a token or client certificates.
	InsecureNoAuth bool

	// CertFile and KeyFile make the listener serve TLS (both or
	// neither); they are read again when they change.
	CertFile string
	KeyFile  string
	// ClientCAFile makes the listener require a client certificate signed
	// by one of its CAs (mutual TLS), for every request.
	ClientCAFile string
}

// TokenSource says where the token comes from, for messages:
// "environment variable NAME (agent.admin.token_env)", "file PATH
// (agent.admin.token_file)", or "" without a token.
func (a Admin) TokenSource() string {
	switch {
	case a.TokenEnv != "":
		return fmt.Sprintf("environment variable %s (agent.admin.token_env)", a.TokenEnv)
	case a.TokenFile != "":
		return fmt.Sprintf("file %s (agent.admin.token_file)", a.TokenFile)
	case a.Token != "":
		return "the configuration"
	}
	return ""
}

// Cluster is one cluster block: how to reach a Kafka cluster.
//
// Its String, GoString, Format and the SASL's MarshalJSON never show the
// password, so a Cluster can be logged or printed with any verb.
type Cluster struct {
	Name             string
	BootstrapServers []string
	ClientID         string
	ClusterID        string // pins the cluster ID used for the region selector; "" = ask the cluster
	TLS              TLS
	SASL             SASL
}

// TLS configures TLS to the brokers. With Enabled and no CAFile the system
// roots are used; CertFile and KeyFile give a client certificate (both or
// neither); ServerName overrides the host name checked against the
// broker's certificate (default: the host of the broker address).
type TLS struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// SASL configures SASL authentication. Mechanism "" means no SASL.
//
// PLAIN and SCRAM use Username and Password. Parse resolves Password from
// PasswordEnv or PasswordFile, so Password is what the client uses;
// with PasswordFile the client reads the file again when it changes.
//
// OAUTHBEARER uses a token from TokenFile (read again when it changes), or
// one that the client gets from TokenEndpoint with the client-credentials
// grant as ClientID and ClientSecret (resolved from ClientSecretEnv or
// ClientSecretFile), for Scope. Extensions are sent with the token.
type SASL struct {
	Mechanism    string // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER | ""
	Username     string
	Password     string // never printed
	PasswordEnv  string // the environment variable Password was read from, if any
	PasswordFile string // the file Password was read from, if any

	TokenFile        string
	TokenEndpoint    string
	ClientID         string
	ClientSecret     string // never printed
	ClientSecretEnv  string // the environment variable ClientSecret was read from, if any
	ClientSecretFile string // the file ClientSecret was read from, if any
	Scope            string
	Extensions       map[string]string
}

// Link is one link block: what to mirror from Source to Destination (both
// cluster labels) and how.
type Link struct {
	Name        string
	Source      string
	Destination string

	// Include and Exclude are anchored: each matches whole topic names.
	Include []*regexp.Regexp
	Exclude []*regexp.Regexp

	Rename     string    // destination topic template with {topic} and {source}
	StartFrom  StartFrom // earliest | latest: where a partition without a checkpoint starts
	StateTopic string    // on the destination cluster

	StateTopicPartitions        int32
	StateTopicReplicationFactor int16 // -1: the broker's default

	CheckpointInterval  time.Duration
	SessionTimeout      time.Duration
	ProducerStateExpiry time.Duration

	MaxBufferedBytes int64
	// CoalesceBytes bounds a run of a partition's consecutive small
	// batches that transactional delivery appends as one destination
	// batch (issue 23); 0: every source batch is appended alone.
	CoalesceBytes      int64
	OnOffsetOutOfRange OutOfRange // fail | earliest

	// ProduceTimeout is the timeout of every Produce the link sends: how
	// long a destination broker may wait for the in-sync replicas before
	// it answers. It bounds how long an unanswered Produce can stay in a
	// broker, so the link waits that long (plus SettleDelay) before it
	// settles one, and a new session waits it past the previous
	// session's lease.
	ProduceTimeout time.Duration
	// Delivery is how the link appends (preserve | transactional), and
	// TransactionTimeout the transaction timeout of a transactional
	// session (the coordinator aborts a transaction open longer).
	Delivery           Delivery
	TransactionTimeout time.Duration
	// Unattributed is what the link does with batches that carry no
	// producer ID (forward | skip), and ReturnHome forwards batches whose
	// producer ID says they were first produced at the destination
	// (normally skipped: that keeps links in both directions from
	// looping, DESIGN §16).
	Unattributed Unattributed
	ReturnHome   bool
	// SharedDestination says the destination topics have producers of
	// their own (active-active): what the link did not write there is
	// expected, not an error.
	SharedDestination bool
	// unattributedSet: the file sets unattributed (links in both
	// directions must choose).
	unattributedSet bool
	// SettleDelay is the margin past ProduceTimeout before an append that
	// got no answer (a lost connection) is settled against the
	// destination: time for a request that sat in a broker's queue to be
	// processed. An append the broker answered with an error is settled
	// at once.
	SettleDelay time.Duration
	// DiscoveryInterval is how often new source topics and partitions are
	// looked for while the link mirrors.
	DiscoveryInterval time.Duration
	// DestinationReplicationFactor is the replication factor of the
	// destination topics the link creates; -1: the broker's default.
	DestinationReplicationFactor int16
	// CheckCRCs validates the CRC of every fetched batch before it is
	// forwarded (the destination broker checks it anyway).
	CheckCRCs bool
	// Groups selects the source consumer groups whose committed offsets
	// the link translates and commits to the destination (the groups
	// block); nil: no group offset sync.
	Groups *Groups
	// ShareGroups selects the source share groups (KIP-932) whose
	// share-partition start offsets the link translates and sets at the
	// destination (the share_groups block); nil: none.
	ShareGroups *Groups
	// GroupSyncInterval is how often the selected groups and share groups
	// are synced.
	GroupSyncInterval time.Duration
	// ConfigSync says which settings of the source topics their mirrors
	// follow (the config_sync block); ConfigSyncInterval is how often
	// they are synced.
	ConfigSync         ConfigSync
	ConfigSyncInterval time.Duration
	// ACLSync says whether the source's ACLs on the mirrored topics and
	// the synced groups follow to the destination (the acl_sync block;
	// off by default); ACLSyncInterval is how often they are synced.
	ACLSync         ACLSync
	ACLSyncInterval time.Duration
	// Slots is how many slots the link's source partitions are spread
	// over (the slots key): each slot is a session of its own that one
	// of the agents running the link owns at a time, as a Kafka consumer
	// group on the destination cluster hands them out; 1 (the default):
	// one session mirrors the whole link, and the agents that run it
	// stand by for each other.
	Slots int
}

// ACLSync is an acl_sync block. Its fields are those of link.ACLSync, in
// the same order, so that one converts to the other.
type ACLSync struct {
	// Enabled: the link syncs ACLs (default false).
	Enabled bool
	// Write: ALLOW WRITE on topics follows too (default false: not
	// until a failover grants it).
	Write bool
}

// ConfigSync is a config_sync block. Its fields are those of
// link.ConfigSync, in the same order, so that one converts to the other.
type ConfigSync struct {
	// Enabled: the link syncs its topics' settings (default true).
	Enabled bool
	// AllTopics: also the destination topics the link did not create
	// (default false: those are left alone).
	AllTopics bool
	// Include names settings that topicconfig.DefaultExcluded leaves out
	// and that follow after all.
	Include []string
	// Exclude are anchored patterns of settings that never follow; they
	// win over Include.
	Exclude []*regexp.Regexp
}

// Groups is a groups block: anchored patterns over group IDs.
type Groups struct {
	Include []*regexp.Regexp
	Exclude []*regexp.Regexp
}

// Selects reports whether group g is synced: any exclude pattern wins,
// then any include pattern selects.
func (g *Groups) Selects(group string) bool {
	if g == nil {
		return false
	}
	for _, re := range g.Exclude {
		if re.MatchString(group) {
			return false
		}
	}
	for _, re := range g.Include {
		if re.MatchString(group) {
			return true
		}
	}
	return false
}

// Selects reports whether the link mirrors topic: internal topics (names
// starting with "__") and the link's own state topic never, then any
// exclude pattern wins, then any include pattern selects.
func (l *Link) Selects(topic string) bool {
	return topics.Selects(topic, l.StateTopic, l.Include, l.Exclude)
}

// DestinationTopic applies the rename template to a source topic that
// comes from the cluster labelled sourceCluster.
func (l *Link) DestinationTopic(sourceTopic, sourceCluster string) string {
	return topics.Rename(l.Rename, sourceTopic, sourceCluster)
}

// TopicPattern compiles a topics include or exclude pattern the way the
// configuration does: Go RE2 syntax, anchored so that it matches whole
// topic names only ("orders" does not select "orders-eu").
func TopicPattern(expr string) (*regexp.Regexp, error) { return topics.Pattern(expr) }

// Default returns a valid configuration with two clusters, "source" on
// 127.0.0.1:9092 and "destination" on 127.0.0.1:9093, and one link "demo"
// that mirrors every non-internal topic. Every other value is the default.
// Each call returns a new Config that the caller may change.
func Default() *Config {
	all, _ := TopicPattern(".*")
	return &Config{
		Agent: Agent{
			Name:            DefaultAgentName,
			Listen:          DefaultListen,
			LogLevel:        DefaultLogLevel,
			LogFormat:       DefaultLogFormat,
			ShutdownTimeout: DefaultShutdownTimeout,
		},
		Clusters: map[string]*Cluster{
			"source":      {Name: "source", BootstrapServers: []string{"127.0.0.1:9092"}, ClientID: DefaultClientID},
			"destination": {Name: "destination", BootstrapServers: []string{"127.0.0.1:9093"}, ClientID: DefaultClientID},
		},
		Links: []*Link{{
			Name:                         "demo",
			Source:                       "source",
			Destination:                  "destination",
			Include:                      []*regexp.Regexp{all},
			Rename:                       DefaultRename,
			StartFrom:                    DefaultStartFrom,
			StateTopic:                   DefaultStateTopic,
			StateTopicPartitions:         DefaultStateTopicPartitions,
			StateTopicReplicationFactor:  DefaultStateTopicReplicationFactor,
			CheckpointInterval:           DefaultCheckpointInterval,
			SessionTimeout:               DefaultSessionTimeout,
			ProducerStateExpiry:          DefaultProducerStateExpiry,
			MaxBufferedBytes:             DefaultMaxBufferedBytes,
			CoalesceBytes:                DefaultCoalesceBytes,
			OnOffsetOutOfRange:           DefaultOnOffsetOutOfRange,
			ProduceTimeout:               DefaultProduceTimeout,
			Delivery:                     DefaultDelivery,
			TransactionTimeout:           DefaultTransactionTimeout,
			Unattributed:                 DefaultUnattributed,
			SettleDelay:                  DefaultSettleDelay,
			DiscoveryInterval:            DefaultDiscoveryInterval,
			GroupSyncInterval:            DefaultGroupSyncInterval,
			ConfigSync:                   ConfigSync{Enabled: true},
			ConfigSyncInterval:           DefaultConfigSyncInterval,
			ACLSyncInterval:              DefaultACLSyncInterval,
			Slots:                        DefaultSlots,
			DestinationReplicationFactor: DefaultDestinationReplicationFactor,
			CheckCRCs:                    DefaultCheckCRCs,
		}},
	}
}

// redacted replaces a secret in every printed form.
const redacted = "[redacted]"

func hide(secret string) string {
	if secret == "" {
		return ""
	}
	return redacted
}

// fields are s's settings as name, value pairs, secrets redacted, for the
// printed forms; the OAUTHBEARER ones only when set.
func (s SASL) fields() [][2]string {
	f := [][2]string{{"Mechanism", s.Mechanism}, {"Username", s.Username}, {"Password", hide(s.Password)}, {"PasswordEnv", s.PasswordEnv}}
	if s.PasswordFile != "" {
		f = append(f, [2]string{"PasswordFile", s.PasswordFile})
	}
	for _, kv := range [][2]string{
		{"TokenFile", s.TokenFile}, {"TokenEndpoint", s.TokenEndpoint}, {"ClientID", s.ClientID},
		{"ClientSecret", hide(s.ClientSecret)}, {"ClientSecretEnv", s.ClientSecretEnv},
		{"ClientSecretFile", s.ClientSecretFile}, {"Scope", s.Scope},
	} {
		if kv[1] != "" {
			f = append(f, kv)
		}
	}
	if len(s.Extensions) > 0 {
		f = append(f, [2]string{"Extensions", fmt.Sprint(s.Extensions)})
	}
	return f
}

// String shows the SASL settings with the secrets redacted.
func (s SASL) String() string { return formatFields(s.fields(), "%s:%s") }

// GoString is the %#v form, with the secrets redacted.
func (s SASL) GoString() string { return "config.SASL" + formatFields(s.fields(), "%s:%q") }

// Format prints s with any verb without ever showing a secret.
func (s SASL) Format(f fmt.State, verb rune) { formatRedacted(f, verb, s) }

// MarshalJSON encodes s with the secrets redacted, so that a JSON log
// line or API response never carries them.
func (s SASL) MarshalJSON() ([]byte, error) { return marshalFields(s.fields()) }

// fields are a's settings, the token redacted.
func (a Admin) fields() [][2]string {
	return [][2]string{
		{"TokenEnv", a.TokenEnv}, {"TokenFile", a.TokenFile}, {"Token", hide(a.Token)},
		{"ProtectMetrics", fmt.Sprint(a.ProtectMetrics)}, {"InsecureNoAuth", fmt.Sprint(a.InsecureNoAuth)},
		{"CertFile", a.CertFile}, {"KeyFile", a.KeyFile}, {"ClientCAFile", a.ClientCAFile},
	}
}

// String shows the admin settings with the token redacted.
func (a Admin) String() string { return formatFields(a.fields(), "%s:%s") }

// GoString is the %#v form, with the token redacted.
func (a Admin) GoString() string { return "config.Admin" + formatFields(a.fields(), "%s:%q") }

// Format prints a with any verb without ever showing the token.
func (a Admin) Format(f fmt.State, verb rune) { formatRedacted(f, verb, a) }

// MarshalJSON encodes a with the token redacted.
func (a Admin) MarshalJSON() ([]byte, error) { return marshalFields(a.fields()) }

// redactedValue is a type whose printed forms are built from its fields.
type redactedValue interface {
	String() string
	GoString() string
	fields() [][2]string
}

// formatRedacted implements fmt.Formatter for v: %#v is GoString, %v the
// values alone, %q the quoted String, every other verb String. No verb
// reaches the fields themselves, so none can print a secret.
func formatRedacted(f fmt.State, verb rune, v redactedValue) {
	switch {
	case verb == 'v' && f.Flag('#'):
		fmt.Fprint(f, v.GoString())
	case verb == 'v' && !f.Flag('+'):
		var vals []string
		for _, kv := range v.fields() {
			vals = append(vals, kv[1])
		}
		fmt.Fprintf(f, "{%s}", strings.Join(vals, " "))
	case verb == 'q':
		fmt.Fprintf(f, "%q", v.String())
	default:
		fmt.Fprint(f, v.String())
	}
}

func formatFields(fields [][2]string, format string) string {
	parts := make([]string, len(fields))
	for i, kv := range fields {
		parts[i] = fmt.Sprintf(format, kv[0], kv[1])
	}
	sep := " "
	if strings.Contains(format, "%q") {
		sep = ", "
	}
	return "{" + strings.Join(parts, sep) + "}"
}

func marshalFields(fields [][2]string) ([]byte, error) {
	b := []byte{'{'}
	for i, kv := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%q:", kv[0])
		switch kv[1] {
		case "true", "false":
			b = append(b, kv[1]...)
		default:
			b = fmt.Appendf(b, "%q", kv[1])
		}
	}
	return append(b, '}'), nil
}

// String shows the cluster with the SASL password redacted.
func (c Cluster) String() string {
	return fmt.Sprintf("{Name:%s BootstrapServers:%v ClientID:%s ClusterID:%s TLS:%+v SASL:%s}",
		c.Name, c.BootstrapServers, c.ClientID, c.ClusterID, c.TLS, c.SASL)
}

// GoString is the %#v form, with the SASL password redacted.
func (c Cluster) GoString() string {
	return fmt.Sprintf("config.Cluster{Name:%q, BootstrapServers:%#v, ClientID:%q, ClusterID:%q, TLS:%#v, SASL:%#v}",
		c.Name, c.BootstrapServers, c.ClientID, c.ClusterID, c.TLS, c.SASL)
}

// Format prints c with any verb without ever showing the SASL password.
func (c Cluster) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		fmt.Fprint(f, c.GoString())
	case verb == 'v' && !f.Flag('+'):
		fmt.Fprintf(f, "{%s %v %s %s %v %v}", c.Name, c.BootstrapServers, c.ClientID, c.ClusterID, c.TLS, c.SASL)
	case verb == 'q':
		fmt.Fprintf(f, "%q", c.String())
	default:
		fmt.Fprint(f, c.String())
	}
}
