package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/slots"
)

// Agents sharing a link with slots (issue 24), in both delivery modes: two
// agents split the link's 4 slots between them through the slots group,
// each running only its slots' partitions; when one stops, the other takes
// its slots at once; a third joins and takes some. Throughout, every slot
// has exactly one owner, GET /v1/links shows the slots an agent runs, the
// per-link commands answer 409, /readyz is ready, mirrord_slots_owned
// adds up to 4, and the mirror is the source record by record.
func TestSlottedAgents(t *testing.T) {
	for _, delivery := range []string{"preserve", "transactional"} {
		t.Run(delivery, func(t *testing.T) {
			srcC, dstC := kafkatest.Pair(t)
			srcCl, dstCl := producer(t, srcC), kafkatest.Client(t, dstC)
			const partitions, n = 6, 4
			createOrders(t, srcCl, partitions)
			var total int64
			round := func(name string) map[int32]int64 {
				ends := produce(t, srcCl, partitions, name, 25)
				total += partitions * 25
				return ends
			}
			ends := round("before")
			hcl := func(agent string) string {
				s := agentHCL(srcC, dstC, "")
				s = strings.Replace(s, "agent {", "agent {\n  name = \""+agent+"\"", 1)
				// A group session timeout of at least the brokers' minimum
				// (group.min.session.timeout.ms, 6 s).
				return strings.Replace(s, `session_timeout                = "3s"`,
					fmt.Sprintf("session_timeout = \"6s\"\n  slots = %d\n  delivery = %q", n, delivery), 1)
			}
			startAgent := func(name string) *running {
				return start(t, newAgent(t, hcl(name), nil, newLogBuffer(t), prometheus.NewRegistry()))
			}
			// owners waits until the agents given own every slot once,
			// each its share, each mirroring it with no lag up to ends,
			// and returns who owns which.
			owners := func(agents []*running, ends map[int32]int64) map[int]int {
				t.Helper()
				var own map[int]int
				waitFor(t, func() (bool, string) {
					own = map[int]int{}
					parts := map[int32]bool{}
					var problems []string
					for i, r := range agents {
						var all []apiStatus
						callJSON(t, http.MethodGet, r.base+"/v1/links", http.StatusOK, &all)
						for _, st := range all {
							if st.Slot == nil {
								problems = append(problems, "a status without a slot")
								continue
							}
							if j, dup := own[*st.Slot]; dup {
								return false, fmt.Sprintf("slot %d run by agents %d and %d", *st.Slot, j, i)
							}
							own[*st.Slot] = i
							if st.State != "MIRRORING" || st.Lag != 0 {
								problems = append(problems, fmt.Sprintf("slot %d: %s, lag %d", *st.Slot, st.State, st.Lag))
							}
							for _, p := range st.Partitions {
								if got := slots.Of("orders", p.Partition, n); got != *st.Slot {
									t.Fatalf("slot %d mirrors orders[%d], whose slot is %d", *st.Slot, p.Partition, got)
								}
								if p.SourceNextOffset < ends[p.Partition] {
									problems = append(problems, fmt.Sprintf("orders[%d] at %d of %d", p.Partition, p.SourceNextOffset, ends[p.Partition]))
								}
								parts[p.Partition] = true
							}
						}
					}
					// Settled: the group spread the slots (cooperative-sticky
					// hands some on in a later rebalance when an agent
					// joins), each agent owning its share.
					for i := range agents {
						mine := 0
						for _, j := range own {
							if j == i {
								mine++
							}
						}
						if mine < n/len(agents) {
							problems = append(problems, fmt.Sprintf("agent %d owns %d slots", i, mine))
						}
					}
					if len(own) != n || len(parts) != partitions || len(problems) > 0 {
						return false, fmt.Sprintf("owners %v, %d partitions mirrored; %v", own, len(parts), problems)
					}
					return true, ""
				})
				return own
			}
			check := func(agents []*running) {
				t.Helper()
				var owned float64
				for _, r := range agents {
					v, _ := sample(scrape(t, r.base), "mirrord_slots_owned", map[string]string{"link": "l"})
					owned += v
					var ready Readiness
					callJSON(t, http.MethodGet, r.base+"/readyz", http.StatusOK, &ready)
					if !ready.Ready {
						t.Errorf("readyz: %+v", ready)
					}
				}
				if owned != n {
					t.Errorf("mirrord_slots_owned adds up to %v over the agents, want %d", owned, n)
				}
				if delivery == "preserve" {
					verifyMirror(t, srcCl, dstCl, []kgo.Opt{kgo.SeedBrokers(dstC.ListenAddrs()...)}, total)
					return
				}
				// Transactional delivery appends under the session's
				// producer ID: compare what read_committed consumers see.
				want := readOrders(t, srcC, total)
				if got := readOrders(t, dstC, total); !slices.Equal(got, want) {
					t.Errorf("the mirror read_committed differs from the source: %d records, want %d", len(got), len(want))
				}
			}

			a, b := startAgent("pod-0"), startAgent("pod-1")
			own := owners([]*running{a, b}, ends)
			t.Logf("two agents: owners %v", own)
			check([]*running{a, b})
			code, body := call(t, http.MethodPost, a.base+"/v1/links/l/pause")
			if code != http.StatusConflict || !strings.Contains(string(body), `link \"l\" runs as 4 slots`) {
				t.Errorf("POST /v1/links/l/pause: %d %s; want 409 naming the slots", code, body)
			}

			// b stops cleanly: a takes its slots.
			if err := b.stop(t); err != nil {
				t.Fatal(err)
			}
			ends = round("after-b")
			owners([]*running{a}, ends) // pod-0 owns every slot
			check([]*running{a})

			// A third agent joins: the slots are shared again.
			c := startAgent("pod-2")
			ends = round("with-c")
			own = owners([]*running{a, c}, ends)
			t.Logf("after pod-2 joined: owners %v", own)
			var byC []int
			for s, i := range own {
				if i == 1 {
					byC = append(byC, s)
				}
			}
			if len(byC) == 0 {
				t.Errorf("the agent that joined owns no slot: %v", own)
			}
			check([]*running{a, c})
			v, _ := sample(scrape(t, c.base), "mirrord_slot_rebalances_total", map[string]string{"link": "l", "event": "assigned"})
			if v < 1 {
				t.Errorf("mirrord_slot_rebalances_total{event=assigned} of the agent that joined: %v", v)
			}

			// An agent with other settings joins: the group gives it no
			// slot (before, it took its share, and each of those slots
			// stayed FAILED, refused for its settings), and the others
			// keep mirroring every slot.
			odd := start(t, newAgent(t, strings.Replace(hcl("pod-3"), "slots = ", "on_offset_out_of_range = \"earliest\"\n  slots = ", 1), nil, newLogBuffer(t), prometheus.NewRegistry()))
			deadline := time.Now().Add(8 * time.Second)
			for time.Now().Before(deadline) {
				var all []apiStatus
				callJSON(t, http.MethodGet, odd.base+"/v1/links", http.StatusOK, &all)
				if len(all) != 0 {
					t.Fatalf("the agent with other settings runs slots: %+v", all)
				}
				time.Sleep(200 * time.Millisecond)
			}
			ends = round("with-odd")
			owners([]*running{a, c}, ends)
			check([]*running{a, c})
		})
	}
}

// readOrders reads the n records of orders with a read_committed consumer
// (one more is an error) and returns them as "partition/key=value headers"
// lines in partition and offset order (a mirror's offsets may differ from
// the source's).
func readOrders(t *testing.T, c *kfake.Cluster, n int64) []string {
	t.Helper()
	cl := kafkatest.Client(t, c, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableFetchSessions())
	byPart := map[int32][]string{}
	var got int64
	deadline := time.Now().Add(within)
	for got < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d records of orders, want %d", got, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got++
			byPart[r.Partition] = append(byPart[r.Partition], fmt.Sprintf("%d/%s=%s %v", r.Partition, r.Key, r.Value, r.Headers))
		})
	}
	// Nothing more: a record twice would be one too many.
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
		t.Errorf("record %d past the %d expected: orders[%d] %s", got, n, r.Partition, r.Key)
		got++
	})
	var out []string
	for p := range int32(len(byPart)) {
		out = append(out, byPart[p]...)
	}
	return out
}

// A network partition between one agent and the destination, where the
// link's slots group is (issue 24), in transactional delivery: the agent
// cut off gives its slots up (Lost) before the group's session times out,
// the other agent takes them and mirrors on, and when the partition heals
// the requests the proxy held reach the destination late: the group
// shares the slots again, and the mirror holds every record once (the cut
// off agent's late appends were fenced by the slots' new sessions).
func TestSlottedAgentPartitioned(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl := producer(t, srcC)
	const partitions, n = 6, 4
	createOrders(t, srcCl, partitions)
	var total int64
	round := func(name string) map[int32]int64 {
		ends := produce(t, srcCl, partitions, name, 25)
		total += partitions * 25
		return ends
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	brokers, err := faultproxy.Brokers(ctx, kafkatest.Client(t, dstC))
	if err != nil {
		t.Fatal(err)
	}
	px := faultproxy.Start(t, brokers)
	hcl := func(agent string, dst []string) string {
		s := agentHCL(srcC, dstC, "")
		s = strings.Replace(s, "agent {", "agent {\n  name = \""+agent+"\"", 1)
		s = strings.Replace(s, "cluster \"dst\" {\n  bootstrap_servers = "+hclList(dstC.ListenAddrs()),
			"cluster \"dst\" {\n  bootstrap_servers = "+hclList(dst), 1)
		return strings.Replace(s, `session_timeout                = "3s"`,
			fmt.Sprintf("session_timeout = \"6s\"\n  slots = %d\n  delivery = \"transactional\"\n  transaction_timeout = \"10s\"", n), 1)
	}
	ends := round("before")
	cut := start(t, newAgent(t, hcl("pod-0", px.Addrs()), nil, newLogBuffer(t), prometheus.NewRegistry()))
	other := start(t, newAgent(t, hcl("pod-1", dstC.ListenAddrs()), nil, newLogBuffer(t), prometheus.NewRegistry()))
	// slotsOf waits until r runs exactly want slots (-1: at least one),
	// each MIRRORING and caught up with ends.
	slotsOf := func(r *running, want int, ends map[int32]int64) {
		t.Helper()
		waitFor(t, func() (bool, string) {
			var all []apiStatus
			callJSON(t, http.MethodGet, r.base+"/v1/links", http.StatusOK, &all)
			if want >= 0 && len(all) != want || want < 0 && len(all) == 0 {
				return false, fmt.Sprintf("%s runs %d slots, want %d", r.Addr(), len(all), want)
			}
			for _, st := range all {
				if st.State != "MIRRORING" {
					return false, fmt.Sprintf("slot %d: %s (%s)", *st.Slot, st.State, st.LastError)
				}
				for _, p := range st.Partitions {
					if p.SourceNextOffset < ends[p.Partition] {
						return false, fmt.Sprintf("slot %d: orders[%d] at %d of %d", *st.Slot, p.Partition, p.SourceNextOffset, ends[p.Partition])
					}
				}
			}
			return true, ""
		})
	}
	slotsOf(cut, -1, ends)
	slotsOf(other, -1, ends)

	for _, node := range px.Nodes() {
		px.Stall(node)
	}
	ends = round("during")
	slotsOf(other, n, ends) // every slot, caught up
	slotsOf(cut, 0, nil)    // gave them up
	v, _ := sample(scrape(t, cut.base), "mirrord_slot_rebalances_total", map[string]string{"link": "l", "event": "lost"})
	if v < 1 {
		t.Errorf("the agent cut off counted %v lost slots events", v)
	}
	for _, node := range px.Nodes() {
		px.Resume(node)
	}
	ends = round("after")
	slotsOf(cut, -1, ends)
	slotsOf(other, -1, ends)
	want := readOrders(t, srcC, total)
	if got := readOrders(t, dstC, total); !slices.Equal(got, want) {
		t.Errorf("the mirror read_committed differs from the source: %d records, want %d", len(got), len(want))
	}
}
