package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Guards the selection rules: whole-name matching, exclude wins, internal
// topics and the state topic are never selected.
func TestLinkSelects(t *testing.T) {
	l := &Link{
		Include:    patterns(t, `orders\..*`, "payments", "state.*", "__.*"), // "__.*" shows internal topics lose anyway
		Exclude:    patterns(t, `.*\.tmp`),
		StateTopic: "state_of_l",
	}
	cases := []struct {
		topic string
		want  bool
	}{
		{"orders.eu", true},
		{"orders.eu.tmp", false},      // exclude wins
		{"payments", true},            //
		{"payments-v2", false},        // anchored at the end
		{"old.payments", false},       // anchored at the start
		{"xorders.eu", false},         //
		{"__consumer_offsets", false}, // internal
		{"__orders.eu", false},        // internal, whatever the patterns say
		{"state_of_l", false},         // the link's own state topic
		{"state_other", true},         //
		{"", false},
	}
	for _, tc := range cases {
		if got := l.Selects(tc.topic); got != tc.want {
			t.Errorf("Selects(%q) = %v, want %v", tc.topic, got, tc.want)
		}
	}
	if (&Link{StateTopic: "s"}).Selects("anything") {
		t.Error("a link without include patterns selected a topic")
	}
}

// Guards the rename template.
func TestLinkDestinationTopic(t *testing.T) {
	cases := []struct{ rename, topic, source, want string }{
		{"{topic}", "orders", "dc1", "orders"},
		{"{source}.{topic}", "orders", "dc1", "dc1.orders"},
		{"mirror-{topic}-from-{source}", "o", "dc1", "mirror-o-from-dc1"},
		{"{topic}.{topic}", "o", "s", "o.o"},
		{"{topic}", "{source}", "dc1", "{source}"}, // a placeholder-looking topic name is not expanded again
	}
	for _, tc := range cases {
		l := &Link{Rename: tc.rename}
		if got := l.DestinationTopic(tc.topic, tc.source); got != tc.want {
			t.Errorf("%q applied to (%q, %q) = %q, want %q", tc.rename, tc.topic, tc.source, got, tc.want)
		}
	}
}

// Guards against a pattern with alternation escaping the anchors.
func TestTopicPatternAnchorsAlternation(t *testing.T) {
	re, err := TopicPattern("a|b")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]bool{"a": true, "b": true, "ab": false, "xa": false, "bx": false} {
		if re.MatchString(topic) != want {
			t.Errorf("a|b matches %q: %v, want %v", topic, !want, want)
		}
	}
	if _, err := TopicPattern("a)|(b"); err == nil {
		t.Error("a pattern that only compiles inside the anchoring group was accepted")
	}
}

// Guards the demo's starting point: Default must stay valid and each call
// must return an independent copy.
func TestDefault(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("Default() is invalid: %v", err)
	}
	d.Clusters["source"].BootstrapServers[0] = "changed:1"
	d.Links[0].Name = "changed"
	if e := Default(); e.Clusters["source"].BootstrapServers[0] != "127.0.0.1:9092" || e.Links[0].Name != "demo" {
		t.Error("Default() returns shared state")
	}
	l, ok := Default().Link("demo")
	if !ok || !l.Selects("orders") || l.Selects("__mirror_state") {
		t.Errorf("demo link: %v %+v", ok, l)
	}
	if _, ok := Default().Link("nope"); ok {
		t.Error("Link found a link that does not exist")
	}
}

// Guards Validate on configs built in code: problems carry key paths but
// no position.
func TestValidateBuiltConfig(t *testing.T) {
	c := Default()
	c.Links[0].CheckpointInterval = 0
	c.Links[0].Destination = "nowhere"
	c.Clusters["source"].SASL.Mechanism = MechanismScramSHA512
	err := c.Validate()
	want := []string{
		`cluster.source.sasl.username: required for SASL (set username)`,
		`cluster.source.sasl.password: required for SASL (set password_file to a file that holds it, password_env to the name of an environment variable that holds it, or password)`,
		`link.demo.destination: cluster "nowhere" is not defined (define cluster "nowhere" { ... } or use one of: destination, source)`,
		`link.demo.checkpoint_interval: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
	var p *Problem
	if !errors.As(err, &p) || p.Key != "cluster.source.sasl.username" || p.Where != "" {
		t.Errorf("errors.As: %+v", p)
	}
}

// Guards Load: it reads the file and names it in problems; an unreadable
// file is an I/O error, not ErrInvalid.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	if err := os.WriteFile(good, []byte(withLink()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(good)
	if err != nil || cfg.File != good || len(cfg.Links) != 1 {
		t.Fatalf("Load: %v %+v", err, cfg)
	}
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte(withLink(`start_from = "now"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var p *Problem
	if !errors.As(err, &p) || !strings.HasPrefix(err.Error(), bad+":11:16: link.l.start_from: ") {
		t.Errorf("Load bad: %v", err)
	}
	_, err = Load(filepath.Join(dir, "missing.hcl"))
	if err == nil || errors.Is(err, ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load missing: %v", err)
	}
}

// Guards the shipped example: it parses, it is the documented deployment
// (two clusters, one link, SCRAM on the source, TLS on both) and it
// mentions every key of the schema.
func TestExampleFile(t *testing.T) {
	src, err := os.ReadFile("../config.example.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("config.example.hcl", src, []string{"DC1_KAFKA_PASSWORD=pw"})
	if err != nil {
		t.Fatalf("config.example.hcl:\n%v", err)
	}
	if len(cfg.Clusters) != 2 || len(cfg.Links) != 1 {
		t.Fatalf("want two clusters and one link, got %d and %d", len(cfg.Clusters), len(cfg.Links))
	}
	l := cfg.Links[0]
	srcC, dstC := cfg.Clusters[l.Source], cfg.Clusters[l.Destination]
	if srcC.SASL.Mechanism != MechanismScramSHA512 || srcC.SASL.Password != "pw" || !srcC.TLS.Enabled || !dstC.TLS.Enabled {
		t.Errorf("source %+v, destination %+v", srcC, dstC)
	}
	if !l.Selects("orders.eu") || l.Selects("orders.eu.tmp") || l.DestinationTopic("orders.eu", l.Source) != "dc1.orders.eu" {
		t.Errorf("link %+v", l)
	}
	var walk func(prefix string, b *blockSpec)
	walk = func(prefix string, b *blockSpec) {
		for _, k := range b.keys {
			re := regexp.MustCompile(`(?m)^\s*#?\s*` + k.name + `\s*=`)
			if !re.Match(src) {
				t.Errorf("config.example.hcl does not document %s%s", prefix, k.name)
			}
		}
		for _, s := range b.blocks {
			if !regexp.MustCompile(`(?m)^\s*` + s.typ + `\b`).Match(src) {
				t.Errorf("config.example.hcl has no %s block", s.typ)
			}
			walk(prefix+s.typ+".", s)
		}
	}
	walk("", rootSpec)
	if n := strings.Count(string(src), "Default:"); n < 20 {
		t.Errorf("only %d defaults documented", n)
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts
// passes Validate, and that whatever it rejects is ErrInvalid with every
// problem placed in the file or in a variable.
func FuzzParse(f *testing.F) {
	example, _ := os.ReadFile("../config.example.hcl")
	f.Add(string(example), "MIRRORD_LINK__dc1_to_cloud__RENAME={topic}")
	f.Add(withLink(), "")
	f.Add(withLink(`rename = "{source}.{topic}"`, `max_buffered_bytes = "1.5GiB"`), "MIRRORD_AGENT__LOG_LEVEL=debug")
	f.Add(base+"link \"l\" {\n}\n", "MIRRORD_LINK__l__TOPICS__INCLUDE=[\"a\",\"b\"]")
	f.Add("agent {\n  name = 1\n}\n", "MIRRORD_CLUSTER__a__TLS__ENABLED=true")
	f.Fuzz(func(t *testing.T, src, env string) {
		environ := []string{"DC1_KAFKA_PASSWORD=pw", env}
		cfg, err := Parse("f.hcl", []byte(src), environ)
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Parse accepted what Validate rejects: %v", verr)
			}
			return
		}
		if cfg != nil || !errors.Is(err, ErrInvalid) {
			t.Fatalf("cfg %v, error %v", cfg, err)
		}
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			p := e.(*Problem) //nolint:errorlint // Parse joins the *Problem values themselves; this checks each is one, unwrapped
			if !strings.HasPrefix(p.Where, "f.hcl:") && !strings.HasPrefix(p.Where, EnvPrefix) {
				t.Fatalf("problem without a place: %v", p)
			}
		}
	})
}
