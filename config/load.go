package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"

	"github.com/seed83556561/mirrord/internal/secret"
	"github.com/seed83556561/mirrord/internal/topicconfig"
)

// Load reads the HCL file at path and parses it with the process's
// environment (see Parse).
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src, os.Environ())
}

// Parse decodes an HCL configuration, applies the MIRRORD_ overrides found
// in environ ("NAME=value" entries, as os.Environ returns them), fills in
// defaults and validates the result. filename is used in messages. On any
// problem it returns nil and one error that lists every problem (see
// Problem); the error matches ErrInvalid.
func Parse(filename string, src []byte, environ []string) (*Config, error) {
	return parse(filename, src, environ, false)
}

// LoadAgent reads the HCL file at path and parses its agent block with the
// process's environment (see ParseAgent).
func LoadAgent(path string) (Agent, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Agent{}, fmt.Errorf("read config: %w", err)
	}
	return ParseAgent(path, src, os.Environ())
}

// ParseAgent is Parse for the commands that talk to a running agent
// (mirrord links, pause, resume): it returns the validated agent block,
// with the admin token read from token_env or token_file, and reports the
// problems of the agent block only. The clusters' secrets are not read, so
// their variables and files need not be there.
func ParseAgent(filename string, src []byte, environ []string) (Agent, error) {
	cfg, err := parse(filename, src, environ, true)
	if err != nil {
		return Agent{}, err
	}
	return cfg.Agent, nil
}

func parse(filename string, src []byte, environ []string, agentOnly bool) (*Config, error) {
	ps := &problems{}
	d := newDecoder(filename, src, ps)
	d.agentOnly = agentOnly
	body := d.parse()
	if body == nil {
		return nil, ps.err()
	}

	// Layer 1: the file.
	values := map[string]any{}
	d.body(body, rootSpec, "", values)
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(values, ""), nil); err != nil {
		return nil, fmt.Errorf("load file values: %w", err)
	}

	// Layer 2: the environment.
	overrides := d.environment(environ, values)
	var accepted []string
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); overrides[name].path != "" {
			accepted = append(accepted, kv)
		}
	}
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return accepted },
		TransformFunc: func(name, _ string) (string, any) {
			o := overrides[name]
			return o.path, o.value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("load environment overrides: %w", err)
	}

	// Merged values → file config → runtime config.
	var fc fileConfig
	err = k.UnmarshalWithConf("", &fc, koanf.UnmarshalConf{DecoderConfig: &mapstructure.DecoderConfig{
		TagName:     "koanf",
		ErrorUnused: true,
	}})
	if err != nil {
		// Every value was type-checked on the way in.
		return nil, fmt.Errorf("unmarshal config: %w", err)
	}
	cfg := d.build(&fc, environ)
	cfg.File = filename
	validate(cfg, d.where, ps)
	if agentOnly {
		ps.keep(func(p *Problem) bool { return p.Key == "" || p.Key == "agent" || strings.HasPrefix(p.Key, "agent.") })
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate checks a Config built in code (Default and changes to it) by the
// rules Parse applies. Problems have no position; their keys are the HCL
// key paths.
func (c *Config) Validate() error {
	ps := &problems{}
	validate(c, func(string) (origin, bool) { return origin{}, false }, ps)
	return ps.err()
}

// The file config: the merged values as written, nil where unset.
type fileConfig struct {
	Agent   fileAgent              `koanf:"agent"`
	Cluster map[string]fileCluster `koanf:"cluster"`
	Link    map[string]fileLink    `koanf:"link"`
}

type fileAgent struct {
	Name      *string `koanf:"name"`
	Listen    *string `koanf:"listen"`
	LogLevel  *string `koanf:"log_level"`
	LogFormat *string `koanf:"log_format"`

	ShutdownTimeout *time.Duration `koanf:"shutdown_timeout"`
	MemoryLimit     *int64         `koanf:"memory_limit"`

	Admin fileAdmin `koanf:"admin"`
}

type fileAdmin struct {
	TokenEnv       *string `koanf:"token_env"`
	TokenFile      *string `koanf:"token_file"`
	ProtectMetrics *bool   `koanf:"protect_metrics"`
	InsecureNoAuth *bool   `koanf:"insecure_no_auth"`
	CertFile       *string `koanf:"cert_file"`
	KeyFile        *string `koanf:"key_file"`
	ClientCAFile   *string `koanf:"client_ca_file"`
}

type fileCluster struct {
	BootstrapServers []string `koanf:"bootstrap_servers"`
	ClientID         *string  `koanf:"client_id"`
	ClusterID        *string  `koanf:"cluster_id"`
	TLS              fileTLS  `koanf:"tls"`
	SASL             fileSASL `koanf:"sasl"`
}

type fileTLS struct {
	Enabled            *bool   `koanf:"enabled"`
	CAFile             *string `koanf:"ca_file"`
	CertFile           *string `koanf:"cert_file"`
	KeyFile            *string `koanf:"key_file"`
	ServerName         *string `koanf:"server_name"`
	InsecureSkipVerify *bool   `koanf:"insecure_skip_verify"`
}

type fileSASL struct {
	Mechanism    *string `koanf:"mechanism"`
	Username     *string `koanf:"username"`
	Password     *string `koanf:"password"`
	PasswordEnv  *string `koanf:"password_env"`
	PasswordFile *string `koanf:"password_file"`

	TokenFile        *string           `koanf:"token_file"`
	TokenEndpoint    *string           `koanf:"token_endpoint"`
	ClientID         *string           `koanf:"client_id"`
	ClientSecretEnv  *string           `koanf:"client_secret_env"`
	ClientSecretFile *string           `koanf:"client_secret_file"`
	Scope            *string           `koanf:"scope"`
	Extensions       map[string]string `koanf:"extensions"`
}

type fileLink struct {
	Source                      *string        `koanf:"source"`
	Destination                 *string        `koanf:"destination"`
	Topics                      fileTopics     `koanf:"topics"`
	Rename                      *string        `koanf:"rename"`
	StartFrom                   *string        `koanf:"start_from"`
	StateTopic                  *string        `koanf:"state_topic"`
	StateTopicPartitions        *int64         `koanf:"state_topic_partitions"`
	StateTopicReplicationFactor *int64         `koanf:"state_topic_replication_factor"`
	CheckpointInterval          *time.Duration `koanf:"checkpoint_interval"`
	SessionTimeout              *time.Duration `koanf:"session_timeout"`
	MaxBufferedBytes            *int64         `koanf:"max_buffered_bytes"`
	CoalesceBytes               *int64         `koanf:"coalesce_bytes"`
	OnOffsetOutOfRange          *string        `koanf:"on_offset_out_of_range"`
	ProducerStateExpiry         *time.Duration `koanf:"producer_state_expiry"`

	ProduceTimeout               *time.Duration `koanf:"produce_timeout"`
	Delivery                     *string        `koanf:"delivery"`
	TransactionTimeout           *time.Duration `koanf:"transaction_timeout"`
	Unattributed                 *string        `koanf:"unattributed"`
	ReturnHome                   *bool          `koanf:"return_home"`
	SharedDestination            *bool          `koanf:"shared_destination"`
	SettleDelay                  *time.Duration `koanf:"settle_delay"`
	DiscoveryInterval            *time.Duration `koanf:"discovery_interval"`
	DestinationReplicationFactor *int64         `koanf:"destination_replication_factor"`
	CheckCRCs                    *bool          `koanf:"check_crcs"`
	Groups                       fileTopics     `koanf:"groups"`
	ShareGroups                  fileTopics     `koanf:"share_groups"`
	GroupSyncInterval            *time.Duration `koanf:"group_sync_interval"`
	ConfigSync                   fileConfigSync `koanf:"config_sync"`
	ConfigSyncInterval           *time.Duration `koanf:"config_sync_interval"`
	ACLSync                      fileACLSync    `koanf:"acl_sync"`
	ACLSyncInterval              *time.Duration `koanf:"acl_sync_interval"`
	Slots                        *int64         `koanf:"slots"`
}

type fileACLSync struct {
	Enabled *bool `koanf:"enabled"`
	Write   *bool `koanf:"write"`
}

type fileConfigSync struct {
	Enabled   *bool    `koanf:"enabled"`
	AllTopics *bool    `koanf:"all_topics"`
	Include   []string `koanf:"include"`
	Exclude   []string `koanf:"exclude"`
}

type fileTopics struct {
	Include []string `koanf:"include"`
	Exclude []string `koanf:"exclude"`
}

func or[T any](p *T, def T) T {
	if p != nil {
		return *p
	}
	return def
}

// build turns the file config into the runtime config: defaults, compiled
// patterns, the password read from password_env. Range and consistency
// checks are left to validate.
func (d *decoder) build(fc *fileConfig, environ []string) *Config {
	cfg := &Config{
		Agent: Agent{
			Name:      or(fc.Agent.Name, DefaultAgentName),
			Listen:    or(fc.Agent.Listen, DefaultListen),
			LogLevel:  or(fc.Agent.LogLevel, DefaultLogLevel),
			LogFormat: or(fc.Agent.LogFormat, DefaultLogFormat),

			ShutdownTimeout: or(fc.Agent.ShutdownTimeout, DefaultShutdownTimeout),
			MemoryLimit:     or(fc.Agent.MemoryLimit, 0),
			Admin:           d.buildAdmin(fc.Agent.Admin, environ),
		},
		Clusters: map[string]*Cluster{},
	}
	for _, name := range d.labels["cluster"] {
		cfg.Clusters[name] = d.buildCluster(name, fc.Cluster[name], environ)
	}
	for _, name := range d.labels["link"] {
		cfg.Links = append(cfg.Links, d.buildLink(name, fc.Link[name]))
	}
	return cfg
}

func (d *decoder) buildCluster(name string, fc fileCluster, environ []string) *Cluster {
	key := "cluster." + name
	_, hasTLS := d.origins[key+".tls"]
	c := &Cluster{
		Name:             name,
		BootstrapServers: fc.BootstrapServers,
		ClientID:         or(fc.ClientID, DefaultClientID),
		ClusterID:        or(fc.ClusterID, ""),
		TLS: TLS{
			Enabled:            or(fc.TLS.Enabled, hasTLS),
			CAFile:             or(fc.TLS.CAFile, ""),
			CertFile:           or(fc.TLS.CertFile, ""),
			KeyFile:            or(fc.TLS.KeyFile, ""),
			ServerName:         or(fc.TLS.ServerName, ""),
			InsecureSkipVerify: or(fc.TLS.InsecureSkipVerify, false),
		},
		SASL: SASL{
			Mechanism:        or(fc.SASL.Mechanism, ""),
			Username:         or(fc.SASL.Username, ""),
			PasswordEnv:      or(fc.SASL.PasswordEnv, ""),
			PasswordFile:     or(fc.SASL.PasswordFile, ""),
			TokenFile:        or(fc.SASL.TokenFile, ""),
			TokenEndpoint:    or(fc.SASL.TokenEndpoint, ""),
			ClientID:         or(fc.SASL.ClientID, ""),
			ClientSecretEnv:  or(fc.SASL.ClientSecretEnv, ""),
			ClientSecretFile: or(fc.SASL.ClientSecretFile, ""),
			Scope:            or(fc.SASL.Scope, ""),
			Extensions:       fc.SASL.Extensions,
		},
	}
	if d.agentOnly {
		// The commands that call the admin API need no cluster secret.
		c.SASL.Password = or(fc.SASL.Password, "")
		return c
	}
	prefix := key + ".sasl"
	c.SASL.Password = d.secret(secretKeys{prefix: prefix, name: "password", what: "the password", literalAllowed: true},
		fc.SASL.Password, fc.SASL.PasswordEnv, fc.SASL.PasswordFile, environ)
	c.SASL.ClientSecret = d.secret(secretKeys{prefix: prefix, name: "client_secret", what: "the client secret"},
		nil, fc.SASL.ClientSecretEnv, fc.SASL.ClientSecretFile, environ)
	if fc.SASL.TokenFile != nil && !d.ps.hasFailed(prefix+".token_file") {
		// Checked once here, so that a missing file is a problem at
		// start; the client reads it again for every connection.
		d.readSecretFile(prefix+".token_file", *fc.SASL.TokenFile, "the token")
	}
	return c
}

func (d *decoder) buildAdmin(fa fileAdmin, environ []string) Admin {
	a := Admin{
		TokenEnv:       or(fa.TokenEnv, ""),
		TokenFile:      or(fa.TokenFile, ""),
		ProtectMetrics: or(fa.ProtectMetrics, false),
		InsecureNoAuth: or(fa.InsecureNoAuth, false),
		CertFile:       or(fa.CertFile, ""),
		KeyFile:        or(fa.KeyFile, ""),
		ClientCAFile:   or(fa.ClientCAFile, ""),
	}
	a.Token = d.secret(secretKeys{prefix: "agent.admin", name: "token", what: "the admin token"},
		nil, fa.TokenEnv, fa.TokenFile, environ)
	return a
}

// secretKeys names the keys that give one secret: name (the value itself,
// if literalAllowed), name_env and name_file, in the block prefix.
type secretKeys struct {
	prefix, name   string
	what           string // "the password", for messages
	literalAllowed bool
}

// secret resolves a secret from whichever of its keys is set and reports
// what is wrong at that key. More than one set is a problem at the last.
// When name_env or name_file is set, the key prefix.name is marked failed:
// a problem with the secret is reported here, and validate does not report
// it missing again.
func (d *decoder) secret(k secretKeys, literal, env, file *string, environ []string) string {
	key := func(suffix string) string { return k.prefix + "." + k.name + suffix }
	var set []string
	if literal != nil {
		set = append(set, k.name)
	}
	if env != nil {
		set = append(set, k.name+"_env")
	}
	if file != nil {
		set = append(set, k.name+"_file")
	}
	if env != nil || file != nil {
		d.ps.fail(key(""))
	}
	switch {
	case len(set) == 0:
		return ""
	case len(set) > 1:
		last := k.prefix + "." + set[len(set)-1]
		msg := set[0] + " and " + set[1] + " are both set"
		if len(set) == 3 {
			msg = set[0] + ", " + set[1] + " and " + set[2] + " are all set"
		}
		d.ps.add(d.whereAny(last), last, msg, "keep one of them")
		return ""
	case env != nil:
		envKey := key("_env")
		at := d.whereAny(envKey)
		alt := k.name + "_file"
		if k.literalAllowed {
			alt = k.name
		}
		switch value, found := lookupEnv(environ, *env); {
		case d.ps.hasFailed(envKey):
		case *env == "":
			d.ps.add(at, envKey, "must not be empty", "name the environment variable that holds "+k.what)
		case !found:
			d.ps.add(at, envKey, fmt.Sprintf("environment variable %s is not set", *env),
				"export it before starting mirrord, or set "+alt+" instead")
		case strings.TrimSpace(value) == "":
			d.ps.add(at, envKey, fmt.Sprintf("environment variable %s is empty", *env), "put "+k.what+" in it")
		default:
			return value
		}
		return ""
	case file != nil:
		if d.ps.hasFailed(key("_file")) {
			return ""
		}
		return d.readSecretFile(key("_file"), *file, k.what)
	}
	return *literal
}

// readSecretFile reads the secret file that key names and reports why it
// cannot be used. The message names the file, never its content.
func (d *decoder) readSecretFile(key, path, what string) string {
	at := d.whereAny(key)
	if path == "" {
		d.ps.add(at, key, "must not be empty", "name the file that holds "+what)
		return ""
	}
	value, err := secret.Read(path)
	switch {
	case errors.Is(err, secret.ErrEmpty):
		d.ps.add(at, key, fmt.Sprintf("%s is empty", path), "put "+what+" in it")
	case errors.Is(err, fs.ErrNotExist):
		d.ps.add(at, key, fmt.Sprintf("%s does not exist", path), "mount the secret there, or name the file that holds "+what)
	case err != nil:
		d.ps.add(at, key, "cannot read "+what+": "+err.Error(), "make the file readable by mirrord's user")
	}
	return value
}

// lookupEnv finds name in environ; the last entry wins, as in os.Getenv.
func lookupEnv(environ []string, name string) (string, bool) {
	value, found := "", false
	for _, kv := range environ {
		if n, v, ok := strings.Cut(kv, "="); ok && n == name {
			value, found = v, true
		}
	}
	return value, found
}

func (d *decoder) buildLink(name string, fl fileLink) *Link {
	key := "link." + name
	l := &Link{
		Name:                        name,
		Source:                      or(fl.Source, ""),
		Destination:                 or(fl.Destination, ""),
		Include:                     d.patterns(key+".topics.include", fl.Topics.Include),
		Exclude:                     d.patterns(key+".topics.exclude", fl.Topics.Exclude),
		Rename:                      or(fl.Rename, DefaultRename),
		StartFrom:                   StartFrom(or(fl.StartFrom, string(DefaultStartFrom))),
		StateTopic:                  or(fl.StateTopic, DefaultStateTopic),
		StateTopicPartitions:        DefaultStateTopicPartitions,
		StateTopicReplicationFactor: DefaultStateTopicReplicationFactor,
		CheckpointInterval:          or(fl.CheckpointInterval, DefaultCheckpointInterval),
		SessionTimeout:              or(fl.SessionTimeout, DefaultSessionTimeout),
		ProducerStateExpiry:         or(fl.ProducerStateExpiry, DefaultProducerStateExpiry),
		MaxBufferedBytes:            or(fl.MaxBufferedBytes, DefaultMaxBufferedBytes),
		CoalesceBytes:               or(fl.CoalesceBytes, DefaultCoalesceBytes),
		OnOffsetOutOfRange:          OutOfRange(or(fl.OnOffsetOutOfRange, string(DefaultOnOffsetOutOfRange))),

		ProduceTimeout:               or(fl.ProduceTimeout, DefaultProduceTimeout),
		Delivery:                     Delivery(or(fl.Delivery, string(DefaultDelivery))),
		TransactionTimeout:           or(fl.TransactionTimeout, DefaultTransactionTimeout),
		Unattributed:                 Unattributed(or(fl.Unattributed, string(DefaultUnattributed))),
		ReturnHome:                   or(fl.ReturnHome, false),
		SharedDestination:            or(fl.SharedDestination, false),
		unattributedSet:              fl.Unattributed != nil,
		SettleDelay:                  or(fl.SettleDelay, DefaultSettleDelay),
		DiscoveryInterval:            or(fl.DiscoveryInterval, DefaultDiscoveryInterval),
		DestinationReplicationFactor: DefaultDestinationReplicationFactor,
		CheckCRCs:                    or(fl.CheckCRCs, DefaultCheckCRCs),
		GroupSyncInterval:            or(fl.GroupSyncInterval, DefaultGroupSyncInterval),
		ConfigSync: ConfigSync{
			Enabled:   or(fl.ConfigSync.Enabled, true),
			AllTopics: or(fl.ConfigSync.AllTopics, false),
			Include:   fl.ConfigSync.Include,
			Exclude:   d.configPatterns(key+".config_sync.exclude", fl.ConfigSync.Exclude),
		},
		ConfigSyncInterval: or(fl.ConfigSyncInterval, DefaultConfigSyncInterval),
		ACLSync: ACLSync{
			Enabled: or(fl.ACLSync.Enabled, false),
			Write:   or(fl.ACLSync.Write, false),
		},
		ACLSyncInterval: or(fl.ACLSyncInterval, DefaultACLSyncInterval),
	}
	if _, ok := d.origins[key+".groups"]; ok {
		l.Groups = &Groups{
			Include: d.groupPatterns(key+".groups.include", fl.Groups.Include),
			Exclude: d.groupPatterns(key+".groups.exclude", fl.Groups.Exclude),
		}
	}
	if _, ok := d.origins[key+".share_groups"]; ok {
		l.ShareGroups = &Groups{
			Include: d.groupPatterns(key+".share_groups.include", fl.ShareGroups.Include),
			Exclude: d.groupPatterns(key+".share_groups.exclude", fl.ShareGroups.Exclude),
		}
	}
	if p := fl.StateTopicPartitions; p != nil {
		if *p < 1 || *p > math.MaxInt32 {
			k := key + ".state_topic_partitions"
			d.ps.add(d.whereAny(k), k, fmt.Sprintf("%d is out of range", *p), "use 1 to 2147483647")
			d.ps.fail(k)
		} else {
			l.StateTopicPartitions = int32(*p)
		}
	}
	l.Slots = DefaultSlots
	if p := fl.Slots; p != nil {
		if *p < 1 || *p > MaxSlots {
			k := key + ".slots"
			d.ps.add(d.whereAny(k), k, fmt.Sprintf("%d is out of range", *p), fmt.Sprintf("use 1 (one session for the whole link) to %d; a few slots per agent that may ever run the link, e.g. 6 for 3 agents", MaxSlots))
			d.ps.fail(k)
		} else {
			l.Slots = int(*p)
		}
	}
	l.StateTopicReplicationFactor = d.replicationFactor(key+".state_topic_replication_factor", fl.StateTopicReplicationFactor, l.StateTopicReplicationFactor)
	l.DestinationReplicationFactor = d.replicationFactor(key+".destination_replication_factor", fl.DestinationReplicationFactor, l.DestinationReplicationFactor)
	return l
}

// replicationFactor returns the replication factor set at key, or def if
// it is unset or out of range (reported here).
func (d *decoder) replicationFactor(key string, rf *int64, def int16) int16 {
	if rf == nil {
		return def
	}
	if *rf < -1 || *rf == 0 || *rf > math.MaxInt16 {
		d.ps.add(d.whereAny(key), key, fmt.Sprintf("%d is out of range", *rf), rfHint)
		d.ps.fail(key)
		return def
	}
	return int16(*rf)
}

// patterns compiles topic patterns, reporting each bad one at its element.
func (d *decoder) patterns(key string, exprs []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, expr := range exprs {
		re, err := TopicPattern(expr)
		if err != nil {
			ekey := fmt.Sprintf("%s[%d]", key, i)
			d.ps.add(d.whereAny(ekey), ekey, fmt.Sprintf("invalid regular expression %q: %s", expr, reasonOf(err)),
				"use Go RE2 syntax; the pattern is matched against the whole topic name")
			d.ps.fail(key)
			continue
		}
		out = append(out, re)
	}
	return out
}

// groupPatterns compiles groups include or exclude patterns.
func (d *decoder) groupPatterns(key string, exprs []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, expr := range exprs {
		re, err := TopicPattern(expr)
		if err != nil {
			ekey := fmt.Sprintf("%s[%d]", key, i)
			d.ps.add(d.whereAny(ekey), ekey, fmt.Sprintf("invalid regular expression %q: %s", expr, reasonOf(err)),
				"use Go RE2 syntax; the pattern is matched against the whole group ID")
			d.ps.fail(key)
			continue
		}
		out = append(out, re)
	}
	return out
}

// configPatterns compiles config_sync exclude patterns.
func (d *decoder) configPatterns(key string, exprs []string) []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, expr := range exprs {
		re, err := topicconfig.Pattern(expr)
		if err != nil {
			ekey := fmt.Sprintf("%s[%d]", key, i)
			d.ps.add(d.whereAny(ekey), ekey, fmt.Sprintf("invalid regular expression %q: %s", expr, reasonOf(err)),
				"use Go RE2 syntax; the pattern is matched against the whole setting name, e.g. \"segment\\\\..*\"")
			d.ps.fail(key)
			continue
		}
		out = append(out, re)
	}
	return out
}

// reasonOf shortens a regexp error to what is wrong ("missing closing )").
func reasonOf(err error) string {
	if se, ok := errors.AsType[*syntax.Error](err); ok {
		return string(se.Code)
	}
	return err.Error()
}
