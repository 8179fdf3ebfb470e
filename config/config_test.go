package config

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// base is two valid clusters, lines 1 to 6.
const base = `cluster "a" {
  bootstrap_servers = ["a:9092"]
}
cluster "b" {
  bootstrap_servers = ["b:9092"]
}
`

// withLink returns base and a valid link "l" on lines 7 to 10, then each
// extra line inside the link, from line 11 at column 3, then the closing
// brace.
func withLink(extra ...string) string {
	var b strings.Builder
	b.WriteString(base)
	b.WriteString("link \"l\" {\n  source      = \"a\"\n  destination = \"b\"\n  topics { include = [\"t\"] }\n")
	for _, l := range extra {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// TestReverseTransactionalLinks: links in both directions may deliver
// transactionally when they share a state topic name (the reverse link
// reads the other's sessions' producer IDs there, DESIGN §16).
func TestReverseTransactionalLinks(t *testing.T) {
	cfg := mustParse(t, withLink(`unattributed = "skip"`, `delivery = "transactional"`)+
		"link \"r\" {\n  source      = \"b\"\n  destination = \"a\"\n  topics { include = [\"t\"] }\n  unattributed = \"skip\"\n  delivery = \"transactional\"\n}\n")
	if len(cfg.Links) != 2 || cfg.Links[0].Delivery != DeliveryTransactional || cfg.Links[1].Delivery != DeliveryTransactional {
		t.Fatalf("links %+v %+v", cfg.Links[0], cfg.Links[1])
	}
}

func mustParse(t *testing.T, src string, environ ...string) *Config {
	t.Helper()
	cfg, err := Parse("t.hcl", []byte(src), environ)
	if err != nil {
		t.Fatalf("parse:\n%v", err)
	}
	return cfg
}

func patterns(t *testing.T, exprs ...string) []*regexp.Regexp {
	t.Helper()
	var out []*regexp.Regexp
	for _, e := range exprs {
		re, err := TopicPattern(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, re)
	}
	return out
}

// comparableLink and comparableOf replace compiled patterns by their text so that configs can
// be compared with reflect.DeepEqual.
type comparableLink struct {
	Link
	Include, Exclude []string
}

func comparableOf(c *Config) (Config, []comparableLink) {
	var links []comparableLink
	for _, l := range c.Links {
		cl := comparableLink{Link: *l}
		cl.Link.Include, cl.Link.Exclude = nil, nil
		for _, re := range l.Include {
			cl.Include = append(cl.Include, re.String())
		}
		for _, re := range l.Exclude {
			cl.Exclude = append(cl.Exclude, re.String())
		}
		links = append(links, cl)
	}
	out := *c
	out.Links = nil
	return out, links
}

func assertConfig(t *testing.T, got, want *Config) {
	t.Helper()
	gc, gl := comparableOf(got)
	wc, wl := comparableOf(want)
	if !reflect.DeepEqual(gc, wc) {
		t.Errorf("config:\n got %#v\nwant %#v", gc, wc)
	}
	for name, c := range want.Clusters { // %#v redacts secrets
		if g, ok := got.Clusters[name]; ok && (g.SASL.Password != c.SASL.Password || g.SASL.ClientSecret != c.SASL.ClientSecret) {
			t.Errorf("cluster %s: password or client secret differs", name)
		}
	}
	if got.Agent.Admin.Token != want.Agent.Admin.Token {
		t.Errorf("admin token differs")
	}
	if !reflect.DeepEqual(gl, wl) {
		t.Errorf("links:\n got %+v\nwant %+v", gl, wl)
	}
}

// Guards against any key being decoded into the wrong field or losing its
// value, and against defaults leaking over set values.
func TestParseGoodFile(t *testing.T) {
	const src = `
agent {
  name       = "agent-7"
  listen     = ":9700"
  log_level  = "debug"
  log_format = "json"
  shutdown_timeout = "40s"
  memory_limit     = "512MiB"
  admin {
    token_env       = "ADMIN_TOKEN"
    protect_metrics = true
    cert_file       = "/tls/admin.pem"
    key_file        = "/tls/admin-key.pem"
    client_ca_file  = "/tls/admin-clients.pem"
  }
}

cluster "src" {
  bootstrap_servers = ["k1:9093", "k2:9093"]
  client_id         = "mirror-src"
  cluster_id        = "MkU3OEVBNTcwNTJENDM2Qg"
  tls {
    ca_file              = "/tls/ca.pem"
    cert_file            = "/tls/c.pem"
    key_file             = "/tls/k.pem"
    server_name          = "kafka.internal"
    insecure_skip_verify = true
  }
  sasl {
    mechanism    = "SCRAM-SHA-256"
    username     = "mirror"
    password_env = "SRC_PW"
  }
}

cluster "dst" {
  bootstrap_servers = ["d1:9092"]
  tls {
    enabled = false
    ca_file = "/tls/dst-ca.pem"
  }
  sasl {
    mechanism = "PLAIN"
    username  = "u"
    password  = "p"
  }
}

link "orders" {
  source      = "src"
  destination = "dst"
  topics {
    include = ["orders\\..*", "payments"]
    exclude = ["orders\\.tmp"]
  }
  rename                         = "{source}.{topic}"
  start_from                     = "latest"
  state_topic                    = "__orders_state"
  state_topic_partitions         = 3
  state_topic_replication_factor = 2
  checkpoint_interval            = "2s"
  session_timeout                = "9s"
  max_buffered_bytes             = "16MiB"
  coalesce_bytes                 = "512KiB"
  on_offset_out_of_range         = "earliest"
  producer_state_expiry          = "1h30m"
  produce_timeout                = "20s"
  delivery                       = "transactional"
  transaction_timeout            = "2m"
  settle_delay                   = "45s"
  discovery_interval             = "1m"
  destination_replication_factor = 3
  check_crcs                     = true
}

link "back" {
  source      = "dst"
  destination = "src"
  topics { include = [".*"] }
  max_buffered_bytes = 2097152
}
`
	got := mustParse(t, src, "SRC_PW=from-env", "UNRELATED=x", "ADMIN_TOKEN=admin-token-0123456789")
	want := &Config{
		Agent: Agent{Name: "agent-7", Listen: ":9700", LogLevel: "debug", LogFormat: "json", ShutdownTimeout: 40 * time.Second, MemoryLimit: 512 << 20,
			Admin: Admin{TokenEnv: "ADMIN_TOKEN", Token: "admin-token-0123456789", ProtectMetrics: true,
				CertFile: "/tls/admin.pem", KeyFile: "/tls/admin-key.pem", ClientCAFile: "/tls/admin-clients.pem"}},
		Clusters: map[string]*Cluster{
			"src": {
				Name: "src", BootstrapServers: []string{"k1:9093", "k2:9093"}, ClientID: "mirror-src",
				ClusterID: "MkU3OEVBNTcwNTJENDM2Qg",
				TLS: TLS{Enabled: true, CAFile: "/tls/ca.pem", CertFile: "/tls/c.pem", KeyFile: "/tls/k.pem",
					ServerName: "kafka.internal", InsecureSkipVerify: true},
				SASL: SASL{Mechanism: "SCRAM-SHA-256", Username: "mirror", Password: "from-env", PasswordEnv: "SRC_PW"},
			},
			"dst": {
				Name: "dst", BootstrapServers: []string{"d1:9092"}, ClientID: "mirrord",
				TLS:  TLS{Enabled: false, CAFile: "/tls/dst-ca.pem"},
				SASL: SASL{Mechanism: "PLAIN", Username: "u", Password: "p"},
			},
		},
		Links: []*Link{{
			Name: "orders", Source: "src", Destination: "dst",
			Include:                      patterns(t, `orders\..*`, "payments"),
			Exclude:                      patterns(t, `orders\.tmp`),
			Rename:                       "{source}.{topic}",
			StartFrom:                    "latest",
			StateTopic:                   "__orders_state",
			StateTopicPartitions:         3,
			StateTopicReplicationFactor:  2,
			CheckpointInterval:           2 * time.Second,
			SessionTimeout:               9 * time.Second,
			ProducerStateExpiry:          90 * time.Minute,
			MaxBufferedBytes:             16 << 20,
			CoalesceBytes:                512 << 10,
			OnOffsetOutOfRange:           "earliest",
			ProduceTimeout:               20 * time.Second,
			Delivery:                     DeliveryTransactional,
			TransactionTimeout:           2 * time.Minute,
			Unattributed:                 DefaultUnattributed,
			SettleDelay:                  45 * time.Second,
			DiscoveryInterval:            time.Minute,
			DestinationReplicationFactor: 3,
			CheckCRCs:                    true,
			GroupSyncInterval:            DefaultGroupSyncInterval,
			ConfigSync:                   ConfigSync{Enabled: true},
			ConfigSyncInterval:           DefaultConfigSyncInterval,
			ACLSyncInterval:              DefaultACLSyncInterval,
			Slots:                        DefaultSlots,
		}, {
			Name: "back", Source: "dst", Destination: "src",
			Include:                      patterns(t, ".*"),
			Rename:                       DefaultRename,
			StartFrom:                    DefaultStartFrom,
			StateTopic:                   DefaultStateTopic,
			StateTopicPartitions:         DefaultStateTopicPartitions,
			StateTopicReplicationFactor:  DefaultStateTopicReplicationFactor,
			CheckpointInterval:           DefaultCheckpointInterval,
			SessionTimeout:               DefaultSessionTimeout,
			ProducerStateExpiry:          DefaultProducerStateExpiry,
			MaxBufferedBytes:             2 << 20,
			CoalesceBytes:                DefaultCoalesceBytes,
			OnOffsetOutOfRange:           DefaultOnOffsetOutOfRange,
			ProduceTimeout:               DefaultProduceTimeout,
			Delivery:                     DefaultDelivery,
			TransactionTimeout:           DefaultTransactionTimeout,
			Unattributed:                 DefaultUnattributed,
			SettleDelay:                  DefaultSettleDelay,
			DiscoveryInterval:            DefaultDiscoveryInterval,
			DestinationReplicationFactor: DefaultDestinationReplicationFactor,
			GroupSyncInterval:            DefaultGroupSyncInterval,
			ConfigSync:                   ConfigSync{Enabled: true},
			ConfigSyncInterval:           DefaultConfigSyncInterval,
			ACLSyncInterval:              DefaultACLSyncInterval,
			Slots:                        DefaultSlots,
		}},
		File: "t.hcl",
	}
	assertConfig(t, got, want)
}

// Guards against a default that differs from the documented one.
func TestParseDefaults(t *testing.T) {
	got := mustParse(t, withLink())
	want := Default()
	want.File = "t.hcl"
	want.Clusters = map[string]*Cluster{
		"a": {Name: "a", BootstrapServers: []string{"a:9092"}, ClientID: DefaultClientID},
		"b": {Name: "b", BootstrapServers: []string{"b:9092"}, ClientID: DefaultClientID},
	}
	want.Links[0].Name, want.Links[0].Source, want.Links[0].Destination = "l", "a", "b"
	want.Links[0].Include = patterns(t, "t")
	assertConfig(t, got, want)
	if DefaultListen != "127.0.0.1:9644" || DefaultCheckpointInterval != 5*time.Second ||
		DefaultSessionTimeout != 30*time.Second || DefaultMaxBufferedBytes != 64<<20 ||
		DefaultStateTopic != "__mirror_state" || DefaultProducerStateExpiry != 24*time.Hour ||
		DefaultSettleDelay != 5*time.Second || DefaultProduceTimeout != 30*time.Second || DefaultDiscoveryInterval != 30*time.Second ||
		DefaultDestinationReplicationFactor != -1 || DefaultCheckCRCs || DefaultShutdownTimeout != 15*time.Second {
		t.Error("a documented default changed")
	}
}

// Guards the exact message, position and key path of every class of bad
// input, and that one error lists every problem in file order.
func TestParseProblems(t *testing.T) {
	cases := []struct {
		name    string
		src     string
		environ []string
		want    []string
	}{{
		name: "unknown key with a suggestion",
		src:  withLink(`checkpoint_intervall = "5s"`),
		want: []string{`t.hcl:11:3: link.l.checkpoint_intervall: unknown key (did you mean checkpoint_interval?)`},
	}, {
		name: "unknown key without a suggestion",
		src:  "agent {\n  colour = \"red\"\n}\n" + withLink(),
		want: []string{`t.hcl:2:3: agent.colour: unknown key (allowed keys here: name, listen, log_level, log_format, shutdown_timeout, memory_limit)`},
	}, {
		name: "unknown block",
		src:  withLink(`topic { include = ["x"] }`),
		want: []string{`t.hcl:11:3: link.l.topic: unknown block (did you mean topics?)`},
	}, {
		name: "unknown top-level block",
		src:  withLink() + "mirror \"m\" {\n}\n",
		want: []string{`t.hcl:12:1: mirror: unknown block (allowed blocks here: agent, cluster, link)`},
	}, {
		name: "block written as a key",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  tls = { enabled = true }\n}\n" + withLink(),
		want: []string{`t.hcl:3:3: cluster.c.tls: unknown key (tls is a block: write tls { ... } without '=')`},
	}, {
		name: "duplicate cluster label",
		src:  withLink() + "cluster \"a\" {\n  bootstrap_servers = [\"x:1\"]\n}\n",
		want: []string{`t.hcl:12:1: cluster.a: duplicate cluster block "a" (the first is at t.hcl:1:1; each cluster needs its own name)`},
	}, {
		name: "duplicate link label",
		src:  withLink() + "link \"l\" {\n}\n",
		want: []string{`t.hcl:12:1: link.l: duplicate link block "l" (the first is at t.hcl:7:1; each link needs its own name)`},
	}, {
		name: "duplicate sub-block",
		src:  withLink(`topics { include = ["u"] }`),
		want: []string{`t.hcl:11:3: link.l.topics: duplicate topics block (the first is at t.hcl:10:3; merge them into one)`},
	}, {
		name: "key set twice",
		src:  withLink(`source = "b"`),
		want: []string{`t.hcl:11:3: link.l.source: set twice (it is first set at t.hcl:8:3; keep one)`},
	}, {
		name: "missing block name",
		src:  withLink() + "cluster {\n}\n",
		want: []string{`t.hcl:12:9: cluster: missing name (write cluster "name" { ... })`},
	}, {
		name: "invalid block name",
		src:  withLink() + "cluster \"eu west\" {\n}\n",
		want: []string{`t.hcl:12:9: cluster: invalid name "eu west" (use letters, digits, '-' and single '_', starting with a letter or digit)`},
	}, {
		name: "undefined cluster reference",
		src:  base + "link \"l\" {\n  source = \"a\"\n  destination = \"c\"\n  topics { include = [\"t\"] }\n}\n",
		want: []string{`t.hcl:9:17: link.l.destination: cluster "c" is not defined (define cluster "c" { ... } or use one of: a, b)`},
	}, {
		name: "same source and destination",
		src:  base + "link \"l\" {\n  source = \"a\"\n  destination = \"a\"\n  topics { include = [\"t\"] }\n}\n",
		want: []string{`t.hcl:9:17: link.l.destination: is the source cluster "a" too (a link copies from one cluster to another; name two different clusters)`},
	}, {
		name: "bad regular expression",
		src:  base + "link \"l\" {\n  source = \"a\"\n  destination = \"b\"\n  topics {\n    include = [\"ok\", \"orders(\"]\n  }\n}\n",
		want: []string{`t.hcl:11:22: link.l.topics.include[1]: invalid regular expression "orders(": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole topic name)`},
	}, {
		name: "missing include",
		src:  base + "link \"l\" {\n  source = \"a\"\n  destination = \"b\"\n}\n",
		want: []string{`t.hcl:7:1: link.l.topics.include: at least one pattern is required (to mirror every topic write include = [".*"])`},
	}, {
		name: "bad duration",
		src:  withLink(`session_timeout = "30 seconds"`),
		want: []string{`t.hcl:11:21: link.l.session_timeout: invalid duration "30 seconds" (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "duration that is not a string",
		src:  withLink(`checkpoint_interval = 5`),
		want: []string{`t.hcl:11:25: link.l.checkpoint_interval: must be a duration string, got number (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "negative duration",
		src:  withLink(`producer_state_expiry = "-1h"`),
		want: []string{`t.hcl:11:27: link.l.producer_state_expiry: -1h0m0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "bad enum",
		src:  withLink(`start_from = "oldest"`),
		want: []string{`t.hcl:11:16: link.l.start_from: "oldest" is not allowed (use earliest or latest)`},
	}, {
		name: "bad log level",
		src:  "agent {\n  log_level = \"verbose\"\n}\n" + withLink(),
		want: []string{`t.hcl:2:15: agent.log_level: "verbose" is not allowed (use trace, debug, info, warn or error)`},
	}, {
		name: "bad sasl mechanism",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  sasl {\n    mechanism = \"scram-sha-512\"\n    username = \"u\"\n    password = \"p\"\n  }\n}\n" + withLink(),
		want: []string{`t.hcl:4:17: cluster.c.sasl.mechanism: "scram-sha-512" is not allowed (use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)`},
	}, {
		name: "checkpoint interval above a third of the session timeout",
		src:  withLink(`checkpoint_interval = "15s"`, `session_timeout = "30s"`),
		want: []string{`t.hcl:11:25: link.l.checkpoint_interval: 15s is more than session_timeout/3 (10s); a session renews its lease by checkpointing, at least three times per session_timeout (lower checkpoint_interval to at most 10s, or raise session_timeout to at least 45s)`},
	}, {
		name: "missing bootstrap_servers",
		src:  "cluster \"c\" {\n  client_id = \"x\"\n}\n" + withLink(),
		want: []string{`t.hcl:1:1: cluster.c.bootstrap_servers: required (list the brokers as host:port, e.g. ["kafka1:9092", "kafka2:9092"])`},
	}, {
		name: "bootstrap server without a port",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"ok:1\", \"kafka1\"]\n}\n" + withLink(),
		want: []string{`t.hcl:2:32: cluster.c.bootstrap_servers[1]: "kafka1" is not host:port (write host:port, e.g. "kafka1:9092")`},
	}, {
		name: "list given a string",
		src:  "cluster \"c\" {\n  bootstrap_servers = \"c:1\"\n}\n" + withLink(),
		want: []string{`t.hcl:2:23: cluster.c.bootstrap_servers: must be a list of strings, got string (write a list such as ["a", "b"])`},
	}, {
		name: "whole number given a string",
		src:  withLink(`state_topic_partitions = "3"`),
		want: []string{`t.hcl:11:28: link.l.state_topic_partitions: must be a whole number, got string (write the number without quotes)`},
	}, {
		name: "replication factor zero",
		src:  withLink(`state_topic_replication_factor = 0`),
		want: []string{`t.hcl:11:36: link.l.state_topic_replication_factor: 0 is out of range (use -1 for the broker's default, or 1 to 32767)`},
	}, {
		name: "destination replication factor out of range",
		src:  withLink(`destination_replication_factor = 40000`),
		want: []string{`t.hcl:11:36: link.l.destination_replication_factor: 40000 is out of range (use -1 for the broker's default, or 1 to 32767)`},
	}, {
		name: "settle delay zero",
		src:  withLink(`settle_delay = "0s"`),
		want: []string{`t.hcl:11:18: link.l.settle_delay: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "produce timeout zero",
		src:  withLink(`produce_timeout = "0s"`),
		want: []string{`t.hcl:11:21: link.l.produce_timeout: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "produce timeout beyond what a request can say",
		src:  withLink(`delivery = "exactly-once"`),
		want: []string{`t.hcl:11:14: link.l.delivery: "exactly-once" is not allowed (use preserve or transactional)`},
	}, {
		name: "transaction timeout below three checkpoints",
		src:  withLink(`delivery = "transactional"` + "\n" + `transaction_timeout = "10s"`),
		want: []string{`t.hcl:12:23: link.l.transaction_timeout: 10s is less than three checkpoint intervals (15s): a transaction stays open one checkpoint_interval, and the coordinator aborts it at transaction_timeout (raise transaction_timeout to at least 15s (the default is 1m; brokers cap it at transaction.max.timeout.ms, 15m by default))`},
	}, {
		name: "unattributed policy unknown",
		src:  withLink(`unattributed = "drop"`),
		want: []string{`t.hcl:11:18: link.l.unattributed: "drop" is not allowed (use forward or skip)`},
	}, {
		name: "links in both directions must choose an unattributed policy",
		src:  withLink() + "link \"r\" {\n  source      = \"b\"\n  destination = \"a\"\n  topics { include = [\"t\"] }\n  unattributed = \"skip\"\n}\n",
		want: []string{`t.hcl:7:1: link.l.unattributed: links "l" and "r" mirror in both directions between clusters "a" and "b" under the same topic names; a batch without a producer ID (a producer with enable.idempotence off) does not say where it was first produced, and forwarded by both links it would go back and forth for ever (set unattributed = "skip" on both links for active-active (README, "Active-active and failback"), or "forward" if the two links mirror different topics)`},
	}, {
		name: "links in both directions, one transactional, need one state topic name",
		src: withLink(`unattributed = "skip"`, `delivery = "transactional"`, `state_topic = "__l_state"`) +
			"link \"r\" {\n  source      = \"b\"\n  destination = \"a\"\n  topics { include = [\"t\"] }\n  unattributed = \"forward\"\n}\n",
		want: []string{`t.hcl:13:17: link.l.state_topic: links "l" and "r" mirror in both directions between clusters "a" and "b" under the same topic names; link "l" delivers transactionally and records its sessions' producer IDs in its state topic "__l_state", and link "r" looks for them in the topic named by its own state_topic ("__mirror_state") at its source to keep those batches from going back (give both links the same state_topic (README, "Active-active and failback"))`},
	}, {
		name: "produce timeout too long",
		src:  withLink(`produce_timeout = "1000h"`),
		want: []string{`t.hcl:11:21: link.l.produce_timeout: 1000h0m0s is longer than a Produce request can say (596h31m23.647s) (use a few seconds to a few minutes)`},
	}, {
		name: "discovery interval without a unit",
		src:  withLink(`discovery_interval = "30"`),
		want: []string{`t.hcl:11:24: link.l.discovery_interval: invalid duration "30" (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "check_crcs given a string",
		src:  withLink(`check_crcs = "yes"`),
		want: []string{`t.hcl:11:16: link.l.check_crcs: must be true or false, got string (write true or false without quotes)`},
	}, {
		name: "negative shutdown timeout",
		src:  "agent {\n  shutdown_timeout = \"-5s\"\n}\n" + withLink(),
		want: []string{`t.hcl:2:22: agent.shutdown_timeout: -5s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name: "memory limit below the minimum",
		src:  "agent {\n  memory_limit = \"16MiB\"\n}\n" + withLink(),
		want: []string{`t.hcl:2:18: agent.memory_limit: 16777216 bytes is less than the minimum of 32MiB (remove it to use the sum of the links' max_buffered_bytes (twice for a link that joins batches) plus 48MiB, or set GOMEMLIMIT=off in the environment for no limit)`},
	}, {
		name:    "env override of a new link key",
		src:     withLink(),
		environ: []string{"MIRRORD_LINK__l__CHECK_CRCS=maybe"},
		want:    []string{`MIRRORD_LINK__l__CHECK_CRCS: link.l.check_crcs: must be true or false, got "maybe" (set the variable to true or false)`},
	}, {
		name: "bad size",
		src:  withLink(`max_buffered_bytes = "64 megs"`),
		want: []string{`t.hcl:11:24: link.l.max_buffered_bytes: invalid size "64 megs" (write a number of bytes, or a number with a unit: KiB, MiB, GiB, KB, MB or GB, e.g. "64MiB")`},
	}, {
		name: "size too small",
		src:  withLink(`max_buffered_bytes = "512KiB"`),
		want: []string{`t.hcl:11:24: link.l.max_buffered_bytes: 524288 bytes is less than the minimum of 1MiB (one maximum-size batch must fit; use at least "1MiB", the default is "64MiB")`},
	}, {
		name: "negative coalesce_bytes",
		src:  withLink(`coalesce_bytes = -1`),
		want: []string{`t.hcl:11:20: link.l.coalesce_bytes: -1 bytes is negative (use "0" to append every source batch alone, or a size such as "1000000" (the default))`},
	}, {
		name: "coalesce_bytes above max_buffered_bytes",
		src:  withLink(`coalesce_bytes = "2MiB"`, `max_buffered_bytes = "1MiB"`),
		want: []string{`t.hcl:11:20: link.l.coalesce_bytes: 2097152 bytes is more than max_buffered_bytes (1048576): a run of batches to join must be buffered whole (lower coalesce_bytes; keep it below the destination topics' max.message.bytes (1048588 by default))`},
	}, {
		name: "rename without {topic}",
		src:  withLink(`rename = "{source}-copy"`),
		want: []string{`t.hcl:11:12: link.l.rename: "{source}-copy" has no {topic} placeholder (include {topic}, e.g. "{source}.{topic}")`},
	}, {
		name: "rename with an unknown placeholder",
		src:  withLink(`rename = "{cluster}.{topic}"`),
		want: []string{`t.hcl:11:12: link.l.rename: unknown placeholder {cluster} in "{cluster}.{topic}" (the placeholders are {topic} and {source})`},
	}, {
		name: "rename with characters a topic cannot have",
		src:  withLink(`rename = "{source}/{topic}"`),
		want: []string{`t.hcl:11:12: link.l.rename: "{source}/{topic}" has characters that are not allowed in topic names (use letters, digits, '.', '_' and '-' around the placeholders)`},
	}, {
		name: "variables are not literals",
		src:  withLink(`state_topic = var.x`),
		want: []string{`t.hcl:11:17: link.l.state_topic: variables not allowed (write a literal value; the configuration has no variables or functions, use MIRRORD_ environment overrides instead)`},
	}, {
		name: "null value",
		src:  withLink(`rename = null`),
		want: []string{`t.hcl:11:12: link.l.rename: null is not a value (remove the line to use the default)`},
	}, {
		name: "no link",
		src:  base,
		want: []string{`t.hcl:1:1: link: at least one link block is required (add link "name" { source = ..., destination = ..., topics { include = [...] } })`},
	}, {
		name: "client certificate without key",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  tls {\n    cert_file = \"/c.pem\"\n  }\n}\n" + withLink(),
		want: []string{`t.hcl:3:3: cluster.c.tls.key_file: required with cert_file (set key_file to the client certificate's private key, or remove cert_file)`},
	}, {
		name: "sasl without a mechanism",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  sasl {\n    username = \"u\"\n  }\n}\n" + withLink(),
		want: []string{`t.hcl:3:3: cluster.c.sasl.mechanism: required when other sasl keys are set (set mechanism = "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512" or "OAUTHBEARER")`},
	}, {
		name: "password_env naming an unset variable",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password_env = \"C_PASSWORD\"\n  }\n}\n" + withLink(),
		want: []string{`t.hcl:6:20: cluster.c.sasl.password_env: environment variable C_PASSWORD is not set (export it before starting mirrord, or set password instead)`},
	}, {
		name:    "password_env naming an empty variable",
		src:     "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password_env = \"C_PASSWORD\"\n  }\n}\n" + withLink(),
		environ: []string{"C_PASSWORD="},
		want:    []string{`t.hcl:6:20: cluster.c.sasl.password_env: environment variable C_PASSWORD is empty (put the password in it)`},
	}, {
		name: "password and password_env",
		src:  "cluster \"c\" {\n  bootstrap_servers = [\"c:1\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"p\"\n    password_env = \"C_PASSWORD\"\n  }\n}\n" + withLink(),
		want: []string{`t.hcl:7:20: cluster.c.sasl.password_env: password and password_env are both set (keep one of them)`},
	}, {
		name:    "env override with a bad value",
		src:     withLink(),
		environ: []string{"MIRRORD_LINK__l__CHECKPOINT_INTERVAL=10x"},
		want:    []string{`MIRRORD_LINK__l__CHECKPOINT_INTERVAL: link.l.checkpoint_interval: invalid duration "10x" (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`},
	}, {
		name:    "env override with a bad bool",
		src:     withLink(),
		environ: []string{"MIRRORD_CLUSTER__a__TLS__ENABLED=yes"},
		want:    []string{`MIRRORD_CLUSTER__a__TLS__ENABLED: cluster.a.tls.enabled: must be true or false, got "yes" (set the variable to true or false)`},
	}, {
		name:    "env override with a bad pattern in a list",
		src:     withLink(),
		environ: []string{"MIRRORD_LINK__l__TOPICS__INCLUDE=ok,("},
		want:    []string{`MIRRORD_LINK__l__TOPICS__INCLUDE: link.l.topics.include[1]: invalid regular expression "(": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole topic name)`},
	}, {
		name:    "env override of an unknown key",
		src:     withLink(),
		environ: []string{"MIRRORD_LINK__l__CHECKPOINT_INTERVL=10s"},
		want:    []string{`MIRRORD_LINK__l__CHECKPOINT_INTERVL: link.l.checkpoint_intervl: unknown key (did you mean checkpoint_interval?)`},
	}, {
		name:    "env override of a cluster not in the file",
		src:     withLink(),
		environ: []string{"MIRRORD_CLUSTER__A__CLIENT_ID=x"},
		want:    []string{`MIRRORD_CLUSTER__A__CLIENT_ID: cluster.A: no cluster "A" in the file (overrides change blocks of the file; define cluster "A" { ... } there; names are case-sensitive, the file has a, b)`},
	}, {
		name:    "env override with single underscores",
		src:     withLink(),
		environ: []string{"MIRRORD_AGENT_LOG_LEVEL=debug"},
		want:    []string{`MIRRORD_AGENT_LOG_LEVEL: not a valid override name (separate levels with a double underscore, e.g. MIRRORD_AGENT__<KEY>)`},
	}, {
		name:    "env override that breaks a rule checked later",
		src:     withLink(),
		environ: []string{"MIRRORD_LINK__l__SESSION_TIMEOUT=12s"},
		want:    []string{`MIRRORD_LINK__l__SESSION_TIMEOUT: link.l.checkpoint_interval: 5s is more than session_timeout/3 (4s); a session renews its lease by checkpointing, at least three times per session_timeout (lower checkpoint_interval to at most 4s, or raise session_timeout to at least 15s)`},
	}, {
		name: "syntax error",
		src:  withLink(`rename = `),
		want: []string{`t.hcl:11:12: invalid HCL syntax: invalid expression (expected the start of an expression, but found an invalid expression token)`},
	}, {
		name: "several problems in file order",
		src: "agent {\n  log_format = \"xml\"\n}\n" +
			"cluster \"a\" {\n  bootstrap_servers = [\"a:9092\"]\n  tsl {\n  }\n}\n" +
			"link \"l\" {\n  source = \"a\"\n  destination = \"nope\"\n  topics { include = [\"(\"] }\n  checkpoint_interval = \"1d\"\n}\n",
		environ: []string{"MIRRORD_LINK__l__START_FROM=now", "MIRRORD_AGENT__LISTEN=nowhere"},
		want: []string{
			`t.hcl:2:16: agent.log_format: "xml" is not allowed (use text or json)`,
			`t.hcl:6:3: cluster.a.tsl: unknown block (did you mean tls?)`,
			`t.hcl:11:17: link.l.destination: cluster "nope" is not defined (define cluster "nope" { ... } or use one of: a)`,
			`t.hcl:12:23: link.l.topics.include[0]: invalid regular expression "(": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole topic name)`,
			`t.hcl:13:25: link.l.checkpoint_interval: invalid duration "1d" (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`,
			`MIRRORD_AGENT__LISTEN: agent.listen: "nowhere" is not host:port (write host:port, e.g. "127.0.0.1:9644" or ":9644" for every interface)`,
			`MIRRORD_LINK__l__START_FROM: link.l.start_from: "now" is not allowed (use earliest or latest)`,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("t.hcl", []byte(tc.src), tc.environ)
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("config returned with an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid: %v", err)
			}
			got := strings.Split(err.Error(), "\n")
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Links in both directions that both choose an unattributed policy and
// deliver in preserve mode are an active-active pair: accepted.
func TestParseActiveActive(t *testing.T) {
	cfg := mustParse(t, withLink(`unattributed = "skip"`, `shared_destination = true`)+
		"link \"r\" {\n  source      = \"b\"\n  destination = \"a\"\n  topics { include = [\"t\"] }\n  unattributed = \"skip\"\n  shared_destination = true\n}\n")
	for _, l := range cfg.Links {
		if l.Unattributed != UnattributedSkip || !l.SharedDestination || l.ReturnHome {
			t.Errorf("link %s: unattributed %q, shared_destination %v, return_home %v", l.Name, l.Unattributed, l.SharedDestination, l.ReturnHome)
		}
	}
}
