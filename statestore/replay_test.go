package statestore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
)

// produceRaw writes key/value bytes to the state topic with a plain
// producer, bypassing the codec.
func produceRaw(t *testing.T, cl *kgo.Client, key, value []byte) {
	t.Helper()
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: DefaultTopic, Key: key, Value: value}).FirstErr(); err != nil {
		t.Fatalf("produce raw record: %v", err)
	}
}

// TestReplaySkipsUnknownRecords guards forward compatibility: a record type
// this build does not know is skipped with a WARN that says where it is, and
// the records around it still count.
func TestReplaySkipsUnknownRecords(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	var logs logtest.Buffer
	s := newStore(t, dst, Config{}, logtest.Logger(&logs))
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, dst)
	good := Record{Key: PIDResetKey{TopicID: testTopicID, Partition: 1}, Value: PIDResetValue{SourceClusterID: "c", TimestampMs: 3}}
	gk, gv, _ := good.encode()
	produceRaw(t, cl, gk, gv)
	produceRaw(t, cl, []byte{0x00, 0x63, 0xca, 0xfe}, []byte{0x00, 0x00, 0x00}) // type 99
	produceRaw(t, cl, gk, []byte{0x00, 0x07, 0x01, 0x02})                       // value version 7
	produceRaw(t, cl, gk, gv)

	v, err := s.Replay(ctx)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if v.Skipped != 2 || s.Stats().SkippedRecords != 2 {
		t.Errorf("skipped %d (stats %d), want 2", v.Skipped, s.Stats().SkippedRecords)
	}
	if got := describe(v.Records); len(v.Records) != 2 || v.Records[0].Offset != 0 || v.Records[1].Offset != 3 {
		t.Errorf("records %v, want the two good ones at offsets 0 and 3", got)
	}
	wantLogs := []string{
		`[WARN]  statestore: skipping state record written by a newer agent: topic=__mirror_state partition=0 offset=1 error="key record type 99: unknown state record type or version"`,
		`[WARN]  statestore: skipping state record written by a newer agent: topic=__mirror_state partition=0 offset=2 error="MirrorPidReset value version 7: unknown state record type or version"`,
	}
	for _, w := range wantLogs {
		if !strings.Contains(logs.String(), w+"\n") {
			t.Errorf("log does not hold\n%s\nlog:\n%s", w, logs.String())
		}
	}
}

// TestReplayStopsOnCorruptRecord guards that a broken record is an error
// naming its partition and offset, not a silent gap in the state.
func TestReplayStopsOnCorruptRecord(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, dst)
	good := Record{Key: LinkKey{LinkName: "l"}, Value: LinkValue{}}
	gk, gv, _ := good.encode()
	produceRaw(t, cl, gk, gv)
	produceRaw(t, cl, []byte{0x00, 0x00, 0x00}, gv) // link key cut inside its length

	_, err := s.Replay(ctx)
	want := `replay state topic "__mirror_state": partition 0 offset 1: MirrorLink key of 3 bytes is truncated: corrupt state record`
	if err == nil || err.Error() != want {
		t.Fatalf("Replay error\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Error("error does not wrap ErrCorrupt")
	}
}

// TestReplayMissingTopic guards the error when nothing created the topic.
func TestReplayMissingTopic(t *testing.T) {
	_, dst := kafkatest.Pair(t)
	_, err := newStore(t, dst, Config{}, nil).Replay(testCtx(t))
	if !errors.Is(err, ErrNoTopic) {
		t.Fatalf("Replay of a missing topic: %v, want ErrNoTopic", err)
	}
}

// signalWriter closes ch the first time a write contains needle.
type signalWriter struct {
	needle string
	ch     chan struct{}
	once   sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.needle) {
		w.once.Do(func() { close(w.ch) })
	}
	return len(p), nil
}

// TestReplayWaitsForOpenTransaction guards that a replay does not stop at
// another link's open transaction and miss what was committed after it
// began: the replay reads to the high watermark it saw at its start. So
// does ReplayCommitted for l1: the open transaction is not l1's.
func TestReplayWaitsForOpenTransaction(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(map[bool]string{false: "Replay", true: "ReplayCommitted"}[committed], func(t *testing.T) {
			testReplayWaitsForOpenTransaction(t, committed)
		})
	}
}

func testReplayWaitsForOpenTransaction(t *testing.T, committed bool) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	other := begin(t, ctx, s, "l2")
	otherRec := Record{Key: CheckpointKey{LinkName: "l2"}, Value: CheckpointValue{SourceTopic: "b", SourceNextOffset: 2}}
	// l2's commit stops between its produce and its EndTxn until release.
	produced, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	other.testBeforeEnd = func() { once.Do(func() { close(produced) }); <-release }
	otherDone := make(chan error, 1)
	go func() { otherDone <- other.Commit(ctx, Mirroring, otherRec) }()
	select {
	case <-produced:
	case err := <-otherDone:
		t.Fatalf("open transaction of l2: %v", err)
	}
	l1 := begin(t, ctx, s, "l1")
	l1Rec := Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "a", SourceNextOffset: 1}}
	if err := l1.Commit(ctx, Mirroring, l1Rec); err != nil {
		t.Fatalf("commit of l1: %v", err)
	}

	w := &signalWriter{needle: "waits for an open transaction", ch: make(chan struct{})}
	rs := newStore(t, dst, Config{}, logtest.Logger(w))
	var v *View
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if committed {
			v, err = rs.ReplayCommitted(ctx, "l1")
		} else {
			v, err = rs.Replay(ctx)
		}
	}()
	select {
	case <-w.ch:
	case <-done:
		t.Fatalf("replay finished while l2's transaction was open: %v", err)
	}
	close(release)
	endErr := <-otherDone
	<-done
	if endErr != nil {
		t.Fatalf("commit of l2: %v", endErr)
	}
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	got := stripLinks(v.Records)
	want := []Record{otherRec, l1Rec}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed %v, want %v", describe(got), describe(want))
	}
	if _, ok := v.Links["l1"]; !ok {
		t.Error("l1's link record is missing")
	}
}

// TestReplayCommittedLeavesOwnOpenTransaction guards what a session's
// standby check reads before its InitProducerId: the transaction its
// link's last session left open is not waited for (it would be, until its
// timeout), and the view holds what the link and others committed before
// it. A plain Replay still waits for it.
func TestReplayCommittedLeavesOwnOpenTransaction(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := begin(t, ctx, s, "l1")
	l1Rec := Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "a", SourceNextOffset: 1}}
	if err := l1.Commit(ctx, Mirroring, l1Rec); err != nil {
		t.Fatalf("commit of l1: %v", err)
	}
	l2 := begin(t, ctx, s, "l2")
	l2Rec := Record{Key: CheckpointKey{LinkName: "l2"}, Value: CheckpointValue{SourceTopic: "b", SourceNextOffset: 2}}
	if err := l2.Commit(ctx, Mirroring, l2Rec); err != nil {
		t.Fatalf("commit of l2: %v", err)
	}
	// l1's next commit stops between its produce and its EndTxn: the
	// crash of its session.
	produced, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	l1.testBeforeEnd = func() { once.Do(func() { close(produced) }); <-release }
	openDone := make(chan error, 1)
	go func() {
		openDone <- l1.Commit(ctx, Mirroring, Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "a", SourceNextOffset: 9}})
	}()
	select {
	case <-produced:
	case err := <-openDone:
		t.Fatalf("open transaction of l1: %v", err)
	}
	var freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	defer func() {
		free()
		if err := <-openDone; err != nil {
			t.Logf("l1's held commit: %v", err)
		}
	}()

	var logs logtest.Buffer
	rs := newStore(t, dst, Config{}, logtest.Logger(&logs))
	short, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := rs.ReplayCommitted(short, "l1")
	if err != nil {
		t.Fatalf("ReplayCommitted: %v (a wait for l1's open transaction?)", err)
	}
	if got, want := stripLinks(v.Records), []Record{l1Rec, l2Rec}; !reflect.DeepEqual(got, want) {
		t.Errorf("replayed %v, want %v", describe(got), describe(want))
	}
	if lv, ok := v.Links["l1"]; !ok || lv.State != Mirroring {
		t.Errorf("l1's link record: %+v (found %v), want its committed MIRRORING", lv, ok)
	}
	if !strings.Contains(logs.String(), "leaves out the open transaction of the link's last session") {
		t.Errorf("no log of the open transaction left out:\n%s", logs.String())
	}

	// Another link's replay (and a plain one) cannot leave it out.
	w := &signalWriter{needle: "waits for an open transaction", ch: make(chan struct{})}
	ws := newStore(t, dst, Config{}, logtest.Logger(w))
	done := make(chan error, 1)
	go func() { _, err := ws.ReplayCommitted(ctx, "l2"); done <- err }()
	select {
	case <-w.ch:
	case err := <-done:
		t.Fatalf("l2's replay finished while l1's transaction was open: %v", err)
	}
	free()
	if err := <-done; err != nil {
		t.Fatalf("l2's replay: %v", err)
	}
}

// TestReplayAfterCompaction guards that compaction (offset gaps, removed
// records) leaves the replayed state as it was.
func TestReplayAfterCompaction(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess := begin(t, ctx, s, "l1")
	for i := range int64(5) {
		recs := []Record{
			{Key: CheckpointKey{LinkName: "l1", Partition: 0}, Value: CheckpointValue{SourceTopic: "t", SourceNextOffset: i}},
			{Key: PIDCollisionKey{SourceClusterID: "c", OriginalPID: i}, Value: PIDCollisionValue{Salt: i}},
		}
		if i == 3 {
			recs = append(recs, Record{Key: PIDCollisionKey{SourceClusterID: "c", OriginalPID: 1}})
		}
		if err := sess.Commit(ctx, Mirroring, recs...); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	before, err := s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst.Compact()
	after, err := newStore(t, dst, Config{}, nil).Replay(ctx)
	if err != nil {
		t.Fatalf("Replay after compaction: %v", err)
	}
	if len(after.Records) >= len(before.Records) {
		t.Errorf("compaction removed nothing (%d records before, %d after); the test proves nothing", len(before.Records), len(after.Records))
	}
	if !reflect.DeepEqual(before.Links, after.Links) || !reflect.DeepEqual(before.Checkpoints, after.Checkpoints) ||
		!reflect.DeepEqual(before.Salts, after.Salts) || !reflect.DeepEqual(before.Barriers, after.Barriers) {
		t.Errorf("state changed by compaction:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestLeaseValid guards DESIGN §7's self-stop: the lease counts from the
// send of the last successful commit, not from its acknowledgement, and a
// STOPPED or PAUSED commit gives it up at once.
func TestLeaseValid(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	var mu sync.Mutex
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	set := func(t time.Time) { mu.Lock(); clock = t; mu.Unlock() }
	s, err := New(Config{}, Deps{ClientOpts: []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	const timeout = 30 * time.Second
	sess, err := s.Begin(ctx, "l1", timeout, AppendTimeout(7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(ctx) })
	start := now()
	if sess.LeaseValid(start) {
		t.Error("lease valid before the first commit")
	}
	if _, ok := sess.LeaseDeadline(); ok {
		t.Error("lease deadline before the first commit")
	}
	sent := start.Add(5 * time.Second)
	set(sent)
	if err := sess.Commit(ctx, Mirroring); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		at   time.Time
		want bool
	}{
		{sent, true},
		{sent.Add(timeout - time.Nanosecond), true},
		{sent.Add(timeout), false},
		{sent.Add(time.Hour), false},
	}
	for _, tt := range tests {
		if got := sess.LeaseValid(tt.at); got != tt.want {
			t.Errorf("LeaseValid(sent%+v) = %v, want %v", tt.at.Sub(sent), got, tt.want)
		}
	}
	// The deadline an append carries is the same instant (I4).
	if d, ok := sess.LeaseDeadline(); !ok || !d.Equal(sent.Add(timeout)) {
		t.Errorf("LeaseDeadline = %v, %v; want %v", d, ok, sent.Add(timeout))
	}
	v, err := s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lv := v.Links["l1"]; lv.LeaseExpiresMs != sent.Add(timeout).UnixMilli() || lv.TimestampMs != sent.UnixMilli() || lv.AppendTimeoutMs != 7000 {
		t.Errorf("link record %+v, want lease %d, timestamp %d and append timeout 7000 ms", lv, sent.Add(timeout).UnixMilli(), sent.UnixMilli())
	}
	set(sent.Add(time.Second))
	if err := sess.Commit(ctx, Stopped); err != nil {
		t.Fatal(err)
	}
	if sess.LeaseValid(sent.Add(time.Second)) {
		t.Error("lease still valid after committing STOPPED")
	}

	// PAUSED is a clean stop too: a new session does not wait for it.
	paused, err := s.Begin(ctx, "l2", timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.Close(ctx) })
	if err := paused.Commit(ctx, Mirroring); err != nil {
		t.Fatal(err)
	}
	if err := paused.Commit(ctx, Paused); err != nil {
		t.Fatal(err)
	}
	if paused.LeaseValid(sent.Add(time.Second)) {
		t.Error("lease still valid after committing PAUSED")
	}

	// A stop with appends unresolved gives the lease up as well, but its
	// record is not clean: the next session waits (issue 10, case 2).
	unclean, err := s.Begin(ctx, "l3", timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unclean.Close(ctx) })
	if err := unclean.Commit(ctx, Mirroring); err != nil {
		t.Fatal(err)
	}
	if err := unclean.CommitStop(ctx, Mirroring, 1); err == nil {
		t.Error("CommitStop with state MIRRORING succeeded, want an error")
	}
	if err := unclean.CommitStop(ctx, Stopped, 2); err != nil {
		t.Fatal(err)
	}
	if unclean.LeaseValid(sent.Add(time.Second)) {
		t.Error("lease still valid after CommitStop")
	}
	v, err = s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lv := v.Links["l3"]; lv.State != Stopped || lv.UnresolvedAppends != 2 || lv.Clean() {
		t.Errorf("link record after CommitStop(STOPPED, 2) = %+v (clean %v), want STOPPED with 2 unresolved, not clean", lv, lv.Clean())
	}
	if lv := v.Links["l2"]; !lv.Clean() {
		t.Errorf("link record after PAUSED = %+v, want clean", lv)
	}
}

// TestLeaseWait guards how long a new session waits for the old lease.
func TestLeaseWait(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	v := NewView()
	v.Links["running"] = LinkValue{State: Mirroring, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli()}
	v.Links["expired"] = LinkValue{State: Mirroring, LeaseExpiresMs: now.Add(-10 * time.Second).UnixMilli()}
	v.Links["stopped"] = LinkValue{State: Stopped, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli()}
	v.Links["failed"] = LinkValue{State: Failed, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli()}
	v.Links["paused"] = LinkValue{State: Paused, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli()}
	// A stop that left appends unresolved is not clean: waited for as
	// after a crash (issue 10, case 2).
	v.Links["stopped-unresolved"] = LinkValue{State: Stopped, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli(), UnresolvedAppends: 1}
	v.Links["paused-unresolved"] = LinkValue{State: Paused, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli(), UnresolvedAppends: 3}
	// A session that recorded its produce timeout is waited for that long
	// past its lease (issue 10, case 3).
	v.Links["recorded-timeout"] = LinkValue{State: Mirroring, LeaseExpiresMs: now.Add(10 * time.Second).UnixMilli(), AppendTimeoutMs: 7000}
	tests := []struct {
		link     string
		skew     time.Duration
		inBroker time.Duration // the default for records without AppendTimeoutMs
		want     time.Duration
	}{
		{"running", 0, 0, 10 * time.Second},
		{"running", 2 * time.Second, 0, 12 * time.Second},
		{"running", 2 * time.Second, 30 * time.Second, 42 * time.Second},
		{"expired", 2 * time.Second, 0, 0},
		{"expired", 15 * time.Second, 0, 5 * time.Second},
		{"expired", 2 * time.Second, 30 * time.Second, 22 * time.Second},
		{"stopped", 2 * time.Second, 30 * time.Second, 0},
		{"paused", 2 * time.Second, 30 * time.Second, 0},
		{"stopped-unresolved", 2 * time.Second, 30 * time.Second, 42 * time.Second},
		{"paused-unresolved", 0, 5 * time.Second, 15 * time.Second},
		{"recorded-timeout", 0, 30 * time.Second, 17 * time.Second},
		{"failed", 2 * time.Second, 0, 12 * time.Second},
		{"never-seen", 2 * time.Second, 30 * time.Second, 0},
	}
	for _, tt := range tests {
		if got := v.LeaseWait(tt.link, now, tt.skew, tt.inBroker); got != tt.want {
			t.Errorf("LeaseWait(%s, skew %v, in broker %v) = %v, want %v", tt.link, tt.skew, tt.inBroker, got, tt.want)
		}
	}
}

// openTransaction begins a transaction of sess and produces recs into it,
// leaving it open.
func openTransaction(ctx context.Context, t *testing.T, sess *Session, recs ...Record) {
	t.Helper()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	krecs, err := sess.encode(recs)
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	sess.open = true
	if err := sess.cl.ProduceSync(ctx, krecs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionClose guards that Close aborts an open transaction, is
// idempotent, and that a closed session does not write.
func TestSessionClose(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess := begin(t, ctx, s, "l1")
	rec := Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "open"}}
	openTransaction(ctx, t, sess, rec)
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := sess.Commit(ctx, Mirroring); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
	// The aborted transaction does not hold the replay (the LSO moved
	// past it) and its record is not in the state.
	v, err := s.Replay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Records) != 0 {
		t.Errorf("records after an aborted transaction: %v", describe(v.Records))
	}
}
