package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

const testSecret = "hunter2-Pa55word"

// Guards against a secret (the SASL password, the OAuth client secret, the
// admin token) appearing in any printed form of a Config, Agent, Admin,
// Cluster or SASL: fmt verbs, String, GoString, JSON.
func TestSecretsNeverPrinted(t *testing.T) {
	pwFile := secretFile(t, "pw", testSecret+"\n")
	src := "agent {\n  admin { token_env = \"ADM\" }\n}\n" +
		"cluster \"c\" {\n  bootstrap_servers = [\"c:9092\"]\n  sasl {\n    mechanism = \"OAUTHBEARER\"\n    token_endpoint = \"https://idp/t\"\n    client_id = \"id\"\n    client_secret_env = \"C_SECRET\"\n    extensions = { a = \"b\" }\n  }\n}\n" +
		"cluster \"d\" {\n  bootstrap_servers = [\"d:9092\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password_file = \"" + pwFile + "\"\n  }\n}\n" +
		"cluster \"a\" {\n  bootstrap_servers = [\"a:9092\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + testSecret + "\"\n  }\n}\n" +
		"cluster \"b\" {\n  bootstrap_servers = [\"b:9092\"]\n  sasl {\n    mechanism = \"SCRAM-SHA-512\"\n    username = \"u\"\n    password_env = \"B_PW\"\n  }\n}\n" +
		"link \"l\" {\n  source = \"a\"\n  destination = \"b\"\n  topics { include = [\".*\"] }\n}\n"
	cfg := mustParse(t, src, "B_PW="+testSecret, "ADM="+testSecret, "C_SECRET="+testSecret)
	if cfg.Clusters["a"].SASL.Password != testSecret || cfg.Clusters["b"].SASL.Password != testSecret ||
		cfg.Clusters["d"].SASL.Password != testSecret || cfg.Clusters["c"].SASL.ClientSecret != testSecret || cfg.Agent.Admin.Token != testSecret {
		t.Fatal("secrets not decoded")
	}
	a, c := cfg.Clusters["a"], cfg.Clusters["c"]
	values := map[string]any{
		"Config": *cfg, "*Config": cfg, "Cluster": *a, "*Cluster": a, "SASL": a.SASL, "*SASL": &a.SASL,
		"Clusters": cfg.Clusters, "[]Cluster": []Cluster{*a}, "OAuth Cluster": *c, "OAuth SASL": c.SASL,
		"Agent": cfg.Agent, "Admin": cfg.Agent.Admin, "*Admin": &cfg.Agent.Admin, "d": cfg.Clusters["d"],
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%10v", "%-v"}
	for name, v := range values {
		for _, verb := range verbs {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, testSecret) || strings.Contains(out, fmt.Sprintf("%x", testSecret)) ||
				strings.Contains(out, fmt.Sprintf("%X", testSecret)) {
				t.Errorf("%s printed with %s shows the password: %s", name, verb, out)
			}
		}
		js, err := json.Marshal(v)
		if err != nil {
			t.Errorf("json %s: %v", name, err)
		}
		if strings.Contains(string(js), testSecret) {
			t.Errorf("%s as JSON shows the password: %s", name, js)
		}
	}
	for _, s := range []string{a.String(), a.GoString(), a.SASL.String(), a.SASL.GoString(), c.SASL.String(), c.SASL.GoString(),
		cfg.Agent.Admin.String(), cfg.Agent.Admin.GoString()} {
		if strings.Contains(s, testSecret) || !strings.Contains(s, redacted) {
			t.Errorf("not redacted: %s", s)
		}
	}
	// A Cluster without a password, an Admin without a token show no
	// marker either.
	if s := fmt.Sprint(Cluster{Name: "x"}, Admin{}); strings.Contains(s, redacted) {
		t.Errorf("empty secret shown as set: %s", s)
	}
	// The JSON forms stay JSON.
	for _, v := range []any{c.SASL, cfg.Agent.Admin} {
		js, _ := json.Marshal(v)
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil || len(m) == 0 {
			t.Errorf("%s is not a JSON object: %v", js, err)
		}
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
		{"bad mechanism", cluster("    mechanism = \"plain\"\n    username = \"u\"\n    password = \"" + testSecret + "\"\n"), nil},
		{"no username", cluster("    mechanism = \"PLAIN\"\n    password = \"" + testSecret + "\"\n"), nil},
		{"no mechanism", cluster("    password = \"" + testSecret + "\"\n"), nil},
		{"both password and password_env", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + testSecret + "\"\n    password_env = \"X\"\n"), []string{"X=" + testSecret}},
		{"password is a template", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + testSecret + "${x}\"\n"), nil},
		{"password is not a string", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = [\"" + testSecret + "\"]\n"), nil},
		{"password key misspelt", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    pasword = \"" + testSecret + "\"\n"), nil},
		{"password in an override of an unknown cluster", withLink(), []string{"MIRRORD_CLUSTER__zz__SASL__PASSWORD=" + testSecret}},
		{"password in a misspelt override", withLink(), []string{"MIRRORD_CLUSTER__a__SASL__PASWORD=" + testSecret}},
		{"password in an override with single underscores", withLink(), []string{"MIRRORD_CLUSTER_a_SASL_PASSWORD=" + testSecret}},
		{"password override without a mechanism", withLink(), []string{"MIRRORD_CLUSTER__a__SASL__PASSWORD=" + testSecret}},
		{"password and password_file", cluster("    mechanism = \"PLAIN\"\n    username = \"u\"\n    password = \"" + testSecret + "\"\n    password_file = \"/nonexistent\"\n"), nil},
		{"admin token written in the file", withAgent(`admin { token = "` + testSecret + `" }`), nil},
		{"admin token written in the file as a list", withAgent(`admin { token = ["` + testSecret + `"] }`), nil},
		{"admin token in an override", withLink(), []string{"MIRRORD_AGENT__ADMIN__TOKEN=" + testSecret}},
		{"admin token too short", withAgent(`admin { token_env = "ADM" }`), []string{"ADM=" + testSecret[:10]}},
		{"admin token with a space", withAgent(`admin { token_env = "ADM" }`), []string{"ADM=" + testSecret + " x"}},
		{"admin token misspelt key", withAgent(`admin { tokne = "` + testSecret + `" }`), nil},
		{"admin token_env with a token in the file", withAgent(`admin {`, `  token_env = "ADM"`, `  token = "`+testSecret+`"`, `}`), []string{"ADM=" + testSecret}},
		{"client secret written in the file", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_endpoint = "https://idp/t"`, `client_id = "c"`, `client_secret = "`+testSecret+`"`), nil},
		{"client secret in an override", oauthCluster(`mechanism = "OAUTHBEARER"`), []string{"MIRRORD_CLUSTER__o__SASL__CLIENT_SECRET=" + testSecret}},
		{"client secret in the endpoint URL", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_endpoint = "https://c:`+testSecret+`@idp/t"`, `client_id = "c"`, `client_secret_env = "CS"`), []string{"CS=" + testSecret}},
		{"client secret with a token_file", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "/nonexistent"`, `client_secret_env = "CS"`), []string{"CS=" + testSecret}},
		{"client secret with PLAIN", oauthCluster(`mechanism = "PLAIN"`, `username = "u"`, `password = "p"`, `client_secret_env = "CS"`), []string{"CS=" + testSecret}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.hcl", []byte(tc.src), tc.environ)
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("error shows the password:\n%v", err)
			}
		})
	}
}
