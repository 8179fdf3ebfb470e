package statestore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// testCtx bounds a test so that a hang fails instead of blocking CI; no
// assertion depends on it.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T, c *kfake.Cluster, cfg Config, log hclog.Logger) *Store {
	t.Helper()
	s, err := New(cfg, Deps{ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Logger: log})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func begin(t *testing.T, ctx context.Context, s *Store, link string) *Session {
	t.Helper()
	sess, err := s.Begin(ctx, link, time.Minute, SourceCluster(kafkatest.SourceClusterID))
	if err != nil {
		t.Fatalf("Begin %s: %v", link, err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	return sess
}

// keyOf renders a record's key and value for comparisons in failures.
func describe(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d@%d %#v=%#v", r.Partition, r.Offset, r.Key, r.Value))
	}
	return out
}

// stripLinks drops link records, whose timestamps the clock decides.
func stripLinks(recs []Record) []Record {
	var out []Record
	for _, r := range recs {
		if _, ok := r.Key.(LinkKey); !ok {
			r.Partition, r.Offset = 0, 0
			out = append(out, r)
		}
	}
	return out
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{Topic: "bad topic", Partitions: -2, ReplicationFactor: -3}, Deps{})
	want := []string{
		`state_topic: topic name "bad topic" contains ' '`,
		"state_topic_partitions: -2 is negative",
		"state_topic_replication_factor: -3 is invalid",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("New error %v does not say %q", err, w)
		}
	}
	s, err := New(Config{}, Deps{})
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if s.cfg != (Config{Topic: "__mirror_state", Partitions: 1, ReplicationFactor: -1}) {
		t.Errorf("defaults: %+v", s.cfg)
	}
}

// TestEnsureCreatesCompactedTopic guards that a missing state topic is
// created compacted with the configured partitions, and that Ensure is
// idempotent.
func TestEnsureCreatesCompactedTopic(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{Topic: "state", Partitions: 3}, nil)
	for i := range 2 {
		if err := s.Ensure(ctx); err != nil {
			t.Fatalf("Ensure #%d: %v", i+1, err)
		}
	}
	adm := kadm.NewClient(kafkatest.Client(t, dst))
	rcs, err := adm.DescribeTopicConfigs(ctx, "state")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("state", nil)
	var policy string
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Errorf("cleanup.policy = %q, want compact", policy)
	}
	td, err := adm.ListTopics(ctx, "state")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["state"].Partitions); n != 3 {
		t.Errorf("%d partitions, want 3", n)
	}
}

// TestEnsureRefusesNotCompacted guards against running on a state topic
// whose retention would delete salts still in use.
func TestEnsureRefusesNotCompacted(t *testing.T) {
	tests := []struct {
		policy string
		ok     bool
	}{
		{"delete", false},
		{"compact,delete", false},
		{"delete,compact", false},
		{"compact", true},
		{"Compact", true},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			ctx := testCtx(t)
			_, dst := kafkatest.Pair(t)
			adm := kadm.NewClient(kafkatest.Client(t, dst))
			policy := tt.policy
			if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy}, "__mirror_state"); err != nil {
				t.Fatal(err)
			}
			err := newStore(t, dst, Config{}, nil).Ensure(ctx)
			if tt.ok {
				if err != nil {
					t.Fatalf("Ensure: %v", err)
				}
				return
			}
			want := `state topic "__mirror_state" has cleanup.policy=` + tt.policy + `, but it must be exactly compact ` +
				`(retention would delete salts and checkpoints still in use): run kafka-configs.sh --bootstrap-server <destination> ` +
				`--alter --entity-type topics --entity-name __mirror_state --add-config cleanup.policy=compact, ` +
				`or set the link's state_topic to a new topic: state topic is not compacted`
			if err == nil || err.Error() != want {
				t.Fatalf("Ensure error\n got %v\nwant %s", err, want)
			}
			if !errors.Is(err, ErrNotCompacted) {
				t.Errorf("error does not wrap ErrNotCompacted")
			}
		})
	}
}

// TestSaltsSurviveRestart guards that what one session committed — salts,
// a salt tombstone, checkpoints, barriers — is what a new Store replays.
func TestSaltsSurviveRestart(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{Partitions: 2}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess := begin(t, ctx, s, "l1")
	salt := func(pid, salt int64) Record {
		return Record{
			Key:   PIDCollisionKey{TopicID: testTopicID, Partition: 0, SourceClusterID: kafkatest.SourceClusterID, OriginalPID: pid},
			Value: PIDCollisionValue{Salt: salt, CollidingClusterID: kafkatest.ThirdClusterID, TimestampMs: 1000 + pid},
		}
	}
	cp := Record{Key: CheckpointKey{LinkName: "l1", TopicID: testTopicID, Partition: 0}, Value: CheckpointValue{SourceTopic: "t", SourceNextOffset: 10, DestNextOffset: 12, TimestampMs: 5}}
	barrier := Record{Key: PIDResetKey{TopicID: testTopicID, Partition: 0}, Value: PIDResetValue{SourceClusterID: kafkatest.SourceClusterID, TimestampMs: 6}}
	if err := sess.Commit(ctx, Preparing, salt(5, 77), salt(6, -3), cp); err != nil {
		t.Fatalf("commit 1: %v", err)
	}
	tomb := Record{Key: salt(6, 0).Key}
	if err := sess.Commit(ctx, Mirroring, barrier, tomb, salt(7, 1<<40)); err != nil {
		t.Fatalf("commit 2: %v", err)
	}

	// A new Store, as after a restart of the agent.
	v, err := newStore(t, dst, Config{}, nil).Replay(ctx)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	wantSalts := map[PIDCollisionKey]PIDCollisionValue{
		salt(5, 77).Key.(PIDCollisionKey):    salt(5, 77).Value.(PIDCollisionValue),
		salt(7, 1<<40).Key.(PIDCollisionKey): salt(7, 1<<40).Value.(PIDCollisionValue),
	}
	if !reflect.DeepEqual(v.Salts, wantSalts) {
		t.Errorf("salts after replay:\n got %#v\nwant %#v", v.Salts, wantSalts)
	}
	if got := v.Checkpoints[cp.Key.(CheckpointKey)]; !reflect.DeepEqual(got, cp.Value) {
		t.Errorf("checkpoint %#v, want %#v", got, cp.Value)
	}
	if got := v.Barriers[barrier.Key.(PIDResetKey)]; got != barrier.Value {
		t.Errorf("barrier %#v, want %#v", got, barrier.Value)
	}
	lv := v.Links["l1"]
	if lv.State != Mirroring || lv.SessionEpoch != sess.Epoch() || lv.SourceClusterID != kafkatest.SourceClusterID || lv.DestinationClusterID != kafkatest.DestClusterID {
		t.Errorf("link record %+v", lv)
	}
	// Each key's history is in commit order, whichever partition holds
	// it; the tombstone comes after the salt it deletes.
	perKey := map[string][]Record{}
	for _, r := range stripLinks(v.Records) {
		k := fmt.Sprintf("%#v", r.Key)
		perKey[k] = append(perKey[k], r)
	}
	if h := perKey[fmt.Sprintf("%#v", salt(6, 0).Key)]; len(h) != 2 || h[0].Value == nil || h[1].Value != nil {
		t.Errorf("history of salt 6: %v", describe(h))
	}
	if n := len(stripLinks(v.Records)); n != 6 {
		t.Errorf("%d non-link records replayed, want 6: %v", n, describe(v.Records))
	}
}

// TestFencing guards DESIGN §7: once session B began on the link, session A
// can never write again, and A's open transaction is invisible to
// read_committed readers.
func TestFencing(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	rec := func(n int64) Record {
		return Record{Key: CheckpointKey{LinkName: "l1", Partition: int32(n)}, Value: CheckpointValue{SourceTopic: "t", SourceNextOffset: n, TimestampMs: n}}
	}

	a := begin(t, ctx, s, "l1")
	if err := a.Commit(ctx, Mirroring, rec(1)); err != nil {
		t.Fatalf("A's first commit: %v", err)
	}
	// A opens a transaction and produces into it, then B begins.
	produced, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.testBeforeEnd = func() { once.Do(func() { close(produced) }); <-release }
	aDone := make(chan error, 1)
	go func() { aDone <- a.Commit(ctx, Mirroring, rec(2)) }()
	select {
	case <-produced:
	case err := <-aDone:
		t.Fatalf("A's open transaction: %v", err)
	}
	b := begin(t, ctx, s, "l1")
	if b.Epoch() <= a.Epoch() {
		t.Errorf("B's epoch %d is not above A's %d", b.Epoch(), a.Epoch())
	}
	close(release)
	err := <-aDone
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("A's commit after B began: %v, want ErrFenced", err)
	}
	t.Logf("A's error: %v", err)
	for i := range 2 {
		if err := a.Commit(ctx, Mirroring, rec(3)); !errors.Is(err, ErrFenced) {
			t.Fatalf("A's later commit #%d: %v, want ErrFenced", i+1, err)
		}
	}
	if a.LeaseValid(time.Now()) {
		t.Error("a fenced session still holds its lease")
	}
	if err := b.Commit(ctx, Mirroring, rec(4)); err != nil {
		t.Fatalf("B's commit: %v", err)
	}
	if got := s.Stats().FencedSessions; got != 1 {
		t.Errorf("FencedSessions = %d, want 1", got)
	}

	// The uncommitted record 2 is in the log (read_uncommitted sees
	// it), but read_committed readers never see it.
	var uncommitted []int64
	cons := kafkatest.Client(t, dst, kgo.ConsumeTopics("__mirror_state"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	for len(uncommitted) < 3 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if rec, err := Decode(r.Key, r.Value); err == nil {
				if v, ok := rec.Value.(CheckpointValue); ok {
					uncommitted = append(uncommitted, v.SourceNextOffset)
				}
			}
		})
	}
	if !reflect.DeepEqual(uncommitted, []int64{1, 2, 4}) {
		t.Errorf("read_uncommitted checkpoints %v, want 1, 2, 4", uncommitted)
	}
	v, err := s.Replay(ctx)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	var committed []int64
	for _, r := range v.Records {
		if cv, ok := r.Value.(CheckpointValue); ok {
			committed = append(committed, cv.SourceNextOffset)
		}
	}
	if !reflect.DeepEqual(committed, []int64{1, 4}) {
		t.Errorf("read_committed checkpoints %v, want [1 4]", committed)
	}
	if lv := v.Links["l1"]; lv.SessionEpoch != b.Epoch() {
		t.Errorf("link record epoch %d, want B's %d", lv.SessionEpoch, b.Epoch())
	}
}

// TestFencedAtNextCommit guards the common case: A has no transaction open
// when B begins, and A's next Commit is refused.
func TestFencedAtNextCommit(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	cp := Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "t", SourceNextOffset: 1}}
	a := begin(t, ctx, s, "l1")
	if err := a.Commit(ctx, Mirroring, cp); err != nil {
		t.Fatalf("A's first commit: %v", err)
	}
	b := begin(t, ctx, s, "l1")
	err := a.Commit(ctx, Mirroring, cp)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("A's commit after B began: %v, want ErrFenced", err)
	}
	t.Logf("A's error: %v", err)
	if err := b.Commit(ctx, Mirroring, cp); err != nil {
		t.Fatalf("B's commit: %v", err)
	}
	v, err := s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lv := v.Links["l1"]; lv.SessionEpoch != b.Epoch() {
		t.Errorf("link record epoch %d, want B's %d", lv.SessionEpoch, b.Epoch())
	}
}
