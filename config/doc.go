// Package config loads the agent's HCL configuration file into a validated
// runtime Config.
//
// Two layers, as in Consul: the file config (the values as written, nil
// where unset) and the runtime config (defaults filled in, patterns
// compiled, the SASL password read, every rule checked) that components
// receive. Load and Parse go through these steps:
//
//  1. The file is parsed with hashicorp/hcl/v2 and each body is checked
//     against a schema (hcl.Body.Content), so an unknown key or block, a
//     duplicate block or a key set twice is reported with its position.
//     Every value is a literal; it is type-checked on the way in.
//  2. The decoded values are loaded into koanf, then the MIRRORD_
//     environment overrides are layered over them (koanf's env provider).
//  3. The merged values are unmarshalled into the file config, turned into
//     the runtime Config and validated.
//
// # Errors
//
// Parse reports every problem at once: one error (errors.Join of *Problem)
// that lists them in file order, then the environment overrides by
// variable name, each as
//
//	file:line:column: key.path: what is wrong (what to do)
//	MIRRORD_LINK__eu__CHECKPOINT_INTERVAL: link.eu.checkpoint_interval: invalid duration "10x" (...)
//
// A missing key is reported at the block that lacks it. Every problem
// matches ErrInvalid.
//
// # Environment overrides
//
// A variable MIRRORD_<BLOCK>__[<name>__]<KEY> sets one key, with a double
// underscore between levels. Block and key names are case-insensitive;
// cluster and link names are case-sensitive and written as in the file:
//
//	MIRRORD_AGENT__LOG_LEVEL=debug                  agent.log_level
//	MIRRORD_CLUSTER__src__BOOTSTRAP_SERVERS=a:9092,b:9092
//	MIRRORD_CLUSTER__src__SASL__PASSWORD=...        cluster.src.sasl.password
//	MIRRORD_LINK__eu__CHECKPOINT_INTERVAL=10s       link.eu.checkpoint_interval
//	MIRRORD_LINK__eu__TOPICS__INCLUDE=["a{1,2}", "b"]
//
// Values are written as in the file without quotes; a list is either
// comma-separated or an HCL list (for patterns that contain commas); a map
// is comma-separated key=value pairs or an HCL map ({key = "value"}).
// Overrides change blocks that the file defines: naming a cluster or link
// that is not in the file is an error, as are unknown keys and bad
// values. A variable whose name does not start with MIRRORD_AGENT,
// MIRRORD_CLUSTER or MIRRORD_LINK is not an override and is ignored (the
// command line may use such names), and so is a variable that some
// password_env, token_env or client_secret_env names.
//
// # Rules
//
// Cluster and link names use letters, digits, '-' and single '_' (they
// appear in variable names, topic names and metric labels). Topic patterns
// are Go RE2 expressions matched against the whole topic name: "orders"
// selects only the topic "orders", "orders\..*" every topic that starts
// with "orders.". A link needs at least one include pattern (write [".*"]
// for every topic); an exclude pattern always wins; topics whose names
// start with "__" and the link's own state topic are never mirrored. The
// rename template must contain {topic} and may contain {source} (the
// source cluster's name). checkpoint_interval may be at most a third of
// session_timeout: a session renews its lease by checkpointing. tls is
// enabled when a tls block is present unless it says enabled = false.
// config.example.hcl at the repository root documents every key with its
// default.
//
// # Secrets
//
// A secret comes from the environment or from a file, and for the SASL
// password also from the file itself: password, password_env or
// password_file (exactly one); the admin token from token_env or
// token_file; the OAuth client secret from client_secret_env or
// client_secret_file. The admin token and the client secret are never
// written in the configuration: a token or client_secret key, in the file
// or as an override, is a problem that says where to put it. Parse reads
// every secret (a file's surrounding whitespace removed) and reports a
// variable that is unset or empty and a file that is missing, unreadable
// or empty at the key that names it; the components that use a secret
// from a file read it again when it changes (internal/secret). A token
// file of an OAUTHBEARER cluster is checked the same way.
//
// No secret appears in an error: messages name the variable or the file,
// and a token endpoint with credentials in its URL is not shown. Admin,
// Cluster and SASL redact their secrets in every fmt verb and in JSON.
//
// # The admin listener
//
// agent.listen on an address other than loopback (localhost, 127.0.0.0/8,
// ::1) needs agent.admin.token_env or token_file, or client certificates
// (client_ca_file), or an explicit insecure_no_auth = true: otherwise
// Parse reports agent.admin.token_env at the position of agent.listen.
// ParseAgent and LoadAgent parse the agent block alone, for the commands
// that call a running agent's admin API.
//
// The package has no goroutines and no state; Load reads one file, and
// Parse the secret files that the configuration names.
package config
