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
// comma-separated or an HCL list (for patterns that contain commas).
// Overrides change blocks that the file defines: naming a cluster or link
// that is not in the file is an error, as are unknown keys and bad
// values. A variable whose name does not start with MIRRORD_AGENT,
// MIRRORD_CLUSTER or MIRRORD_LINK is not an override and is ignored (the
// command line may use such names), and so is a variable that some
// password_env names.
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
// The SASL password never appears in an error, and Cluster and SASL
// redact it in every fmt verb and in JSON. Prefer password_env, which
// names an environment variable that holds the password.
//
// The package has no goroutines and no state; Load reads one file.
package config
