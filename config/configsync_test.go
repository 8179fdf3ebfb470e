package config

import (
	"slices"
	"testing"
	"time"
)

// Guards the config_sync block and config_sync_interval: without the block
// the link syncs its own topics' settings every minute; the block turns it
// off, opts in to topics the link did not create, re-enables default
// exclusions by name and adds anchored exclude patterns.
func TestParseConfigSync(t *testing.T) {
	l := mustParse(t, withLink()).Links[0]
	if !l.ConfigSync.Enabled || l.ConfigSync.AllTopics || len(l.ConfigSync.Include) != 0 || len(l.ConfigSync.Exclude) != 0 ||
		l.ConfigSyncInterval != time.Minute || DefaultConfigSyncInterval != time.Minute {
		t.Errorf("without a config_sync block: %+v, interval %v; want enabled, own topics, every minute", l.ConfigSync, l.ConfigSyncInterval)
	}
	l = mustParse(t, withLink(`config_sync {`, `  all_topics = true`, `  include = ["min.insync.replicas", "confluent.placement.constraints"]`,
		`  exclude = ["segment\\..*", "retention.bytes"]`, `}`, `config_sync_interval = "30s"`)).Links[0]
	cs := l.ConfigSync
	if !cs.Enabled || !cs.AllTopics || !slices.Equal(cs.Include, []string{"min.insync.replicas", "confluent.placement.constraints"}) || l.ConfigSyncInterval != 30*time.Second {
		t.Fatalf("config_sync %+v, interval %v", cs, l.ConfigSyncInterval)
	}
	excluded := func(k string) bool {
		for _, re := range cs.Exclude {
			if re.MatchString(k) {
				return true
			}
		}
		return false
	}
	for k, want := range map[string]bool{"segment.ms": true, "segment.bytes": true, "retention.bytes": true, "local.retention.bytes": false, "retention.ms": false} {
		if got := excluded(k); got != want {
			t.Errorf("exclude matches %s: %v, want %v", k, got, want)
		}
	}
	if l := mustParse(t, withLink(`config_sync { enabled = false }`)).Links[0]; l.ConfigSync.Enabled {
		t.Error("enabled = false left config sync on")
	}
	if d := Default().Links[0]; !d.ConfigSync.Enabled || d.ConfigSyncInterval != DefaultConfigSyncInterval {
		t.Errorf("Default(): %+v, %v", d.ConfigSync, d.ConfigSyncInterval)
	}
}

// Guards the problems of the config_sync keys: each names file:line and the
// key, and says what to write instead.
func TestParseConfigSyncProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"bad pattern", []string{`config_sync {`, `  exclude = ["ok", "(bad"]`, `}`},
			[]string{`t.hcl:12:22: link.l.config_sync.exclude[1]: invalid regular expression "(bad": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole setting name, e.g. "segment\\..*")`}},
		{"include of a pinned setting", []string{`config_sync {`, `  include = ["message.timestamp.type"]`, `}`},
			[]string{`t.hcl:12:16: link.l.config_sync.include[0]: message.timestamp.type is pinned to CreateTime on every mirror (remove it: mirrord forwards batches unchanged, which needs compression.type=producer and message.timestamp.type=CreateTime at the destination)`}},
		{"include of a setting that follows anyway", []string{`config_sync {`, `  include = ["min.insync.replicas", "retention.ms"]`, `}`},
			[]string{`t.hcl:12:39: link.l.config_sync.include[1]: "retention.ms" is not excluded by default, so it follows already (include only re-enables settings excluded by default, by name: min.insync.replicas, unclean.leader.election.enable, leader.replication.throttled.replicas, follower.replication.throttled.replicas, confluent.*, remote.*, local.retention.ms, local.retention.bytes, errors.deadletterqueue.group.enable, message.timestamp.before.max.ms, message.timestamp.after.max.ms, message.timestamp.difference.max.ms, message.format.version, message.downconversion.enable)`}},
		{"zero interval", []string{`config_sync_interval = "0s"`},
			[]string{`t.hcl:11:26: link.l.config_sync_interval: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`}},
		{"unknown key", []string{`config_sync { all_topic = true }`},
			[]string{`t.hcl:11:17: link.l.config_sync.all_topic: unknown key (did you mean all_topics?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := problemLines(t, withLink(tc.lines...))
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// Guards the acl_sync block and acl_sync_interval: off without the block,
// WRITE held back by default, and the problems of its keys with file:line.
func TestParseACLSync(t *testing.T) {
	l := mustParse(t, withLink()).Links[0]
	if l.ACLSync.Enabled || l.ACLSync.Write || l.ACLSyncInterval != time.Minute {
		t.Errorf("without an acl_sync block: %+v, interval %v; want off, every minute", l.ACLSync, l.ACLSyncInterval)
	}
	l = mustParse(t, withLink(`acl_sync { enabled = true }`)).Links[0]
	if !l.ACLSync.Enabled || l.ACLSync.Write {
		t.Errorf("acl_sync { enabled = true }: %+v; want on, WRITE held back", l.ACLSync)
	}
	l = mustParse(t, withLink(`acl_sync {`, `  enabled = true`, `  write = true`, `}`, `acl_sync_interval = "30s"`)).Links[0]
	if !l.ACLSync.Enabled || !l.ACLSync.Write || l.ACLSyncInterval != 30*time.Second {
		t.Errorf("acl_sync %+v, interval %v", l.ACLSync, l.ACLSyncInterval)
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"zero interval", []string{`acl_sync_interval = "0s"`},
			[]string{`t.hcl:11:23: link.l.acl_sync_interval: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`}},
		{"unknown key", []string{`acl_sync { writes = true }`},
			[]string{`t.hcl:11:14: link.l.acl_sync.writes: unknown key (did you mean write?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := problemLines(t, withLink(tc.lines...)); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// Guards the slots key: one session by default, the number given, the
// problems of a value out of range with file:line, and slots beside a
// groups block (slot 0's owner syncs the groups).
func TestParseSlots(t *testing.T) {
	if l := mustParse(t, withLink()).Links[0]; l.Slots != 1 {
		t.Errorf("without slots: %d, want 1", l.Slots)
	}
	if l := mustParse(t, withLink(`slots = 6`)).Links[0]; l.Slots != 6 {
		t.Errorf("slots = 6: %d", l.Slots)
	}
	if l := mustParse(t, withLink(`slots = 4`, `groups { include = [".*"] }`)).Links[0]; l.Slots != 4 || l.Groups == nil {
		t.Errorf("slots = 4 with a groups block: %d slots, groups %v", l.Slots, l.Groups)
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"zero", []string{`slots = 0`},
			[]string{`t.hcl:11:11: link.l.slots: 0 is out of range (use 1 (one session for the whole link) to 1024; a few slots per agent that may ever run the link, e.g. 6 for 3 agents)`}},
		{"too many", []string{`slots = 5000`},
			[]string{`t.hcl:11:11: link.l.slots: 5000 is out of range (use 1 (one session for the whole link) to 1024; a few slots per agent that may ever run the link, e.g. 6 for 3 agents)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := problemLines(t, withLink(tc.lines...)); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
