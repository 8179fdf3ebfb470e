package link

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/slots"
	"github.com/seed83556561/mirrord/statestore"
)

// A link with slots (issue 24): one Link per slot, each a session of its
// own (mirrord.<link>.<slot>) over the partitions slots.Of gives it, as the
// agents sharing the link run them. Slots 1 and 2 start first and wait:
// creating the destination topics is slot 0's work. Then every partition
// is mirrored by its slot's session only; a slot's session crashes and a
// new one takes the slot over at once, and another stops cleanly and
// starts again; the mirror is the source, record by record, in both
// delivery modes, and the state topic holds one link record per slot and
// none under the link's own name.
func TestSlotSessions(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		for _, delivery := range []statestore.Delivery{statestore.DeliveryPreserve, statestore.DeliveryTransactional} {
			t.Run(delivery.String(), func(t *testing.T) {
				const n = 3
				d := delivery.String()[:3] // on Kafka the scenario's subtests share the clusters
				tb, ub, wb := "t"+d, "u"+d, "w"+d
				f := e.mirrored(t, "slots"+d, srcTopic(tb, 6), srcTopic(ub, 1), srcTopic(wb, 2))
				f.cfg.Link.Delivery = delivery
				f.cfg.Link.Slots = n
				f.cfg.Agent = "pod-0"
				f.load(idempotent, 1, "a"+d, 60)
				f.load(transactional, 3, "b"+d, 42)
				f.load(plain, 0, "c"+d, 30)

				cfgOf := func(slot int) Config { c := f.cfg; c.Slot = slot; return c }
				start := func(slot int, log string) *testLink {
					return startLink(t, cfgOf(slot), f.src, f.dst, log)
				}
				ls := make([]*testLink, n)
				ls[1], ls[2] = start(1, "slot-1"), start(2, "slot-2")
				ls[1].waitState(t, Mirroring, 60*time.Second)
				ls[2].waitState(t, Mirroring, 60*time.Second)
				time.Sleep(3 * f.cfg.Link.DiscoveryInterval)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if got, err := describeTopics(ctx, f.dst.NewClient(t), f.topics(tb, ub, wb)...); err != nil {
					t.Fatal(err)
				} else {
					for name, td := range got {
						if td.Err == nil {
							t.Errorf("destination topic %s exists before slot 0 ran: slot 0 alone creates topics", name)
						}
					}
				}
				for _, i := range []int{1, 2} {
					if ps := ls[i].Status().Partitions; len(ps) != 0 {
						t.Errorf("slot %d mirrors %d partitions before their destination exists", i, len(ps))
					}
				}
				ls[0] = start(0, "slot-0")
				f.waitSameCommitted(90 * time.Second)

				// Each slot mirrors its partitions, and no other.
				want := map[int][]string{}
				for _, b := range []struct {
					base  string
					parts int32
				}{{tb, 6}, {ub, 1}, {wb, 2}} {
					for p := range b.parts {
						s := slots.Of(f.topic(b.base), p, n)
						want[s] = append(want[s], fmt.Sprintf("%s[%d]", f.topic(b.base), p))
					}
				}
				for i, l := range ls {
					var got []string
					deadline := time.Now().Add(30 * time.Second)
					for {
						got = got[:0]
						for _, ps := range l.Status().Partitions {
							got = append(got, fmt.Sprintf("%s[%d]", ps.SourceTopic, ps.Partition))
						}
						slices.Sort(got)
						slices.Sort(want[i])
						if slices.Equal(got, want[i]) || time.Now().After(deadline) {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					if !slices.Equal(got, want[i]) {
						t.Errorf("slot %d mirrors %v, want %v", i, got, want[i])
					}
					if st := l.Status(); st.Slot == nil || *st.Slot != i {
						t.Errorf("slot %d's status says slot %v", i, st.Slot)
					}
				}

				// Slot 0's config sync covers every slot's topics; the
				// other slots run none.
				var synced []string
				deadline := time.Now().Add(60 * time.Second)
				for {
					synced = synced[:0]
					if cs := ls[0].Status().ConfigSync; cs != nil {
						for _, ts := range cs.Topics {
							synced = append(synced, ts.DestinationTopic)
						}
					}
					slices.Sort(synced)
					if len(synced) == 3 || time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if want := f.topics(tb, ub, wb); !slices.Equal(synced, want) {
					t.Errorf("slot 0's config sync covers %v, want every slot's topics %v", synced, want)
				}
				for _, i := range []int{1, 2} {
					if st := ls[i].Status(); st.ConfigSync != nil || st.ACLSync != nil {
						t.Errorf("slot %d reports a config or ACL sync: only slot 0 runs them", i)
					}
				}

				// A slot's session crashes; a new one (another agent's)
				// takes the slot at once and resumes it.
				ls[1].stop(t, true)
				f.load(idempotent, 2, "d"+d, 40)
				c := cfgOf(1)
				c.Agent = "pod-1"
				ls[1] = startLink(t, c, f.src, f.dst, "slot-1 pod-1")
				ls[1].waitState(t, Mirroring, 60*time.Second)
				f.waitSameCommitted(90 * time.Second)

				// Another stops cleanly and starts again.
				ls[2].stop(t, false)
				f.load(transactional, 4, "e"+d, 35)
				ls[2] = start(2, "slot-2 again")
				f.waitSameCommitted(90 * time.Second)
				f.exactlyOnceCommitted()

				rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer rcancel()
				view, err := replayState(rctx, f.dst, f.stateTopic())
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := view.Links[f.cfg.Link.Name]; ok {
					t.Errorf("a link record under the link's own name %s: slots' sessions must use theirs", f.cfg.Link.Name)
				}
				for i := range n {
					name := SlotSession(f.cfg.Link.Name, i)
					lv, ok := view.Links[name]
					if !ok {
						t.Errorf("no link record of slot session %s", name)
						continue
					}
					if lv.Delivery != delivery {
						t.Errorf("slot session %s records delivery %s", name, lv.Delivery)
					}
				}
				if lv := view.Links[SlotSession(f.cfg.Link.Name, 1)]; lv.Agent != "pod-1" {
					t.Errorf("slot 1's record names agent %q, want pod-1 (which took it over)", lv.Agent)
				}
			})
		}
	})
}

// Group offset sync on a link with slots: slot 0's session syncs the groups
// over every slot's partitions, translating those the other slots mirror
// through their sessions' checkpoints in the state topic; the other slots
// run no group sync. A consumer group that read part of every partition at
// the source reads the rest at the destination from what the sync
// committed: each committed source record once, in order, in both
// delivery modes.
func TestSlotGroupSync(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		for _, delivery := range []statestore.Delivery{statestore.DeliveryPreserve, statestore.DeliveryTransactional} {
			t.Run(delivery.String(), func(t *testing.T) {
				const n = 3
				d := delivery.String()[:3] // on Kafka the scenario's subtests share the clusters
				tb, ub := "g"+d, "h"+d
				f := e.mirrored(t, "slotgrp"+d, srcTopic(tb, 4), srcTopic(ub, 2))
				f.cfg.Link.Delivery = delivery
				f.cfg.Link.Slots = n
				group := f.topic("app" + d)
				f.cfg.Link.Groups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^` + regexp.QuoteMeta(group) + `$`)}}
				f.cfg.Link.GroupSyncInterval = 300 * time.Millisecond
				f.load(idempotent, 1, "a"+d, 70)
				f.load(transactional, 3, "b"+d, 50)
				f.load(plain, 0, "c"+d, 30)

				topics := f.topics(tb, ub)
				var parts []tp.Key
				bySlot := map[int]int{}
				for _, b := range []struct {
					base  string
					parts int32
				}{{tb, 4}, {ub, 2}} {
					for p := range b.parts {
						parts = append(parts, tp.Key{Topic: f.topic(b.base), Partition: p})
						bySlot[slots.Of(f.topic(b.base), p, n)]++
					}
				}
				if len(bySlot) < 2 {
					t.Fatalf("the partitions fall in slots %v: the test needs partitions of slot 0 and of others", bySlot)
				}
				ls := make([]*testLink, n)
				began := time.Now()
				for i := range n {
					c := f.cfg
					c.Slot = i
					ls[i] = startLink(t, c, f.src, f.dst, fmt.Sprintf("slot-%d", i))
				}
				f.waitSameCommitted(90 * time.Second)
				t.Logf("mirrored after %s", time.Since(began).Round(time.Millisecond))
				truth := map[tp.Key]logTruth{}
				total := 0
				for _, k := range parts {
					if delivery == statestore.DeliveryTransactional {
						truth[k] = readTruthTxn(t, f.src, f.dst, k.Topic, k.Topic, k.Partition)
					} else {
						truth[k] = readTruth(t, f.src, f.dst, k.Topic, k.Topic, k.Partition)
					}
					total += len(truth[k].src)
				}
				t.Logf("read the truth after %s", time.Since(began).Round(time.Millisecond))
				app := &groupMove{rd: kgoGroup{}, group: group, parts: parts, truth: truth, rename: func(s string) string { return s }}
				app.atSrc = app.rd.readSome(t, f.src, group, topics, parts, total*2/5)
				t.Logf("the group read %d of %d records at the source after %s", total*2/5, total, time.Since(began).Round(time.Millisecond))

				var synced failover.GroupStatus
				deadline := time.Now().Add(60 * time.Second)
				for {
					if gs := ls[0].Status().GroupSync; gs != nil {
						for _, g := range gs.Groups {
							if g.Group == group {
								synced = g
							}
						}
					}
					if synced.State == failover.GroupUpToDate && committedAll(synced, app.atSrc) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("slot 0's group sync did not sync group %s over all %d partitions: %+v; status %+v", group, len(parts), synced, ls[0].Status().GroupSync)
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("slot 0 synced the group after %s", time.Since(began).Round(time.Millisecond))
				for _, p := range synced.Partitions {
					k := tp.Key{Topic: p.SourceTopic, Partition: p.Partition}
					if want := truth[k].want(p.SourceCommitted); truth[k].canon(p.DestinationCommitted) != want {
						t.Errorf("%s[%d] (slot %d): source committed %d, destination committed %d, want %d",
							k.Topic, k.Partition, slots.Of(k.Topic, k.Partition, n), p.SourceCommitted, p.DestinationCommitted, want)
					}
				}
				for _, i := range []int{1, 2} {
					if gs := ls[i].Status().GroupSync; gs != nil {
						t.Errorf("slot %d reports a group sync (%+v): only slot 0 runs it", i, gs)
					}
				}
				app.check(t, f.dst)
			})
		}
	})
}

// The slot a Link runs must be one of the link's.
func TestSlotConfig(t *testing.T) {
	e := onKfake(t)
	src := e.cluster(t, "src", "src-id")
	dst := e.cluster(t, "dst", "dst-id")
	base := e.linkConfig("slotcfg", src, dst, "t")
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"slot out of range", func(c *Config) { c.Link.Slots, c.Slot = 3, 3 }, "slot 3 is not one of its 3 slots (0 to 2)"},
		{"negative slot", func(c *Config) { c.Link.Slots, c.Slot = 3, -1 }, "slot -1 is not one of its 3 slots"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.edit(&cfg)
			_, err := New(cfg, Deps{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want an error saying %q", err, c.want)
			}
		})
	}
	for _, slots := range []int{0, 1} {
		cfg := base
		cfg.Link.Slots, cfg.Slot = slots, 5 // ignored without slots
		l, err := New(cfg, Deps{})
		if err != nil {
			t.Fatalf("slots = %d: %v", slots, err)
		}
		if l.Session() != cfg.Link.Name || l.Status().Slot != nil {
			t.Errorf("slots = %d: session %q, status slot %v; want the link's name and none", slots, l.Session(), l.Status().Slot)
		}
	}
	cfg := base
	cfg.Link.Slots, cfg.Slot = 8, 7
	l, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if want := cfg.Link.Name + ".7"; l.Session() != want {
		t.Errorf("session %q, want %q", l.Session(), want)
	}
	if got := statestore.TransactionalID(l.Session()); got != "mirrord."+cfg.Link.Name+".7" {
		t.Errorf("transactional.id %q", got)
	}
	a, b := base.Link, base.Link
	b.Slots = 8
	if a.Fingerprint("s", "d") == b.Fingerprint("s", "d") {
		t.Error("the fingerprint does not tell slots = 8 from one session")
	}
	a.Slots = 1
	if a.Fingerprint("s", "d") != base.Link.Fingerprint("s", "d") {
		t.Error("slots = 1 changed the fingerprint of a link without slots")
	}
}

// Turning slots on, changing their number and turning them off again moves
// partitions between sessions (each slot is a session of its own, with its
// own checkpoints): a partition resumes from the checkpoint of whichever
// session of the link mirrored it last, so nothing is mirrored twice or
// skipped, in both delivery modes. A session whose settings differ (here:
// the link without slots) refuses to start while sessions of the link with
// other settings hold a lease, naming them.
func TestSlotsChange(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		for _, delivery := range []statestore.Delivery{statestore.DeliveryPreserve, statestore.DeliveryTransactional} {
			t.Run(delivery.String(), func(t *testing.T) {
				d := delivery.String()[:3]
				tb, ub := "t"+d, "u"+d
				f := e.mirrored(t, "slotchg"+d, srcTopic(tb, 5), srcTopic(ub, 3))
				f.cfg.Link.Delivery = delivery
				f.cfg.Agent = "pod-0"
				rounds := 0
				load := func() {
					rounds++
					f.load(idempotent, 1, fmt.Sprintf("i%s%d", d, rounds), 40)
					f.load(transactional, 2, fmt.Sprintf("x%s%d", d, rounds), 28)
				}
				run := func(slotsN int) []*testLink {
					c := f.cfg
					c.Link.Slots = slotsN
					var ls []*testLink
					for i := range max(slotsN, 1) {
						c.Slot = i
						ls = append(ls, startLink(t, c, f.src, f.dst, fmt.Sprintf("slots=%d/%d", slotsN, i)))
					}
					f.waitSameCommitted(90 * time.Second)
					return ls
				}
				stop := func(ls []*testLink) {
					for _, l := range ls {
						l.stop(t, false)
					}
				}

				load()
				ls := run(0)
				stop(ls)
				load()
				ls = run(3)
				// The link without slots may not start beside its slots'
				// sessions.
				c := f.cfg
				c.Agent = "pod-9"
				lone := startLink(t, c, f.src, f.dst, "no slots")
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(lone.Status().LastError, "other settings") && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				if st := lone.Status(); !strings.Contains(st.LastError, "other settings") || st.State == Mirroring {
					t.Fatalf("the link without slots beside its slots' sessions: %s, last error %q", st.State, st.LastError)
				}
				lone.stop(t, false)
				load()
				f.waitSameCommitted(90 * time.Second)
				stop(ls)
				load()
				ls = run(2)
				stop(ls)
				load()
				ls = run(1)
				stop(ls)
				f.exactlyOnceCommitted()
			})
		}
	})
}

// A link with slots whose settings change: every agent stops cleanly, and
// all start again with the new settings (what the README asks for a
// change of settings), the slots group giving each slot to another agent
// than the one that ran it. Each slot's new owner takes the slot from its
// cleanly stopped holder with the old settings, and the mirror goes on,
// every record once. A slot whose holder with other settings is still
// live (its lease runs) is refused, naming that agent.
func TestSlotSettingsChange(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		const n = 3
		tb, ub := "s", "r"
		f := e.mirrored(t, "slotset", srcTopic(tb, 4), srcTopic(ub, 2))
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		f.cfg.Link.Slots = n
		run := func(round int, cfg Config, agentOf func(slot int) string) []*testLink {
			ls := make([]*testLink, n)
			for i := range n {
				c := cfg
				c.Slot, c.Agent = i, agentOf(i)
				ls[i] = startLink(t, c, f.src, f.dst, fmt.Sprintf("round %d slot %d at %s", round, i, c.Agent))
			}
			for i, l := range ls {
				deadline := time.Now().Add(60 * time.Second)
				for l.Status().State != Mirroring && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				if st := l.Status(); st.State != Mirroring {
					t.Fatalf("round %d: slot %d at %s is %s, last error %q", round, i, agentOf(i), st.State, st.LastError)
				}
			}
			f.waitSameCommitted(90 * time.Second)
			return ls
		}
		f.load(idempotent, 1, "i1", 40)
		f.load(transactional, 2, "x1", 30)
		old := f.cfg
		ls := run(1, old, func(slot int) string { return fmt.Sprintf("pod-%d", slot) })
		for _, l := range ls {
			l.stop(t, false)
		}

		// The settings change; the agents start again, each slot at
		// another agent.
		changed := f.cfg
		changed.Link.ConfigSync.Enabled = !changed.Link.ConfigSync.Enabled
		if changed.Link.Fingerprint("a", "b") == old.Link.Fingerprint("a", "b") {
			t.Fatal("the change does not change the link's fingerprint: the test tests nothing")
		}
		f.load(idempotent, 3, "i2", 40)
		f.load(transactional, 0, "x2", 30)
		ls = run(2, changed, func(slot int) string { return fmt.Sprintf("pod-%d", (slot+1)%n) })

		// An agent with the old settings given slot 1 while its holder
		// runs is refused, naming the holder.
		c := old
		c.Slot, c.Agent = 1, "pod-9"
		stale := startLink(t, c, f.src, f.dst, "old settings")
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(stale.Status().LastError, "other settings") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if st := stale.Status(); !strings.Contains(st.LastError, "other settings") || !strings.Contains(st.LastError, `"pod-2"`) || st.State == Mirroring {
			t.Errorf("slot 1 with the old settings beside its live holder: %s, last error %q; want a refusal naming pod-2", st.State, st.LastError)
		}
		stale.stop(t, false)
		f.load(plain, 0, "p3", 20)
		f.waitSameCommitted(90 * time.Second)
		for _, l := range ls {
			l.stop(t, false)
		}
		f.exactlyOnceCommitted()
	})
}
