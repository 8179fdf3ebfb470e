package config

import (
	"slices"
	"testing"
	"time"
)

// Guards the groups block and group_sync_interval: no block is no sync, a
// block selects group IDs by whole-name patterns with exclude winning, and
// the interval defaults to 10s.
func TestParseGroups(t *testing.T) {
	l := mustParse(t, withLink()).Links[0]
	if l.Groups != nil || l.GroupSyncInterval != DefaultGroupSyncInterval || DefaultGroupSyncInterval != 10*time.Second {
		t.Errorf("without a groups block: groups %+v, interval %v; want none and 10s", l.Groups, l.GroupSyncInterval)
	}
	if l.Groups.Selects("any") {
		t.Error("no groups block selected a group")
	}
	l = mustParse(t, withLink(`groups {`, `  include = ["billing-.*", "audit"]`, `  exclude = [".*-test"]`, `}`, `group_sync_interval = "3s"`)).Links[0]
	if l.Groups == nil || l.GroupSyncInterval != 3*time.Second {
		t.Fatalf("groups %+v, interval %v", l.Groups, l.GroupSyncInterval)
	}
	for g, want := range map[string]bool{"billing-eu": true, "billing-eu-test": false, "audit": true, "audit2": false, "xaudit": false, "": false} {
		if got := l.Groups.Selects(g); got != want {
			t.Errorf("Selects(%q) = %v, want %v", g, got, want)
		}
	}
}

// Guards the problems of the groups keys: each names file:line and the key.
func TestParseGroupsProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"empty block", []string{`groups {}`},
			[]string{`t.hcl:11:3: link.l.groups.include: at least one pattern is required (to sync every group write include = [".*"]; to sync none, leave the groups block out)`}},
		{"bad pattern", []string{`groups {`, `  include = ["ok", "(bad"]`, `}`},
			[]string{`t.hcl:12:22: link.l.groups.include[1]: invalid regular expression "(bad": missing closing ) (use Go RE2 syntax; the pattern is matched against the whole group ID)`}},
		{"zero interval", []string{`group_sync_interval = "0s"`},
			[]string{`t.hcl:11:25: link.l.group_sync_interval: 0s is not positive (write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m")`}},
		{"unknown key", []string{`groups { inclde = ["a"] }`},
			[]string{`t.hcl:11:3: link.l.groups.include: at least one pattern is required (to sync every group write include = [".*"]; to sync none, leave the groups block out)`, `t.hcl:11:12: link.l.groups.inclde: unknown key (did you mean include?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := problemLines(t, withLink(tc.lines...))
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// Guards the share_groups block: no block is no share-group sync; a block
// selects share group IDs as groups does, in every delivery mode, beside
// a groups block or alone; an empty one names file, line and key.
func TestParseShareGroups(t *testing.T) {
	l := mustParse(t, withLink()).Links[0]
	if l.ShareGroups != nil || l.ShareGroups.Selects("any") {
		t.Errorf("without a share_groups block: %+v", l.ShareGroups)
	}
	l = mustParse(t, withLink(`delivery = "transactional"`, `share_groups {`, `  include = ["workers-.*"]`, `  exclude = ["workers-test"]`, `}`)).Links[0]
	if l.ShareGroups == nil || l.Groups != nil {
		t.Fatalf("share groups %+v, groups %+v", l.ShareGroups, l.Groups)
	}
	for g, want := range map[string]bool{"workers-eu": true, "workers-test": false, "workers": false} {
		if got := l.ShareGroups.Selects(g); got != want {
			t.Errorf("Selects(%q) = %v, want %v", g, got, want)
		}
	}
	got := problemLines(t, withLink(`share_groups {}`))
	want := []string{`t.hcl:11:3: link.l.share_groups.include: at least one pattern is required (to sync every share group write include = [".*"]; to sync none, leave the share_groups block out)`}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant\n%q", got, want)
	}
}
