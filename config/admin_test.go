package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const adminToken = "admin-token-0123456789abcdef"

// withAgent returns an agent block with the given lines (from line 2, at
// column 3), then withLink().
func withAgent(lines ...string) string {
	return "agent {\n  " + strings.Join(lines, "\n  ") + "\n}\n" + withLink()
}

// secretFile writes content to a file in a temporary directory and returns
// its path.
func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// problemLines parses src and returns its problems, one per line; it fails
// the test if src parses.
func problemLines(t *testing.T, src string, environ ...string) []string {
	t.Helper()
	cfg, err := Parse("t.hcl", []byte(src), environ)
	if err == nil {
		t.Fatalf("no error; config %+v", cfg)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error does not match ErrInvalid: %v", err)
	}
	return strings.Split(err.Error(), "\n")
}

// Guards the admin block: where the token comes from, and which listeners
// need none.
func TestParseAdmin(t *testing.T) {
	tokenPath := secretFile(t, "token", adminToken+"\n")
	cases := []struct {
		name    string
		src     string
		environ []string
		want    Admin
	}{
		{"no admin block on the default listener", withLink(), nil, Admin{}},
		{"token from an environment variable", withAgent(`listen = ":9644"`, `admin { token_env = "ADM" }`), []string{"ADM=" + adminToken},
			Admin{TokenEnv: "ADM", Token: adminToken}},
		{"token from a file, newline trimmed", withAgent(`listen = "0.0.0.0:9644"`, `admin { token_file = "`+tokenPath+`" }`), nil,
			Admin{TokenFile: tokenPath, Token: adminToken}},
		{"token_env from an override; its variable is not an override", withAgent(`listen = ":9644"`),
			[]string{"MIRRORD_AGENT__ADMIN__TOKEN_ENV=MIRRORD_AGENT_ADMIN_TOKEN", "MIRRORD_AGENT_ADMIN_TOKEN=" + adminToken},
			Admin{TokenEnv: "MIRRORD_AGENT_ADMIN_TOKEN", Token: adminToken}},
		{"a token_env variable that looks like an override", withAgent(`listen = ":9644"`, `admin { token_env = "MIRRORD_AGENT_TOKEN" }`),
			[]string{"MIRRORD_AGENT_TOKEN=" + adminToken}, Admin{TokenEnv: "MIRRORD_AGENT_TOKEN", Token: adminToken}},
		{"client certificates instead of a token", withAgent(`listen = ":9644"`, `admin {`, `  cert_file = "/c.pem"`, `  key_file = "/k.pem"`, `  client_ca_file = "/ca.pem"`, `}`), nil,
			Admin{CertFile: "/c.pem", KeyFile: "/k.pem", ClientCAFile: "/ca.pem"}},
		{"insecure_no_auth", withAgent(`listen = ":9644"`, `admin { insecure_no_auth = true }`), nil, Admin{InsecureNoAuth: true}},
		{"protect_metrics", withAgent(`admin {`, `  token_env = "ADM"`, `  protect_metrics = true`, `}`), []string{"ADM=" + adminToken},
			Admin{TokenEnv: "ADM", Token: adminToken, ProtectMetrics: true}},
	}
	for _, host := range []string{"127.0.0.1:9644", "127.3.2.1:1", "localhost:9644", "LocalHost:9644", "[::1]:9644"} {
		cases = append(cases, struct {
			name    string
			src     string
			environ []string
			want    Admin
		}{"loopback " + host, withAgent(`listen = "` + host + `"`), nil, Admin{}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, tc.src, tc.environ...)
			if got := cfg.Agent.Admin; !reflect.DeepEqual(got, tc.want) || got.Token != tc.want.Token {
				t.Errorf("admin %#v, want %#v (tokens equal: %v)", got, tc.want, got.Token == tc.want.Token)
			}
		})
	}
}

// Guards the refusals of the admin block and the rule that a listener
// other hosts reach needs authentication, with their exact messages.
func TestParseAdminProblems(t *testing.T) {
	empty := secretFile(t, "empty", "\n")
	missing := filepath.Join(t.TempDir(), "missing")
	refusal := func(where, listen string) string {
		return where + `: agent.admin.token_env: required when agent.listen ("` + listen + `") is not a loopback address: without it, anyone who can reach the port can pause and resume links ` +
			`(set agent.admin.token_env to the name of an environment variable that holds the admin token, or agent.admin.token_file to a file that holds it; ` +
			`or listen on 127.0.0.1; or require client certificates with agent.admin.client_ca_file; agent.admin.insecure_no_auth = true accepts it without authentication)`
	}
	cases := []struct {
		name    string
		src     string
		environ []string
		want    []string
	}{{
		name: "a token written in the file",
		src:  withAgent(`admin {`, `  token = "`+adminToken+`"`, `}`),
		want: []string{`t.hcl:3:5: agent.admin.token: not allowed (the admin token is never written in the configuration: set token_env to the name of an environment variable that holds it, or token_file to a file that holds it)`},
	}, {
		name:    "a token in an override",
		src:     withLink(),
		environ: []string{"MIRRORD_AGENT__ADMIN__TOKEN=" + adminToken},
		want:    []string{`MIRRORD_AGENT__ADMIN__TOKEN: agent.admin.token: not allowed (the admin token is never written in the configuration: set token_env to the name of an environment variable that holds it, or token_file to a file that holds it)`},
	}, {
		name: "misspelt key suggests an allowed one, not token",
		src:  withAgent(`admin { tokn_env = "X" }`),
		want: []string{`t.hcl:2:11: agent.admin.tokn_env: unknown key (did you mean token_env?)`},
	}, {
		name:    "token_env and token_file",
		src:     withAgent(`admin {`, `  token_env = "ADM"`, `  token_file = "/t"`, `}`),
		environ: []string{"ADM=" + adminToken},
		want:    []string{`t.hcl:4:18: agent.admin.token_file: token_env and token_file are both set (keep one of them)`},
	}, {
		name: "token_env naming an unset variable",
		src:  withAgent(`listen = ":9644"`, `admin { token_env = "ADM" }`),
		want: []string{`t.hcl:3:23: agent.admin.token_env: environment variable ADM is not set (export it before starting mirrord, or set token_file instead)`},
	}, {
		name:    "token_env naming a blank variable",
		src:     withAgent(`admin { token_env = "ADM" }`),
		environ: []string{"ADM= "},
		want:    []string{`t.hcl:2:23: agent.admin.token_env: environment variable ADM is empty (put the admin token in it)`},
	}, {
		name: "token_file that does not exist",
		src:  withAgent(`listen = ":9644"`, `admin { token_file = "`+missing+`" }`),
		want: []string{`t.hcl:3:24: agent.admin.token_file: ` + missing + ` does not exist (mount the secret there, or name the file that holds the admin token)`},
	}, {
		name: "empty token_file",
		src:  withAgent(`admin { token_file = "` + empty + `" }`),
		want: []string{`t.hcl:2:24: agent.admin.token_file: ` + empty + ` is empty (put the admin token in it)`},
	}, {
		name:    "short token",
		src:     withAgent(`admin { token_env = "ADM" }`),
		environ: []string{"ADM=short-token"},
		want:    []string{`t.hcl:2:23: agent.admin.token_env: the admin token from environment variable ADM (agent.admin.token_env) is shorter than 16 characters (use a long random token, e.g. the output of: openssl rand -hex 32)`},
	}, {
		name:    "token with a space",
		src:     withAgent(`admin { token_env = "ADM" }`),
		environ: []string{"ADM=two words, a long enough token"},
		want:    []string{`t.hcl:2:23: agent.admin.token_env: the admin token from environment variable ADM (agent.admin.token_env) has characters other than visible ASCII (an HTTP header carries it; use e.g. the output of: openssl rand -hex 32)`},
	}, {
		name: "every interface without a token",
		src:  withAgent(`listen = ":9644"`),
		want: []string{refusal("t.hcl:2:12", ":9644")},
	}, {
		name:    "a listener from an override without a token",
		src:     withLink(),
		environ: []string{"MIRRORD_AGENT__LISTEN=0.0.0.0:9644"},
		want:    []string{refusal("MIRRORD_AGENT__LISTEN", "0.0.0.0:9644")},
	}, {
		name: "an IPv6 wildcard without a token",
		src:  withAgent(`listen = "[::]:9644"`),
		want: []string{refusal("t.hcl:2:12", "[::]:9644")},
	}, {
		name: "a host name without a token",
		src:  withAgent(`listen = "mirrord.example.com:9644"`, `admin {`, `  cert_file = "/c.pem"`, `  key_file = "/k.pem"`, `}`),
		want: []string{refusal("t.hcl:2:12", "mirrord.example.com:9644")},
	}, {
		name: "protect_metrics without a token",
		src:  withAgent(`admin { protect_metrics = true }`),
		want: []string{`t.hcl:2:29: agent.admin.protect_metrics: needs an admin token (set token_env or token_file, or remove protect_metrics)`},
	}, {
		name:    "insecure_no_auth with a token",
		src:     withAgent(`admin {`, `  token_env = "ADM"`, `  insecure_no_auth = true`, `}`),
		environ: []string{"ADM=" + adminToken},
		want:    []string{`t.hcl:4:24: agent.admin.insecure_no_auth: is set together with a token or client_ca_file (remove insecure_no_auth: the listener is not open without authentication)`},
	}, {
		name: "cert_file without key_file",
		src:  withAgent(`admin { cert_file = "/c.pem" }`),
		want: []string{`t.hcl:2:3: agent.admin.key_file: required with cert_file (set key_file to the listener certificate's private key, or remove cert_file)`},
	}, {
		name: "key_file without cert_file",
		src:  withAgent(`admin { key_file = "/k.pem" }`),
		want: []string{`t.hcl:2:3: agent.admin.cert_file: required with key_file (set cert_file to the listener's certificate, or remove key_file)`},
	}, {
		name: "client_ca_file without TLS",
		src:  withAgent(`admin { client_ca_file = "/ca.pem" }`),
		want: []string{`t.hcl:2:3: agent.admin.cert_file: required with client_ca_file (client certificates need TLS: set cert_file and key_file)`},
	}, {
		name: "a bad token_env does not also report the listener",
		src:  withAgent(`listen = ":9644"`, `admin { token_env = "" }`),
		want: []string{`t.hcl:3:23: agent.admin.token_env: must not be empty (name the environment variable that holds the admin token)`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := problemLines(t, tc.src, tc.environ...); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// oauthCluster is a file with cluster "o" whose sasl block has the given
// lines (from line 4, at column 5), used by link "l" as its source.
func oauthCluster(lines ...string) string {
	return "cluster \"o\" {\n  bootstrap_servers = [\"o:9092\"]\n  sasl {\n    " + strings.Join(lines, "\n    ") + "\n  }\n}\n" +
		strings.Replace(withLink(), `source      = "a"`, `source      = "o"`, 1)
}

// Guards the SASL secrets from files and the OAUTHBEARER keys: each is
// decoded into its field.
func TestParseSASLSecrets(t *testing.T) {
	pw := secretFile(t, "pw", "file-Pa55word\n")
	cs := secretFile(t, "cs", "client-secret-1\n")
	tok := secretFile(t, "tok", "eyJ.static.token\n")
	cases := []struct {
		name    string
		src     string
		environ []string
		want    SASL
	}{
		{"password_file", oauthCluster(`mechanism = "SCRAM-SHA-512"`, `username = "u"`, `password_file = "`+pw+`"`), nil,
			SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "file-Pa55word", PasswordFile: pw}},
		{"OAUTHBEARER with a token file", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`), nil,
			SASL{Mechanism: "OAUTHBEARER", TokenFile: tok}},
		{"OAUTHBEARER client credentials with a secret file", oauthCluster(`mechanism = "OAUTHBEARER"`,
			`token_endpoint = "https://idp.example.com/oauth2/token"`, `client_id = "mirrord"`, `client_secret_file = "`+cs+`"`,
			`scope = "kafka write"`, `extensions = { logicalCluster = "lkc-1", "identityPoolId" = "pool-2" }`), nil,
			SASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "https://idp.example.com/oauth2/token", ClientID: "mirrord",
				ClientSecret: "client-secret-1", ClientSecretFile: cs, Scope: "kafka write",
				Extensions: map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}}},
		{"OAUTHBEARER client credentials with a secret from the environment on loopback http", oauthCluster(`mechanism = "OAUTHBEARER"`,
			`token_endpoint = "http://127.0.0.1:8080/token"`, `client_id = "mirrord"`, `client_secret_env = "CS"`), []string{"CS=env-secret"},
			SASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "http://127.0.0.1:8080/token", ClientID: "mirrord",
				ClientSecret: "env-secret", ClientSecretEnv: "CS"}},
		{"extensions from an override replace the file's", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `extensions = { a = "1", b = "2" }`),
			[]string{"MIRRORD_CLUSTER__o__SASL__EXTENSIONS=c=3, d = 4"},
			SASL{Mechanism: "OAUTHBEARER", TokenFile: tok, Extensions: map[string]string{"c": "3", "d": "4"}}},
		{"extensions from an override as an HCL map", oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`),
			[]string{`MIRRORD_CLUSTER__o__SASL__EXTENSIONS={traceId = "a,b"}`},
			SASL{Mechanism: "OAUTHBEARER", TokenFile: tok, Extensions: map[string]string{"traceId": "a,b"}}},
		{"client_secret_env variable that looks like an override", oauthCluster(`mechanism = "OAUTHBEARER"`,
			`token_endpoint = "https://idp/t"`, `client_id = "c"`), []string{"MIRRORD_CLUSTER__o__SASL__CLIENT_SECRET_ENV=MIRRORD_CLUSTER_SECRET", "MIRRORD_CLUSTER_SECRET=s"},
			SASL{Mechanism: "OAUTHBEARER", TokenEndpoint: "https://idp/t", ClientID: "c", ClientSecret: "s", ClientSecretEnv: "MIRRORD_CLUSTER_SECRET"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mustParse(t, tc.src, tc.environ...).Clusters["o"].SASL
			if !reflect.DeepEqual(got, tc.want) || got.Password != tc.want.Password || got.ClientSecret != tc.want.ClientSecret {
				t.Errorf("sasl %#v, want %#v (secrets equal: %v, %v)", got, tc.want, got.Password == tc.want.Password, got.ClientSecret == tc.want.ClientSecret)
			}
		})
	}
}

// Guards the problems of the SASL secret keys and of OAUTHBEARER, with
// their exact messages.
func TestParseSASLProblems(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tok := secretFile(t, "tok", "eyJ.static.token\n")
	const ep = `token_endpoint = "https://idp.example.com/token"`
	cases := []struct {
		name    string
		src     string
		environ []string
		want    []string
	}{{
		name: "password and password_file",
		src:  oauthCluster(`mechanism = "PLAIN"`, `username = "u"`, `password = "p"`, `password_file = "/pw"`),
		want: []string{`t.hcl:7:21: cluster.o.sasl.password_file: password and password_file are both set (keep one of them)`},
	}, {
		name:    "all three password keys",
		src:     oauthCluster(`mechanism = "PLAIN"`, `username = "u"`, `password = "p"`, `password_env = "P"`, `password_file = "/pw"`),
		environ: []string{"P=p"},
		want:    []string{`t.hcl:8:21: cluster.o.sasl.password_file: password, password_env and password_file are all set (keep one of them)`},
	}, {
		name: "password_file that does not exist",
		src:  oauthCluster(`mechanism = "PLAIN"`, `username = "u"`, `password_file = "`+missing+`"`),
		want: []string{`t.hcl:6:21: cluster.o.sasl.password_file: ` + missing + ` does not exist (mount the secret there, or name the file that holds the password)`},
	}, {
		name: "OAUTHBEARER without a token source",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`),
		want: []string{`t.hcl:3:3: cluster.o.sasl.token_file: required for OAUTHBEARER (set token_file to a file that holds a token, or token_endpoint, client_id and client_secret_file (or client_secret_env) for the client-credentials grant)`},
	}, {
		name: "token_file and token_endpoint",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, ep),
		want: []string{`t.hcl:6:22: cluster.o.sasl.token_endpoint: token_file and token_endpoint are both set (keep token_file for a token that something else keeps fresh, or token_endpoint for mirrord to get tokens itself)`},
	}, {
		name: "token_endpoint without a client",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, ep),
		want: []string{
			`t.hcl:3:3: cluster.o.sasl.client_id: required with token_endpoint (set client_id to the OAuth client's ID)`,
			`t.hcl:3:3: cluster.o.sasl.client_secret_file: required with token_endpoint (set client_secret_file to a file that holds the OAuth client's secret, or client_secret_env to the name of an environment variable that holds it)`,
		},
	}, {
		name: "a client secret written in the file",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, ep, `client_id = "c"`, `client_secret = "s3cr3t"`),
		want: []string{
			`t.hcl:7:5: cluster.o.sasl.client_secret: not allowed (a client secret is never written in the configuration: set client_secret_file to a file that holds it, or client_secret_env to the name of an environment variable that holds it)`,
		},
	}, {
		name:    "token endpoint over http to another host",
		src:     oauthCluster(`mechanism = "OAUTHBEARER"`, `token_endpoint = "http://idp.example.com/token"`, `client_id = "c"`, `client_secret_env = "CS"`),
		environ: []string{"CS=s"},
		want:    []string{`t.hcl:5:22: cluster.o.sasl.token_endpoint: "http://idp.example.com/token" is not https: the client secret would cross the network unencrypted (use https; http is accepted only for a token endpoint on a loopback address)`},
	}, {
		name:    "token endpoint with credentials in it",
		src:     oauthCluster(`mechanism = "OAUTHBEARER"`, `token_endpoint = "https://c:url-Secret@idp.example.com/token"`, `client_id = "c"`, `client_secret_env = "CS"`),
		environ: []string{"CS=s"},
		want:    []string{`t.hcl:5:22: cluster.o.sasl.token_endpoint: has credentials in it (put the client's ID in client_id and its secret in client_secret_file)`},
	}, {
		name:    "token endpoint that is not a URL",
		src:     oauthCluster(`mechanism = "OAUTHBEARER"`, `token_endpoint = "idp.example.com/token"`, `client_id = "c"`, `client_secret_env = "CS"`),
		environ: []string{"CS=s"},
		want:    []string{`t.hcl:5:22: cluster.o.sasl.token_endpoint: "idp.example.com/token" is not an http or https URL (write the token endpoint's URL, e.g. "https://idp.example.com/oauth2/token")`},
	}, {
		name: "username and password with OAUTHBEARER",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `username = "u"`, `password = "p"`),
		want: []string{
			`t.hcl:6:16: cluster.o.sasl.username: is not used by OAUTHBEARER (remove it; the token says who mirrord is)`,
			`t.hcl:7:16: cluster.o.sasl.password: is not used by OAUTHBEARER (remove it; OAUTHBEARER sends a token, from token_file or token_endpoint)`,
		},
	}, {
		name: "client_id with token_file",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `client_id = "c"`),
		want: []string{`t.hcl:6:17: cluster.o.sasl.client_id: is only used with token_endpoint (remove it; with token_file the token comes from the file)`},
	}, {
		name: "OAUTHBEARER keys with SCRAM",
		src:  oauthCluster(`mechanism = "SCRAM-SHA-256"`, `username = "u"`, `password = "p"`, `token_file = "`+tok+`"`, `extensions = { a = "b" }`),
		want: []string{
			`t.hcl:7:18: cluster.o.sasl.token_file: is only for mechanism = "OAUTHBEARER" (remove it, or set mechanism = "OAUTHBEARER")`,
			`t.hcl:8:18: cluster.o.sasl.extensions: is only for mechanism = "OAUTHBEARER" (remove it, or set mechanism = "OAUTHBEARER")`,
		},
	}, {
		name: "bad extensions",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `extensions = { auth = "x", "log-cluster" = "y", ok = "a\u0001b" }`),
		want: []string{
			`t.hcl:6:27: cluster.o.sasl.extensions.auth: "auth" is not an extension (OAUTHBEARER sends the token as auth; remove it)`,
			`t.hcl:6:48: cluster.o.sasl.extensions.log-cluster: invalid extension name "log-cluster" (SASL extension names are letters only (RFC 7628))`,
			`t.hcl:6:58: cluster.o.sasl.extensions.ok: has characters that an extension value cannot have (use printable ASCII, spaces and tabs (RFC 7628))`,
		},
	}, {
		name: "extensions that are not a map",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `extensions = ["a=b"]`),
		want: []string{`t.hcl:6:18: cluster.o.sasl.extensions: must be a map of strings, got list (write a map of strings such as { key = "value" })`},
	}, {
		name: "an extension value that is not a string",
		src:  oauthCluster(`mechanism = "OAUTHBEARER"`, `token_file = "`+tok+`"`, `extensions = { a = 1 }`),
		want: []string{`t.hcl:6:24: cluster.o.sasl.extensions.a: must be a string, got number (put the value in double quotes)`},
	}, {
		name:    "a client secret in an override",
		src:     oauthCluster(`mechanism = "OAUTHBEARER"`, ep, `client_id = "c"`, `client_secret_env = "CS"`),
		environ: []string{"CS=s", "MIRRORD_CLUSTER__o__SASL__CLIENT_SECRET=s3cr3t"},
		want:    []string{`MIRRORD_CLUSTER__o__SASL__CLIENT_SECRET: cluster.o.sasl.client_secret: not allowed (a client secret is never written in the configuration: set client_secret_file to a file that holds it, or client_secret_env to the name of an environment variable that holds it)`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := problemLines(t, tc.src, tc.environ...)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
			for _, s := range []string{"s3cr3t", "url-Secret"} {
				if strings.Contains(strings.Join(got, "\n"), s) {
					t.Errorf("a secret appears in the problems")
				}
			}
		})
	}
}

// Guards ParseAgent: the commands that call the admin API get the agent
// block and its token without the clusters' secrets, and see the agent
// block's problems only.
func TestParseAgent(t *testing.T) {
	tokenPath := secretFile(t, "token", adminToken+"\n")
	src := "agent {\n  listen = \"0.0.0.0:9700\"\n  admin { token_file = \"" + tokenPath + "\" }\n}\n" +
		"cluster \"a\" {\n  bootstrap_servers = [\"a:9092\"]\n  sasl {\n    mechanism = \"PLAIN\"\n    username = \"u\"\n    password_env = \"UNSET_PW\"\n  }\n}\n" +
		"cluster \"b\" {\n  bootstrap_servers = [\"b:9092\"]\n}\nlink \"l\" {\n  source = \"a\"\n  destination = \"b\"\n  topics { include = [\"(\"] }\n}\n"
	if _, err := Parse("t.hcl", []byte(src), nil); err == nil {
		t.Fatal("Parse accepted a file with an unset password_env and a bad pattern")
	}
	a, err := ParseAgent("t.hcl", []byte(src), nil)
	if err != nil {
		t.Fatalf("ParseAgent: %v", err)
	}
	if a.Listen != "0.0.0.0:9700" || a.Admin.Token != adminToken || a.Admin.TokenFile != tokenPath {
		t.Errorf("agent %+v", a)
	}

	bad := strings.Replace(src, tokenPath, tokenPath+".missing", 1)
	_, err = ParseAgent("t.hcl", []byte(bad), nil)
	want := `t.hcl:3:24: agent.admin.token_file: ` + tokenPath + `.missing does not exist (mount the secret there, or name the file that holds the admin token)`
	if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseAgent with a missing token file:\n got %v\nwant %s", err, want)
	}
	if _, err := ParseAgent("t.hcl", []byte("agent {\n"), nil); err == nil || !strings.Contains(err.Error(), "invalid HCL syntax") {
		t.Errorf("ParseAgent of a broken file: %v", err)
	}
}
