package realkafka

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Listener names the launcher reserves: the KRaft quorum listener and the
// inter-broker listener. Both are PLAINTEXT on loopback whatever the client
// listeners are, so brokers need no credentials of their own; the INTERNAL
// listener is also what the launcher asks for Metadata, and a test may use
// it (ListenerAddrs(Internal)) for administration such as creating SCRAM
// users before it connects through an authenticated listener.
const (
	Controller = "CONTROLLER"
	Internal   = "INTERNAL"
)

// Security protocols of a listener.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SASL mechanisms a listener can enable.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
)

// FeatureTransactionVersion is the feature that selects the transaction
// protocol at format time: a fresh 4.x format finalizes 2 (KIP-890: a
// transactional producer's epoch is bumped at every commit or abort and its
// sequences restart at 0); Features{FeatureTransactionVersion: 0} keeps the
// protocol of 3.x.
const FeatureTransactionVersion = "transaction.version"

// Listener is a client listener every node opens.
type Listener struct {
	// Name is the listener name (upper case letters, digits, _), not
	// CONTROLLER or INTERNAL.
	Name string
	// Protocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
	Protocol string
	// Mechanisms are the SASL mechanisms enabled (SASL_* only): PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER. SCRAM users live in the
	// cluster metadata: a test creates them with kadm's AlterUserSCRAMs
	// (through the INTERNAL listener, say) and may need to retry its first
	// login until every broker has seen them. OAUTHBEARER is set up with
	// Kafka's unsecured validator (OAuthBearerUnsecuredValidatorCallbackHandler:
	// any unsigned JWT with a sub claim is accepted); Props can replace it.
	Mechanisms []string
	// PlainUsers are the PLAIN mechanism's users and passwords (they are
	// written into the listener's JAAS configuration).
	PlainUsers map[string]string
	// TLS is the certificate material for SSL and SASL_SSL (NewCerts).
	TLS *Certs
	// Props are more properties of this listener, named without their
	// "listener.name.<name>." prefix ("ssl.client.auth": "required").
	Props map[string]string
}

// Config says what cluster Start starts. The zero value is a one-node
// cluster of Kafka4 with a PLAINTEXT listener and a random cluster ID.
type Config struct {
	// Version is the Kafka version (default Kafka4).
	Version string
	// ClusterID is the cluster's ID: a UUID in 22-character unpadded
	// base64url, the form Kafka prints (default: a random one).
	ClusterID string
	// Nodes is the number of combined-mode (broker and controller) nodes:
	// 1, 3 or 5 (default 1). Their node IDs are 1..Nodes.
	Nodes int
	// Listeners are the client listeners (default: one PLAINTEXT listener
	// named PLAINTEXT). The first is the default one, whose addresses Addrs
	// returns.
	Listeners []Listener
	// Advertise, if set, chooses the address node advertises for listener
	// (a client listener or INTERNAL), given the loopback address it
	// listens on; for a TCP proxy in front of a broker, say. It is called
	// once per node and listener, before any node starts.
	Advertise func(node int, listener, listenAddr string) string
	// BrokerProps override or add to every node's properties; an empty
	// value removes a property.
	BrokerProps map[string]string
	// Features are finalized at format time ("-f name=level"), e.g.
	// FeatureTransactionVersion: 0. Kafka 3.9 knows fewer features.
	Features map[string]int
	// Heap is each JVM's heap (-Xms and -Xmx, default "512m").
	Heap string
	// JVMArgs are more JVM arguments for each node.
	JVMArgs []string
	// ShortLived runs the nodes' JVMs with the C1 compiler only
	// (-XX:TieredStopAtLevel=1): about a third less CPU for a start and the
	// minutes after it, a lower peak later. ForTest and Shared set it, for
	// clusters that live for one test package; the bench and the fault
	// suite, whose figures are the brokers', leave it off.
	ShortLived bool
	// Dir holds the nodes' directories (node-<id>: properties, data, log).
	// Default: a fresh temporary directory, removed by Close unless Keep
	// was called. A directory the caller names is never removed.
	Dir string
	// StartTimeout bounds Start (default 2m, also when ctx allows longer);
	// StopTimeout bounds a controlled shutdown before SIGKILL (default 30s).
	StartTimeout, StopTimeout time.Duration

	noPdeathsig bool // tests only: leave the JVM running when its starter dies
}

var (
	listenerRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	heapRE     = regexp.MustCompile(`^[0-9]+[kKmMgG]$`)
)

// validate fills defaults and returns every problem at once.
func (c *Config) validate() error {
	if c.Version == "" {
		c.Version = Kafka4
	}
	if c.ClusterID == "" {
		c.ClusterID = NewClusterID()
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if len(c.Listeners) == 0 {
		c.Listeners = []Listener{{Name: "PLAINTEXT", Protocol: Plaintext}}
	}
	if c.Heap == "" {
		c.Heap = "512m"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 2 * time.Minute
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 30 * time.Second
	}
	var errs []error
	if !versionRE.MatchString(c.Version) {
		errs = append(errs, fmt.Errorf("version %q is not a Kafka version", c.Version))
	}
	if err := ValidateClusterID(c.ClusterID); err != nil {
		errs = append(errs, err)
	}
	if c.Nodes != 1 && c.Nodes != 3 && c.Nodes != 5 {
		errs = append(errs, fmt.Errorf("nodes %d: want 1, 3 or 5 (an even quorum tolerates no more failures than one node fewer)", c.Nodes))
	}
	if !heapRE.MatchString(c.Heap) {
		errs = append(errs, fmt.Errorf("heap %q: want a size such as 512m", c.Heap))
	}
	seen := map[string]bool{Controller: true, Internal: true}
	for i, l := range c.Listeners {
		p := fmt.Sprintf("listeners[%d] %q", i, l.Name)
		switch {
		case !listenerRE.MatchString(l.Name):
			errs = append(errs, fmt.Errorf("%s: a listener name is upper case letters, digits and _", p))
		case seen[l.Name]:
			errs = append(errs, fmt.Errorf("%s: name taken (CONTROLLER and INTERNAL are the launcher's)", p))
		}
		seen[l.Name] = true
		sasl := l.Protocol == SASLPlaintext || l.Protocol == SASLSSL
		tls := l.Protocol == SSL || l.Protocol == SASLSSL
		switch l.Protocol {
		case Plaintext, SSL, SASLPlaintext, SASLSSL:
		default:
			errs = append(errs, fmt.Errorf("%s: protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", p, l.Protocol))
		}
		if sasl && len(l.Mechanisms) == 0 {
			errs = append(errs, fmt.Errorf("%s: %s needs SASL mechanisms", p, l.Protocol))
		}
		if !sasl && len(l.Mechanisms) > 0 {
			errs = append(errs, fmt.Errorf("%s: SASL mechanisms on a %s listener", p, l.Protocol))
		}
		for _, m := range l.Mechanisms {
			switch m {
			case Plain, ScramSHA256, ScramSHA512, OAuthBearer:
			default:
				errs = append(errs, fmt.Errorf("%s: SASL mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", p, m))
			}
		}
		if tls {
			if _, err := l.TLS.listenerProps(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %w", p, l.Protocol, err))
			}
		}
	}
	return errors.Join(errs...)
}

// NewClusterID returns a random cluster ID in Kafka's form. Like Kafka's
// Uuid.randomUuid it never starts with "-", which command lines would take
// for an option.
func NewClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// ValidateClusterID checks that id is a UUID in 22-character unpadded
// base64url, the only form kafka-storage format accepts.
func ValidateClusterID(id string) error {
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(id) != 22 || len(b) != 16 {
		return fmt.Errorf("cluster ID %q: want a UUID in 22-character unpadded base64url (such as %s)", id, NewClusterID())
	}
	zero := true
	for _, c := range b {
		zero = zero && c == 0
	}
	if zero {
		return fmt.Errorf("cluster ID %q: the zero UUID is reserved", id)
	}
	return nil
}

// nodeProps builds the properties of node id. listen[l] is the port of
// listener l on the node, adv[l] the address it advertises.
func (c *Config) nodeProps(id int, dataDir string, voters string, listen map[string]int, adv map[string]string) (map[string]string, error) {
	n := c.Nodes
	rf := min(3, n)
	minISR := min(2, n)
	listeners := []string{fmt.Sprintf("%s://127.0.0.1:%d", Controller, listen[Controller]), fmt.Sprintf("%s://127.0.0.1:%d", Internal, listen[Internal])}
	advertised := []string{Internal + "://" + adv[Internal]}
	protoMap := []string{Controller + ":PLAINTEXT", Internal + ":PLAINTEXT"}
	for _, l := range c.Listeners {
		listeners = append(listeners, fmt.Sprintf("%s://127.0.0.1:%d", l.Name, listen[l.Name]))
		advertised = append(advertised, l.Name+"://"+adv[l.Name])
		protoMap = append(protoMap, l.Name+":"+l.Protocol)
	}
	p := map[string]string{
		"process.roles":                            "broker,controller",
		"node.id":                                  fmt.Sprint(id),
		"controller.quorum.voters":                 voters,
		"controller.listener.names":                Controller,
		"inter.broker.listener.name":               Internal,
		"listeners":                                strings.Join(listeners, ","),
		"advertised.listeners":                     strings.Join(advertised, ","),
		"listener.security.protocol.map":           strings.Join(protoMap, ","),
		"log.dirs":                                 dataDir,
		"num.partitions":                           "1",
		"default.replication.factor":               fmt.Sprint(rf),
		"offsets.topic.replication.factor":         fmt.Sprint(rf),
		"offsets.topic.num.partitions":             "4",
		"transaction.state.log.replication.factor": fmt.Sprint(rf),
		"transaction.state.log.min.isr":            fmt.Sprint(minISR),
		"transaction.state.log.num.partitions":     "4",
		"group.initial.rebalance.delay.ms":         "0",
		"auto.create.topics.enable":                "false",
		"log.cleaner.threads":                      "1",
		"log.cleaner.backoff.ms":                   "500",
		"log.cleaner.dedupe.buffer.size":           fmt.Sprint(16 << 20),
	}
	if major(c.Version) >= 4 {
		p["share.coordinator.state.topic.replication.factor"] = fmt.Sprint(rf)
		p["share.coordinator.state.topic.min.isr"] = fmt.Sprint(minISR)
	}
	for _, l := range c.Listeners {
		pre := "listener.name." + strings.ToLower(l.Name) + "."
		if l.Protocol == SSL || l.Protocol == SASLSSL {
			tp, err := l.TLS.listenerProps()
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", l.Name, err)
			}
			for k, v := range tp {
				p[pre+k] = v
			}
		}
		if len(l.Mechanisms) > 0 {
			p[pre+"sasl.enabled.mechanisms"] = strings.Join(l.Mechanisms, ",")
		}
		for _, m := range l.Mechanisms {
			mp := pre + strings.ToLower(m) + "."
			switch m {
			case Plain:
				var users []string
				for u, pw := range l.PlainUsers {
					users = append(users, fmt.Sprintf("user_%s=%s", u, jaasQuote(pw)))
				}
				sort.Strings(users)
				p[mp+"sasl.jaas.config"] = "org.apache.kafka.common.security.plain.PlainLoginModule required " + strings.Join(users, " ") + ";"
			case ScramSHA256, ScramSHA512:
				p[mp+"sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
			case OAuthBearer:
				p[mp+"sasl.jaas.config"] = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
				p[mp+"sasl.server.callback.handler.class"] = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
			}
		}
		for k, v := range l.Props {
			p[pre+k] = v
		}
	}
	for k, v := range c.BrokerProps {
		if v == "" {
			delete(p, k)
		} else {
			p[k] = v
		}
	}
	return p, nil
}

func jaasQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// propsFile renders properties in java.util.Properties syntax, sorted.
func propsFile(p map[string]string) []byte {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	esc := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)
	var b strings.Builder
	b.WriteString("# written by mirrord's realkafka test kit\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", esc.Replace(k), esc.Replace(p[k]))
	}
	return []byte(b.String())
}

const log4j2XML = `<?xml version="1.0" encoding="UTF-8"?>
<!-- written by mirrord's realkafka test kit: everything to stdout, which is the node's log file -->
<Configuration status="warn">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d{ISO8601}] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Root level="info"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
`

// log4j2ToolsXML is the logging of kafka-storage format: warnings only (it
// prints what it does on stdout).
const log4j2ToolsXML = `<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="out" target="SYSTEM_ERR"><PatternLayout pattern="[%d{ISO8601}] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers><Root level="warn"><AppenderRef ref="out"/></Root></Loggers>
</Configuration>
`
