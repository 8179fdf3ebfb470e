package config

import (
	"reflect"
	"testing"
	"time"
)

// Guards the MIRRORD_ mapping: each variable reaches exactly its key, with
// the key's type, over the file's value.
func TestEnvOverrides(t *testing.T) {
	src := withLink(`checkpoint_interval = "2s"`) // link "l", clusters "a" and "b"
	cases := []struct {
		name    string
		environ []string
		check   func(*Config) any
		want    any
	}{
		{"agent key without an agent block", []string{"MIRRORD_AGENT__LOG_LEVEL=debug"},
			func(c *Config) any { return c.Agent.LogLevel }, "debug"},
		{"key names are case-insensitive", []string{"MIRRORD_agent__log_format=json"},
			func(c *Config) any { return c.Agent.LogFormat }, "json"},
		{"duration over the file's value", []string{"MIRRORD_LINK__l__CHECKPOINT_INTERVAL=1s"},
			func(c *Config) any { return c.Links[0].CheckpointInterval }, time.Second},
		{"comma-separated list", []string{"MIRRORD_CLUSTER__a__BOOTSTRAP_SERVERS=x:1, y:2"},
			func(c *Config) any { return c.Clusters["a"].BootstrapServers }, []string{"x:1", "y:2"}},
		{"HCL list for patterns with commas", []string{`MIRRORD_LINK__l__TOPICS__INCLUDE=["a{1,2}", "b"]`},
			func(c *Config) any { return []string{c.Links[0].Include[0].String(), c.Links[0].Include[1].String()} },
			[]string{"^(?:a{1,2})$", "^(?:b)$"}},
		{"nested block created from the environment", []string{"MIRRORD_LINK__l__TOPICS__EXCLUDE=t"},
			func(c *Config) any { return c.Links[0].Selects("t") }, false},
		{"whole number", []string{"MIRRORD_LINK__l__STATE_TOPIC_REPLICATION_FACTOR=3"},
			func(c *Config) any { return c.Links[0].StateTopicReplicationFactor }, int16(3)},
		{"size with a unit", []string{"MIRRORD_LINK__l__MAX_BUFFERED_BYTES=2MiB"},
			func(c *Config) any { return c.Links[0].MaxBufferedBytes }, int64(2 << 20)},
		{"tls enabled by a tls key from the environment", []string{"MIRRORD_CLUSTER__b__TLS__CA_FILE=/ca.pem"},
			func(c *Config) any { return c.Clusters["b"].TLS }, TLS{Enabled: true, CAFile: "/ca.pem"}},
		{"tls switched off from the environment", []string{"MIRRORD_CLUSTER__b__TLS__CA_FILE=/ca.pem", "MIRRORD_CLUSTER__b__TLS__ENABLED=false"},
			func(c *Config) any { return c.Clusters["b"].TLS.Enabled }, false},
		{"sasl from the environment", []string{"MIRRORD_CLUSTER__a__SASL__MECHANISM=SCRAM-SHA-512", "MIRRORD_CLUSTER__a__SASL__USERNAME=u", "MIRRORD_CLUSTER__a__SASL__PASSWORD=p"},
			func(c *Config) any { return c.Clusters["a"].SASL }, SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p"}},
		{"password_env through an override", []string{"MIRRORD_CLUSTER__a__SASL__MECHANISM=PLAIN", "MIRRORD_CLUSTER__a__SASL__USERNAME=u", "MIRRORD_CLUSTER__a__SASL__PASSWORD_ENV=MIRRORD_LINK_SECRET", "MIRRORD_LINK_SECRET=s"},
			func(c *Config) any { return c.Clusters["a"].SASL.Password }, "s"},
		{"the last of two equal entries wins", []string{"MIRRORD_AGENT__NAME=one", "MIRRORD_AGENT__NAME=two"},
			func(c *Config) any { return c.Agent.Name }, "two"},
		{"other MIRRORD_ variables are not overrides", []string{"MIRRORD_CONFIG=/etc/x.hcl", "MIRRORD_AGENT__NAME=n"},
			func(c *Config) any { return c.Agent.Name }, "n"},
		{"no variables, the file's value", nil,
			func(c *Config) any { return c.Links[0].CheckpointInterval }, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, src, tc.environ...)
			if got := tc.check(cfg); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// Guards against the file value leaking through when only part of a list
// or block is overridden from the environment.
func TestEnvOverrideReplacesWholeList(t *testing.T) {
	cfg := mustParse(t, withLink(), "MIRRORD_CLUSTER__b__BOOTSTRAP_SERVERS=z:9")
	if got := cfg.Clusters["b"].BootstrapServers; !reflect.DeepEqual(got, []string{"z:9"}) {
		t.Errorf("bootstrap_servers = %q, want [z:9]", got)
	}
	if got := cfg.Clusters["a"].BootstrapServers; !reflect.DeepEqual(got, []string{"a:9092"}) {
		t.Errorf("other cluster changed: %q", got)
	}
}
