package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Defaults, applied by Parse to every key the file and the environment leave
// unset. Default() uses them too.
const (
	DefaultAgentName                    = "mirrord"
	DefaultListen                       = "127.0.0.1:9644"
	DefaultLogLevel                     = "info"
	DefaultLogFormat                    = "text"
	DefaultClientID                     = "mirrord"
	DefaultRename                       = "{topic}"
	DefaultStartFrom                    = StartEarliest
	DefaultStateTopic                   = "__mirror_state"
	DefaultStateTopicPartitions         = int32(1)
	DefaultStateTopicReplicationFactor  = int16(-1) // the broker's default.replication.factor
	DefaultCheckpointInterval           = 5 * time.Second
	DefaultSessionTimeout               = 30 * time.Second
	DefaultMaxBufferedBytes             = int64(64 << 20)
	DefaultOnOffsetOutOfRange           = OutOfRangeFail
	DefaultProducerStateExpiry          = 24 * time.Hour
	DefaultSettleDelay                  = 30 * time.Second
	DefaultDiscoveryInterval            = 30 * time.Second
	DefaultDestinationReplicationFactor = int16(-1) // the broker's default.replication.factor
	DefaultCheckCRCs                    = false
	DefaultShutdownTimeout              = 15 * time.Second

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

// Allowed values of the enumerated keys.
const (
	StartEarliest StartFrom = "earliest"
	StartLatest   StartFrom = "latest"

	OutOfRangeFail     OutOfRange = "fail"
	OutOfRangeEarliest OutOfRange = "earliest"

	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

var (
	logLevels    = []string{"trace", "debug", "info", "warn", "error"}
	logFormats   = []string{"text", "json"}
	startFroms   = []string{string(StartEarliest), string(StartLatest)}
	outOfRanges  = []string{string(OutOfRangeFail), string(OutOfRangeEarliest)}
	mechanisms   = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}
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

// SASL configures SASL authentication. Mechanism "" means no SASL. Parse
// resolves Password from PasswordEnv, so Password is what the client uses.
type SASL struct {
	Mechanism   string // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | ""
	Username    string
	Password    string // never printed
	PasswordEnv string // the environment variable Password was read from, if any
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

	MaxBufferedBytes   int64
	OnOffsetOutOfRange OutOfRange // fail | earliest

	// SettleDelay is how long an append whose outcome is unknown (a
	// timeout, a lost connection) is left to land before the destination
	// is read to settle it.
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
}

// Selects reports whether the link mirrors topic: internal topics (names
// starting with "__") and the link's own state topic never, then any
// exclude pattern wins, then any include pattern selects.
func (l *Link) Selects(topic string) bool {
	if strings.HasPrefix(topic, "__") || topic == l.StateTopic {
		return false
	}
	for _, re := range l.Exclude {
		if re.MatchString(topic) {
			return false
		}
	}
	for _, re := range l.Include {
		if re.MatchString(topic) {
			return true
		}
	}
	return false
}

// DestinationTopic applies the rename template to a source topic that
// comes from the cluster labelled sourceCluster.
func (l *Link) DestinationTopic(sourceTopic, sourceCluster string) string {
	return strings.NewReplacer("{topic}", sourceTopic, "{source}", sourceCluster).Replace(l.Rename)
}

// TopicPattern compiles a topics include or exclude pattern the way the
// configuration does: Go RE2 syntax, anchored so that it matches whole
// topic names only ("orders" does not select "orders-eu").
func TopicPattern(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

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
			OnOffsetOutOfRange:           DefaultOnOffsetOutOfRange,
			SettleDelay:                  DefaultSettleDelay,
			DiscoveryInterval:            DefaultDiscoveryInterval,
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

// String shows the SASL settings with the password redacted.
func (s SASL) String() string {
	return fmt.Sprintf("{Mechanism:%s Username:%s Password:%s PasswordEnv:%s}",
		s.Mechanism, s.Username, hide(s.Password), s.PasswordEnv)
}

// GoString is the %#v form, with the password redacted.
func (s SASL) GoString() string {
	return fmt.Sprintf("config.SASL{Mechanism:%q, Username:%q, Password:%q, PasswordEnv:%q}",
		s.Mechanism, s.Username, hide(s.Password), s.PasswordEnv)
}

// Format prints s with any verb without ever showing the password.
func (s SASL) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		fmt.Fprint(f, s.GoString())
	case verb == 'v' && !f.Flag('+'):
		fmt.Fprintf(f, "{%s %s %s %s}", s.Mechanism, s.Username, hide(s.Password), s.PasswordEnv)
	case verb == 'q':
		fmt.Fprintf(f, "%q", s.String())
	default:
		fmt.Fprint(f, s.String())
	}
}

// MarshalJSON encodes s with the password redacted, so that a JSON log
// line or API response never carries it.
func (s SASL) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"Mechanism":%q,"Username":%q,"Password":%q,"PasswordEnv":%q}`,
		s.Mechanism, s.Username, hide(s.Password), s.PasswordEnv), nil
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
