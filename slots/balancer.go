package slots

import (
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// settingsRack marks a member's metadata rack as its agent's settings:
// "mirrord-settings:<fingerprint>:<agent>". The slots topic's partitions
// have no rack to match, so the field carries nothing else; an agent of
// an earlier version leaves it empty.
const settingsRack = "mirrord-settings:"

// leftOutData marks the user data of the empty assignment a member with
// other settings gets: "mirrord-left-out:<group's fingerprint>:<leader>",
// so that the agent left out says why in its own log too.
const leftOutData = "mirrord-left-out:"

// balancer is cooperative-sticky, except that it gives slots only to the
// members whose settings (Config.Fingerprint, in their metadata's rack)
// are the group's: those of the members that own slots now (the most
// slots, when members of several settings own some), else the leader's
// own. A member with other settings (or whose metadata says nothing: an
// agent of an earlier version, which is given slots) joins but gets none,
// so that an agent started with another configuration stands idle instead
// of taking slots it would refuse to run, and a change of settings rolls:
// the agents started with the new ones take the slots once the last agent
// with the old ones left. The protocol stays cooperative-sticky's, so that
// agents of earlier versions share the group.
type balancer struct {
	kgo.GroupBalancer
	fp, agent, group string
	log              hclog.Logger
}

func newBalancer(cfg Config) *balancer {
	return &balancer{GroupBalancer: kgo.CooperativeStickyBalancer(), fp: cfg.Fingerprint, agent: cfg.Agent, group: cfg.Group, log: cfg.Logger}
}

// JoinGroupMetadata is cooperative-sticky's, with the settings in the rack.
func (b *balancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
	if b.fp == "" {
		return raw
	}
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(raw); err != nil {
		return raw
	}
	rack := settingsRack + b.fp + ":" + b.agent
	meta.Rack = &rack
	return meta.AppendTo(nil)
}

// memberSettings are what a member's metadata says of its agent; ok is
// false for a member without them.
func memberSettings(m kmsg.JoinGroupResponseMember) (fp, agent string, owned int, ok bool) {
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
		return "", "", 0, false
	}
	for _, o := range meta.OwnedPartitions {
		owned += len(o.Partitions)
	}
	if meta.Rack == nil || !strings.HasPrefix(*meta.Rack, settingsRack) {
		return "", "", owned, false
	}
	fp, agent, _ = strings.Cut(strings.TrimPrefix(*meta.Rack, settingsRack), ":")
	return fp, agent, owned, fp != ""
}

// groupSettings is the fingerprint the slots go to (balancer), and the
// members it leaves out.
func groupSettings(own string, members []kmsg.JoinGroupResponseMember) (fp string, keep, out []kmsg.JoinGroupResponseMember) {
	owning := map[string]int{}
	for _, m := range members {
		if f, _, n, ok := memberSettings(m); ok && n > 0 {
			owning[f] += n
		}
	}
	fp = own
	most := 0
	for f, n := range owning {
		if n > most || n == most && f < fp {
			fp, most = f, n
		}
	}
	for _, m := range members {
		if f, _, _, ok := memberSettings(m); ok && fp != "" && f != fp {
			out = append(out, m)
			continue
		}
		keep = append(keep, m)
	}
	return fp, keep, out
}

// MemberBalancer balances over the members with the group's settings;
// the others get no slot (an empty assignment), and the leader logs them.
func (b *balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	fp, keep, out := groupSettings(b.fp, members)
	for _, m := range out {
		f, agent, _, _ := memberSettings(m)
		if agent == "" {
			agent = "an agent without a name"
		}
		b.log.Error("slots group: a member runs the link with other settings and gets no slot; make the link's block equal in every agent's configuration (or stop the agents with the old settings, when changing them)",
			"group", b.group, "member", m.MemberID, "agent", agent, "its_fingerprint", f, "the_group's_fingerprint", fp)
	}
	inner, topics, err := b.GroupBalancer.MemberBalancer(keep)
	if err != nil || len(out) == 0 {
		return inner, topics, err
	}
	ids := make([]string, len(out))
	for i, m := range out {
		ids[i] = m.MemberID
	}
	return leftOut{inner, ids, leftOutData + fp + ":" + b.agent}, topics, nil
}

// ParseSyncAssignment is cooperative-sticky's; an assignment that says this
// member was left out for its settings is logged.
func (b *balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err == nil && strings.HasPrefix(string(a.UserData), leftOutData) {
		fp, leader, _ := strings.Cut(strings.TrimPrefix(string(a.UserData), leftOutData), ":")
		b.log.Error("slots group: this agent runs the link with other settings than the agents that own its slots, and gets no slot; make the link's block equal in every agent's configuration (or stop the agents with the old settings, when changing them)",
			"group", b.group, "agent", b.agent, "its_fingerprint", b.fp, "the_group's_fingerprint", fp, "group_leader", leader)
	}
	return b.GroupBalancer.ParseSyncAssignment(assignment)
}

// leftOut is a member balancer's plan with an empty assignment for each
// member left out: a member that the SyncGroup answer gives no assignment
// at all cannot parse it, and joins again and again. The assignment's
// user data says why (leftOutData).
type leftOut struct {
	kgo.GroupMemberBalancer
	ids []string
	why string
}

func (l leftOut) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	plan, _ := l.BalanceOrError(topics)
	return plan
}

// BalanceOrError is what kgo calls when a member balancer has it, as
// cooperative-sticky's has (its Balance panics).
func (l leftOut) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	b, ok := l.GroupMemberBalancer.(kgo.GroupMemberBalancerOrError)
	if !ok {
		return leftOutPlan{l.GroupMemberBalancer.Balance(topics), l.ids, l.why}, nil
	}
	plan, err := b.BalanceOrError(topics)
	if err != nil {
		return nil, err
	}
	return leftOutPlan{plan, l.ids, l.why}, nil
}

type leftOutPlan struct {
	plan kgo.IntoSyncAssignment
	ids  []string
	why  string
}

func (p leftOutPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := p.plan.IntoSyncAssignment()
	none := kmsg.ConsumerMemberAssignment{UserData: []byte(p.why)}
	for _, id := range p.ids {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = id, none.AppendTo(nil)
		out = append(out, a)
	}
	return out
}
