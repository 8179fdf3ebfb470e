package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

const secret = "hunter2-Pa55word"

// Guards against the SASL password appearing in any printed form of a
// Config, Cluster or SASL: fmt verbs, String, GoString, JSON.
func TestSecretsNeverPrinted(t *testing.T) {
	src := "cluster \"a\" {\n  bootstrap_servers = [\"a:9092\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + secret + "\"\n  }\n}\n" +
		"cluster \"b\" {\n  bootstrap_servers = [\"b:9092\"]\n  sasl {\n    mechanism = \"SCRAM-SHA-512\"\n    username = \"u\"\n    password_env = \"B_PW\"\n  }\n}\n" +
		"link \"l\" {\n  source = \"a\"\n  destination = \"b\"\n  topics { include = [\".*\"] }\n}\n"
	cfg := mustParse(t, src, "B_PW="+secret)
	if cfg.Clusters["a"].SASL.Password != secret || cfg.Clusters["b"].SASL.Password != secret {
		t.Fatal("passwords not decoded")
	}
	a := cfg.Clusters["a"]
	values := map[string]any{
		"Config": *cfg, "*Config": cfg, "Cluster": *a, "*Cluster": a, "SASL": a.SASL, "*SASL": &a.SASL,
		"Clusters": cfg.Clusters, "[]Cluster": []Cluster{*a},
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%10v", "%-v"}
	for name, v := range values {
		for _, verb := range verbs {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, secret) || strings.Contains(out, fmt.Sprintf("%x", secret)) ||
				strings.Contains(out, fmt.Sprintf("%X", secret)) {
				t.Errorf("%s printed with %s shows the password: %s", name, verb, out)
			}
		}
		js, err := json.Marshal(v)
		if err != nil {
			t.Errorf("json %s: %v", name, err)
		}
		if strings.Contains(string(js), secret) {
			t.Errorf("%s as JSON shows the password: %s", name, js)
		}
	}
	for _, s := range []string{a.String(), a.GoString(), a.SASL.String(), a.SASL.GoString()} {
		if strings.Contains(s, secret) || !strings.Contains(s, redacted) {
			t.Errorf("not redacted: %s", s)
		}
	}
	// A Cluster without a password shows no marker either.
	if s := fmt.Sprint(Cluster{Name: "x"}); strings.Contains(s, redacted) {
		t.Errorf("empty password shown as set: %s", s)
	}
}

// Guards against a password appearing in an error message, whatever is
// wrong around it.
func TestSecretsNeverInErrors(t *testing.T) {
	cluster := func(sasl string) string {
		return "cluster \"a\" {\n  bootstrap_servers = [\"a:9092\"]\n  sasl {\n" + sasl + "  }\n}\n" + withLink()
	}
	cases := []struct {
		name    string
		src     string
		environ []string
	}{
		{"bad mechanism", cluster("    mechanism = \"plain\"\n    username = \"u\"\n    password = \"" + secret + "\"\n"), nil},
		{"no username", cluster("    mechanism = \"PLAIN\"\n    password = \"" + secret + "\"\n"), nil},
		{"no mechanism", cluster("    password = \"" + secret + "\"\n"), nil},
		{"both password and password_env", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + secret + "\"\n    password_env = \"X\"\n"), []string{"X=" + secret}},
		{"password is a template", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + secret + "${x}\"\n"), nil},
		{"password is not a string", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = [\"" + secret + "\"]\n"), nil},
		{"password key misspelt", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    pasword = \"" + secret + "\"\n"), nil},
		{"password in an override of an unknown cluster", withLink(), []string{"MIRRORD_CLUSTER__zz__SASL__PASSWORD=" + secret}},
		{"password in a misspelt override", withLink(), []string{"MIRRORD_CLUSTER__a__SASL__PASWORD=" + secret}},
		{"password in an override with single underscores", withLink(), []string{"MIRRORD_CLUSTER_a_SASL_PASSWORD=" + secret}},
		{"password override without a mechanism", withLink(), []string{"MIRRORD_CLUSTER__a__SASL__PASSWORD=" + secret}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.hcl", []byte(tc.src), tc.environ)
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the password:\n%v", err)
			}
		})
	}
}
