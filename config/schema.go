package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// kind is the type of a key's value.
type kind int

const (
	kindString   kind = iota
	kindBool          // true | false
	kindInt           // a whole number
	kindDuration      // a Go duration string: "5s", "1h30m"
	kindSize          // a byte count: a whole number or a string such as "64MiB"
	kindList          // a list of strings
	kindMap           // a map of strings: { key = "value" }
)

type keySpec struct {
	name   string
	kind   kind
	secret bool // the value never appears in a message
	// envRef: the value names an environment variable that holds a
	// secret; that variable is not an override.
	envRef bool
	// refuse, if set, makes the key an error wherever it is written,
	// with this hint: a secret that must not be in the file.
	refuse string
}

// blockSpec describes one block type: its keys and nested blocks.
type blockSpec struct {
	typ      string
	labelled bool // cluster "name" {} and link "name" {}
	keys     []keySpec
	blocks   []*blockSpec
}

var (
	tlsSpec = &blockSpec{typ: "tls", keys: []keySpec{
		{name: "enabled", kind: kindBool},
		{name: "ca_file"},
		{name: "cert_file"},
		{name: "key_file"},
		{name: "server_name"},
		{name: "insecure_skip_verify", kind: kindBool},
	}}
	saslSpec = &blockSpec{typ: "sasl", keys: []keySpec{
		{name: "mechanism"},
		{name: "username"},
		{name: "password", secret: true},
		{name: "password_env", envRef: true},
		{name: "password_file"},
		{name: "token_file"},
		{name: "token_endpoint"},
		{name: "client_id"},
		{name: "client_secret", secret: true, refuse: "a client secret is never written in the configuration: set client_secret_file to a file that holds it, or client_secret_env to the name of an environment variable that holds it"},
		{name: "client_secret_env", envRef: true},
		{name: "client_secret_file"},
		{name: "scope"},
		{name: "extensions", kind: kindMap},
	}}
	adminSpec = &blockSpec{typ: "admin", keys: []keySpec{
		{name: "token", secret: true, refuse: "the admin token is never written in the configuration: set token_env to the name of an environment variable that holds it, or token_file to a file that holds it"},
		{name: "token_env", envRef: true},
		{name: "token_file"},
		{name: "protect_metrics", kind: kindBool},
		{name: "insecure_no_auth", kind: kindBool},
		{name: "cert_file"},
		{name: "key_file"},
		{name: "client_ca_file"},
	}}
	topicsSpec = &blockSpec{typ: "topics", keys: []keySpec{
		{name: "include", kind: kindList},
		{name: "exclude", kind: kindList},
	}}
	groupsSpec = &blockSpec{typ: "groups", keys: []keySpec{
		{name: "include", kind: kindList},
		{name: "exclude", kind: kindList},
	}}
	shareGroupsSpec = &blockSpec{typ: "share_groups", keys: []keySpec{
		{name: "include", kind: kindList},
		{name: "exclude", kind: kindList},
	}}
	configSyncSpec = &blockSpec{typ: "config_sync", keys: []keySpec{
		{name: "enabled", kind: kindBool},
		{name: "all_topics", kind: kindBool},
		{name: "include", kind: kindList},
		{name: "exclude", kind: kindList},
	}}
	aclSyncSpec = &blockSpec{typ: "acl_sync", keys: []keySpec{
		{name: "enabled", kind: kindBool},
		{name: "write", kind: kindBool},
	}}
	agentSpec = &blockSpec{typ: "agent", keys: []keySpec{
		{name: "name"},
		{name: "listen"},
		{name: "log_level"},
		{name: "log_format"},
		{name: "shutdown_timeout", kind: kindDuration},
		{name: "memory_limit", kind: kindSize},
	}, blocks: []*blockSpec{adminSpec}}
	clusterSpec = &blockSpec{typ: "cluster", labelled: true, keys: []keySpec{
		{name: "bootstrap_servers", kind: kindList},
		{name: "client_id"},
		{name: "cluster_id"},
	}, blocks: []*blockSpec{tlsSpec, saslSpec}}
	linkSpec = &blockSpec{typ: "link", labelled: true, keys: []keySpec{
		{name: "source"},
		{name: "destination"},
		{name: "rename"},
		{name: "start_from"},
		{name: "state_topic"},
		{name: "state_topic_partitions", kind: kindInt},
		{name: "state_topic_replication_factor", kind: kindInt},
		{name: "checkpoint_interval", kind: kindDuration},
		{name: "session_timeout", kind: kindDuration},
		{name: "max_buffered_bytes", kind: kindSize},
		{name: "coalesce_bytes", kind: kindSize},
		{name: "on_offset_out_of_range"},
		{name: "producer_state_expiry", kind: kindDuration},
		{name: "produce_timeout", kind: kindDuration},
		{name: "delivery"},
		{name: "transaction_timeout", kind: kindDuration},
		{name: "unattributed"},
		{name: "return_home", kind: kindBool},
		{name: "shared_destination", kind: kindBool},
		{name: "settle_delay", kind: kindDuration},
		{name: "discovery_interval", kind: kindDuration},
		{name: "destination_replication_factor", kind: kindInt},
		{name: "check_crcs", kind: kindBool},
		{name: "group_sync_interval", kind: kindDuration},
		{name: "config_sync_interval", kind: kindDuration},
		{name: "acl_sync_interval", kind: kindDuration},
		{name: "slots", kind: kindInt},
	}, blocks: []*blockSpec{topicsSpec, groupsSpec, shareGroupsSpec, configSyncSpec, aclSyncSpec}}
	rootSpec = &blockSpec{blocks: []*blockSpec{agentSpec, clusterSpec, linkSpec}}
)

func (b *blockSpec) key(name string) (keySpec, bool) {
	for _, k := range b.keys {
		if k.name == name {
			return k, true
		}
	}
	return keySpec{}, false
}

// envRefKeys are the names of the keys that name an environment variable
// holding a secret, in every block.
func envRefKeys() []string {
	var out []string
	var walk func(b *blockSpec)
	walk = func(b *blockSpec) {
		for _, k := range b.keys {
			if k.envRef && !slices.Contains(out, k.name) {
				out = append(out, k.name)
			}
		}
		for _, sub := range b.blocks {
			walk(sub)
		}
	}
	walk(rootSpec)
	return out
}

// envRefValues adds to out the variable names that the envRef keys of
// values (decoded with spec) hold.
func envRefValues(spec *blockSpec, values map[string]any, out map[string]bool) {
	for _, k := range spec.keys {
		if name, ok := values[k.name].(string); ok && k.envRef {
			out[name] = true
		}
	}
	for _, sub := range spec.blocks {
		if !sub.labelled {
			inner, _ := values[sub.typ].(map[string]any)
			envRefValues(sub, inner, out)
			continue
		}
		byLabel, _ := values[sub.typ].(map[string]any)
		for _, v := range byLabel {
			inner, _ := v.(map[string]any)
			envRefValues(sub, inner, out)
		}
	}
}

func (b *blockSpec) block(typ string) (*blockSpec, bool) {
	for _, s := range b.blocks {
		if s.typ == typ {
			return s, true
		}
	}
	return nil, false
}

// hcl returns the schema that hcl.Body.Content checks a body against.
func (b *blockSpec) hcl() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, k := range b.keys {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: k.name})
	}
	for _, sub := range b.blocks {
		h := hcl.BlockHeaderSchema{Type: sub.typ}
		if sub.labelled {
			h.LabelNames = []string{"name"}
		}
		s.Blocks = append(s.Blocks, h)
	}
	return s
}

// unknownHint says what may be written where an unknown key or block was
// found: the closest allowed name, or the list of them.
func (b *blockSpec) unknownHint(name string, wantBlock bool) string {
	if _, ok := b.block(name); ok && !wantBlock {
		return fmt.Sprintf("%s is a block: write %s { ... } without '='", name, name)
	}
	if _, ok := b.key(name); ok && wantBlock {
		return fmt.Sprintf("%s is a key: write %s = value", name, name)
	}
	var names []string
	if wantBlock {
		for _, s := range b.blocks {
			names = append(names, s.typ)
		}
	} else {
		for _, k := range b.keys {
			if k.refuse == "" {
				names = append(names, k.name)
			}
		}
	}
	if s := closest(name, names); s != "" {
		return "did you mean " + s + "?"
	}
	what := "keys"
	if wantBlock {
		what = "blocks"
	}
	if len(names) == 0 {
		return "no " + what + " are allowed here"
	}
	return fmt.Sprintf("allowed %s here: %s", what, strings.Join(names, ", "))
}

// closest returns the candidate nearest to name by edit distance if it is
// near enough to be a likely typo, else "".
func closest(name string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// labelRE is what a cluster or link name may look like: it becomes part of
// environment variable names (levels split by "__"), destination topic
// names ({source}), metric labels and the link's transactional.id.
var labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$`)

// ValidName reports whether name can be the name of a cluster or a link.
func ValidName(name string) bool { return labelRE.MatchString(name) }

const labelHint = "use letters, digits, '-' and single '_', starting with a letter or digit"

// oneOf formats allowed values: "a, b or c".
func oneOf(values []string) string {
	switch len(values) {
	case 0:
		return ""
	case 1:
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

func contains(values []string, v string) bool { return slices.Contains(values, v) }
