package realkafka

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Guards against MIRRORD_TEST_KAFKA being misread: a typo must fail, not
// silently run nothing.
func TestParseVersions(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      bool
	}{
		{"empty is the kfake tier only", "", nil, false},
		{"blank is empty", "  ", nil, false},
		{"all is every pin", "all", []string{Kafka4, Kafka3}, false},
		{"a list", "4.4.0, 3.9.2", []string{"4.4.0", "3.9.2"}, false},
		{"an unpinned version that looks like one", "4.1.0-rc1", []string{"4.1.0-rc1"}, false},
		{"duplicates collapse", "4.4.0,4.4.0", []string{"4.4.0"}, false},
		{"not a version", "yes", nil, true},
		{"two parts", "4.4", nil, true},
		{"only commas", ",,", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVersions(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("parseVersions(%q) error %v, want error %v", tc.in, err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parseVersions(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Guards against a cluster ID that kafka-storage format would refuse (or
// that would give the region selector something else than the test meant).
func TestValidateClusterID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"MkU3OEVBNTcwNTJENDM2Qg", true},
		{"LqsXsMnTTYq0dBuyEJh1_A", true},
		{NewClusterID(), true},
		{"MkU3OEVBNTcwNTJENDM2Q", false},    // 21 characters
		{"MkU3OEVBNTcwNTJENDM2Qg==", false}, // padded
		{"MkU3OEVBNTcwNTJENDM2Q+", false},   // base64 std, not url
		{"AAAAAAAAAAAAAAAAAAAAAA", false},   // zero UUID
	} {
		if err := ValidateClusterID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateClusterID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

// Guards against a bad Config reaching a JVM: every problem is reported at
// once, before anything starts.
func TestConfigValidate(t *testing.T) {
	cfg := Config{
		Version:   "four",
		ClusterID: "nope",
		Nodes:     2,
		Heap:      "lots",
		Listeners: []Listener{
			{Name: "INTERNAL", Protocol: Plaintext},
			{Name: "tls", Protocol: SSL},
			{Name: "SCRAM", Protocol: SASLPlaintext},
			{Name: "PLAIN", Protocol: Plaintext, Mechanisms: []string{Plain}},
			{Name: "X", Protocol: "QUIC"},
		},
	}
	err := cfg.validate()
	if err == nil {
		t.Fatal("validate accepted a bad config")
	}
	for _, want := range []string{`version "four"`, `cluster ID "nope"`, "nodes 2", `heap "lots"`, "name taken", "upper case", "needs TLS certificates", "needs SASL mechanisms", "SASL mechanisms on a PLAINTEXT listener", `protocol "QUIC"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validate error lacks %q:\n%v", want, err)
		}
	}
	var zero Config
	if err := zero.validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if zero.Version != Kafka4 || zero.Nodes != 1 || len(zero.Listeners) != 1 || zero.Heap != "512m" {
		t.Fatalf("zero config defaults: %+v", zero)
	}
}

// Guards the properties DESIGN §11 asks for: internal topics sized to the
// cluster, share-coordinator settings only where the broker knows them,
// SASL per listener, overrides and removals.
func TestNodeProps(t *testing.T) {
	certs, err := NewCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Nodes: 3,
		Listeners: []Listener{
			{Name: "PLAINTEXT", Protocol: Plaintext},
			{Name: "SCRAM", Protocol: SASLSSL, Mechanisms: []string{ScramSHA512, Plain}, PlainUsers: map[string]string{"bob": `p"w`}, TLS: certs, Props: map[string]string{"ssl.client.auth": "required"}},
		},
		BrokerProps: map[string]string{"num.partitions": "6", "log.cleaner.threads": ""},
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	listen := map[string]int{Controller: 1, Internal: 2, "PLAINTEXT": 3, "SCRAM": 4}
	adv := map[string]string{Internal: "127.0.0.1:2", "PLAINTEXT": "proxy:3", "SCRAM": "127.0.0.1:4"}
	p, err := cfg.nodeProps(2, "/d", "1@127.0.0.1:1", listen, adv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node.id":                          "2",
		"process.roles":                    "broker,controller",
		"listeners":                        "CONTROLLER://127.0.0.1:1,INTERNAL://127.0.0.1:2,PLAINTEXT://127.0.0.1:3,SCRAM://127.0.0.1:4",
		"advertised.listeners":             "INTERNAL://127.0.0.1:2,PLAINTEXT://proxy:3,SCRAM://127.0.0.1:4",
		"listener.security.protocol.map":   "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT,SCRAM:SASL_SSL",
		"offsets.topic.replication.factor": "3",
		"transaction.state.log.min.isr":    "2",
		"share.coordinator.state.topic.replication.factor":   "3",
		"listener.name.scram.sasl.enabled.mechanisms":        "SCRAM-SHA-512,PLAIN",
		"listener.name.scram.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
		"listener.name.scram.plain.sasl.jaas.config":         `org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="p\"w";`,
		"listener.name.scram.ssl.keystore.type":              "PEM",
		"listener.name.scram.ssl.client.auth":                "required",
		"num.partitions":                                     "6",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	if _, ok := p["log.cleaner.threads"]; ok {
		t.Error("an empty BrokerProps value did not remove log.cleaner.threads")
	}
	cfg.Version = Kafka3
	p, _ = cfg.nodeProps(1, "/d", "1@127.0.0.1:1", listen, adv)
	if _, ok := p["share.coordinator.state.topic.replication.factor"]; ok {
		t.Error("3.x node gets share coordinator settings")
	}
}

// Guards the SLF4J binding choice of DESIGN §11: it follows the slf4j-api
// the release brought and the log4j version it brought, if any.
func TestLog4jBackend(t *testing.T) {
	names := func(as []Artifact) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Name+":"+a.Version)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		jars []string
		want []string
	}{
		{"3.9: slf4j 1.7, no log4j", []string{"kafka_2.13-3.9.2.jar", "slf4j-api-1.7.36.jar"},
			[]string{"log4j-api:" + Log4j, "log4j-core:" + Log4j, "log4j-slf4j-impl:" + Log4j}},
		{"4.4: slf4j 1.7, log4j brought", []string{"log4j-api-2.25.5.jar", "log4j-core-2.25.5.jar", "slf4j-api-1.7.36.jar"},
			[]string{"log4j-slf4j-impl:2.25.5"}},
		{"slf4j 2", []string{"slf4j-api-2.0.17.jar"},
			[]string{"log4j-api:" + Log4j, "log4j-core:" + Log4j, "log4j-slf4j2-impl:" + Log4j}},
		{"binding present", []string{"slf4j-api-2.0.17.jar", "log4j-api-2.25.5.jar", "log4j-core-2.25.5.jar", "log4j-slf4j2-impl-2.25.5.jar"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := log4jBackend(tc.jars)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(names(got), tc.want) {
				t.Fatalf("got %v, want %v", names(got), tc.want)
			}
		})
	}
	if _, err := log4jBackend([]string{"kafka_2.13-4.4.0.jar"}); err == nil {
		t.Fatal("no slf4j-api: want an error")
	}
}

// Guards the one-line errors a developer without java or mvn sees: they
// say what to install, and a cached resolution needs no mvn at all.
func TestMissingTools(t *testing.T) {
	t.Setenv("PATH", "")
	t.Setenv(EnvCache, t.TempDir())
	ctx := context.Background()
	if _, err := Java(ctx); !errors.Is(err, ErrNoJava) || err.Error() != "java not found on PATH: install a JDK 17 or later (Debian: apt-get install openjdk-17-jdk-headless)" {
		t.Errorf("Java() = %v", err)
	}
	if _, err := Start(ctx, Config{}); !errors.Is(err, ErrNoJava) {
		t.Errorf("Start() = %v, want ErrNoJava", err)
	}
	_, err := Resolve(ctx, BrokerSpec(Kafka4))
	if !errors.Is(err, ErrNoMaven) || err.Error() != "mvn not found on PATH: install Maven (Debian: apt-get install maven)" {
		t.Errorf("Resolve() = %v", err)
	}
}

func TestJavaMajor(t *testing.T) {
	for out, want := range map[string]int{
		`openjdk version "17.0.15" 2025-04-15`: 17,
		`java version "1.8.0_412"`:             8,
		`openjdk version "25" 2025-09-16`:      25,
	} {
		if got, ok := javaMajor(out); !ok || got != want {
			t.Errorf("javaMajor(%q) = %d, %v; want %d", out, got, ok, want)
		}
	}
}
