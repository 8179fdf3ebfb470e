package verify

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// stateWriter writes state transactions to a destination cluster's state
// topic as a link session would.
type stateWriter struct {
	t    *testing.T
	sess *statestore.Session
}

func newStateWriter(t *testing.T, ctx context.Context, opts []kgo.Opt, topic string) *stateWriter {
	t.Helper()
	st, err := statestore.New(statestore.Config{Topic: topic}, statestore.Deps{ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := st.Begin(ctx, "l", 30*time.Second, statestore.SourceCluster(kafkatest.SourceClusterID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	return &stateWriter{t: t, sess: sess}
}

func (s *stateWriter) commit(ctx context.Context, recs ...statestore.Record) {
	s.t.Helper()
	if err := s.sess.Commit(ctx, statestore.Mirroring, recs...); err != nil {
		s.t.Fatal(err)
	}
}

func saltRecord(id [16]byte, p int32, o transform.Origin, salt int64) statestore.Record {
	k := statestore.PIDCollisionKey{TopicID: statestore.UUID(id), Partition: p, SourceClusterID: o.Cluster, OriginalPID: o.PID}
	if salt == 0 {
		return statestore.Record{Key: k} // tombstone
	}
	return statestore.Record{Key: k, Value: statestore.PIDCollisionValue{Salt: salt, CollidingClusterID: kafkatest.ThirdClusterID, TimestampMs: 1}}
}

// TestStateSalts guards the salt lookup of verify against the state topic:
// found by topic ID and by name, a salt committed after the first read found
// by re-reading on a miss, a miss that does not re-read an unchanged topic,
// a tombstoned salt still found (its batches stay in the destination), the
// latest salt of a key winning, and a state topic that does not exist yet.
func TestStateSalts(t *testing.T) {
	dstC := kafkatest.NewCluster(t, kafkatest.DestClusterID)
	dst := kafkatest.Client(t, dstC)
	opts := []kgo.Opt{kgo.SeedBrokers(dstC.ListenAddrs()...)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(dst)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "mirror"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, "mirror")
	if err != nil {
		t.Fatal(err)
	}
	id := [16]byte(md.Topics["mirror"].ID)
	byID := func(p int32) tp.Partition { return tp.Partition{Topic: "mirror", ID: id, Partition: p} }
	byName := func(p int32) tp.Partition { return tp.Partition{Topic: "mirror", Partition: p} }
	a := transform.Origin{Cluster: kafkatest.SourceClusterID, PID: 7}
	b := transform.Origin{Cluster: kafkatest.SourceClusterID, PID: 8}

	const topic = "__salts_state"
	s := newSaltReader(dst, opts, topic)
	if err := s.read(ctx); err != nil {
		t.Fatalf("read before the state topic exists: %v", err)
	}
	if salt, ok := s.lookup(ctx, byID(0), a); ok {
		t.Fatalf("salt %d found in a state topic that does not exist", salt)
	}

	state := newStateWriter(t, ctx, opts, topic)
	state.commit(ctx, saltRecord(id, 0, a, 5))
	readsBefore := s.reads
	if salt, ok := s.lookup(ctx, byID(0), a); !ok || salt != 5 {
		t.Fatalf("salt committed after the first read: got %d %v, want 5", salt, ok)
	}
	if s.reads != readsBefore+1 {
		t.Errorf("a miss took %d reads, want 1", s.reads-readsBefore)
	}
	if salt, ok := s.lookup(ctx, byName(0), a); !ok || salt != 5 {
		t.Errorf("by name: got %d %v, want 5", salt, ok)
	}
	readsBefore = s.reads
	for _, tc := range []struct {
		p tp.Partition
		o transform.Origin
	}{{byID(1), a}, {byID(0), b}, {byName(1), a}, {tp.Partition{Topic: "other", Partition: 0}, a}} {
		if salt, ok := s.lookup(ctx, tc.p, tc.o); ok {
			t.Errorf("%v %+v: salt %d, want none", tc.p, tc.o, salt)
		}
	}
	if s.reads != readsBefore {
		t.Errorf("misses on an unchanged state topic re-read it %d times", s.reads-readsBefore)
	}

	// A tombstone leaves the salt; a new salt for the same key wins.
	state.commit(ctx, saltRecord(id, 0, a, 0), saltRecord(id, 1, a, 6))
	if salt, ok := s.lookup(ctx, byID(1), a); !ok || salt != 6 {
		t.Errorf("second salt: got %d %v, want 6", salt, ok)
	}
	if salt, ok := s.lookup(ctx, byID(0), a); !ok || salt != 5 {
		t.Errorf("tombstoned salt: got %d %v, want 5", salt, ok)
	}
	state.commit(ctx, saltRecord(id, 0, a, 9))

	// The exported form, from several goroutines at once (-race).
	lookup, err := StateSalts(ctx, dst, opts, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			p := byID(0)
			if i%2 == 1 {
				p = byName(0)
			}
			if salt, ok := lookup(p, a); !ok || salt != 9 {
				t.Errorf("concurrent lookup %d: got %d %v, want 9", i, salt, ok)
			}
			if salt, ok := lookup(p, b); ok {
				t.Errorf("concurrent lookup %d: salt %d for an origin without one", i, salt)
			}
		})
	}
	wg.Wait()
}
