package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
)

// fakeLink mirrors one partition, caught up with the source, and does on a
// pause what the test says (onPause); State and Pausing answer what it
// set.
type fakeLink struct {
	anchor  translate.Anchor
	onPause func(f *fakeLink)
	// translated, when set, is every translation's answer (the link
	// moved on since its anchor was taken).
	translated *translate.Result

	mu      sync.Mutex
	state   statestore.LinkState
	pausing bool
}

func (f *fakeLink) set(st statestore.LinkState, pausing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.pausing = st, pausing
}

func (f *fakeLink) State() statestore.LinkState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *fakeLink) Live() bool { return f.State() == statestore.Mirroring }

func (f *fakeLink) Pausing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pausing
}

func (f *fakeLink) Pause() {
	f.set(f.State(), true)
	f.onPause(f)
}

func (f *fakeLink) Anchors(context.Context) ([]translate.Anchor, error) {
	return []translate.Anchor{f.anchor}, nil
}

func (f *fakeLink) Translate(context.Context, string, int32, int64) (translate.Result, error) {
	if f.translated != nil {
		return *f.translated, nil
	}
	return translate.Result{}, errors.New("fakeLink: no translation (the partition is at its head)")
}

func (f *fakeLink) Discover(context.Context) error { return nil }

func (f *fakeLink) GrantACLWrite(context.Context) (ACLGrant, error) {
	return ACLGrant{}, errors.New("fakeLink has no ACL sync")
}

func (f *fakeLink) Translator(context.Context) (translate.Func, func(), error) {
	return nil, nil, errors.New("fakeLink: no translator")
}

// Whatever the link does once a failover paused it, the failover ends
// within its pause bound, and says what the link does: done once PAUSED;
// failed at once when a resume replaced the pause or the link failed; failed
// when the bound ran out with the link still on its way. Guards against a
// failover that waits for PAUSED forever.
func TestFailoverPauseEnds(t *testing.T) {
	src := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	adm := kadm.NewClient(kafkatest.Client(t, src))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		onPause func(f *fakeLink)
		outcome string
		err     string
		within  time.Duration
	}{
		{"paused", func(f *fakeLink) { f.set(statestore.Paused, true) }, Done, "", bound},
		{"resumed before it paused", func(f *fakeLink) { f.set(statestore.Mirroring, false) }, Failed,
			"a resume given after the failover paused the link replaced the pause (the link is MIRRORING); it mirrors on", bound},
		{"failed on the way", func(f *fakeLink) { f.set(statestore.Failed, true) }, Failed, "the link became FAILED instead of PAUSED", bound},
		{"never pauses", func(*fakeLink) {}, Failed,
			"the link was not PAUSED within 300ms of the failover's pause (it is MIRRORING); the pause stands", 5 * bound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := &fakeLink{
				anchor:  translate.Anchor{Pair: tp.Pair{Src: tp.Partition{Topic: "t"}, Dst: tp.Partition{Topic: "t"}}, Head: true},
				onPause: tc.onPause, state: statestore.Mirroring,
			}
			f := runFailover(t, link, src, bound)
			if f.Outcome != tc.outcome || !strings.Contains(f.Error, tc.err) || (tc.err == "") != (f.Error == "") {
				t.Errorf("failover %s (%q), want %s (%q)", f.Outcome, f.Error, tc.outcome, tc.err)
			}
			// The pause wait is bounded by PauseTimeout; the catch-up
			// check before it takes a few requests to kfake.
			if took := f.Ended.Sub(f.Started); took > tc.within+2*time.Second {
				t.Errorf("the failover took %s, want it to end within %s of the pause", took, tc.within)
			}
		})
	}
}

// runFailover runs a Mover of link (topic t, the source src) through one
// failover and returns its status once it ended; the Mover is stopped
// before it returns.
func runFailover(t *testing.T, link Link, src *kfake.Cluster, pauseTimeout time.Duration) *Status {
	t.Helper()
	m := New(Config{
		PauseTimeout: pauseTimeout, Selects: func(topic string) bool { return topic == "t" },
		SourceOpts: []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)},
	}, link, Deps{})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Mover.Run: %v", err)
		}
	}()
	if err := m.Start(Options{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f := m.Failover()
		if f.Outcome != Running {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover did not end: %+v", f)
		}
	}
}

// Guards the report of a partition whose link moved on between its anchor
// and the translation of the source's last stable offset: the translation
// proves it caught up, and its position is reported as at least that
// offset. Before, the anchor's older position stood beside caught_up
// (TestFailoverOpenTransaction under CI's race detector: 25 against 36).
func TestFailoverReportsTranslatedPosition(t *testing.T) {
	src := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, src)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	link := &fakeLink{
		anchor: translate.Anchor{Pair: tp.Pair{Src: tp.Partition{Topic: "t"}, Dst: tp.Partition{Topic: "t"}},
			Head: true, SrcNext: 2, DstNext: 2},
		translated: &translate.Result{DestinationOffset: 6},
		onPause:    func(f *fakeLink) { f.set(statestore.Paused, true) },
		state:      statestore.Mirroring,
	}
	f := runFailover(t, link, src, time.Second)
	if f.Outcome != Done || len(f.Partitions) != 1 {
		t.Fatalf("failover %s (%q), partitions %+v; want done", f.Outcome, f.Error, f.Partitions)
	}
	if p := f.Partitions[0]; !p.CaughtUp || p.SourceLastStable != 6 || p.SourceNext != 6 || p.DestinationNext != 6 {
		t.Errorf("partition %+v: want caught up at source 6, destination 6", p)
	}
}
