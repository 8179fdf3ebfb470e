package transform

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// seqRand returns a Rand that yields the given values in turn, then panics,
// so that a test states exactly which salts are drawn.
func seqRand(t *testing.T, vals ...int64) func() int64 {
	return func() int64 {
		if len(vals) == 0 {
			t.Fatal("PSM drew more salts than the test expected")
		}
		v := vals[0]
		vals = vals[1:]
		return v
	}
}

// fwd is one batch as it reaches a link: which origin, its region, epoch,
// base sequence and record count.
type fwd struct {
	cluster string
	region  Region
	pid     int64
	epoch   int16
	seq     int32
	n       int32
}

func (f fwd) info() BatchInfo {
	return BatchInfo{
		Origin:          Origin{f.cluster, f.pid},
		Region:          f.region,
		Epoch:           f.epoch,
		BaseSequence:    f.seq,
		LastOffsetDelta: f.n - 1,
	}
}

// out is a batch as appended at the destination.
type out struct {
	origin Origin
	mapped int64
	epoch  int16
	seq    int32
	n      int32
	kind   Kind
}

// drive runs batches through a PSM the way the pipeline does: decide; on a
// collision "persist" the salt (record it in salts), AddSalt and decide
// again; append what appends; commit.
func drive(t *testing.T, p *PSM, in []fwd) (appended []out, salts []Salt) {
	t.Helper()
	now := t0
	for _, f := range in {
		now = now.Add(time.Millisecond)
		d := p.Decide(f.info())
		for tries := 0; d.Kind == KindCollision; tries++ {
			if tries > 1 {
				t.Fatalf("batch %+v: still a collision after %d salts", f, tries)
			}
			salts = append(salts, *d.Salt)
			p.AddSalt(d.Salt.Origin, d.Salt.Salt, now)
			d = p.Decide(f.info())
		}
		if d.Kind.Appends() {
			appended = append(appended, out{Origin{f.cluster, f.pid}, d.Mapped, f.epoch, f.seq, f.n, d.Kind})
		}
		p.Commit(d, now)
	}
	return appended, salts
}

// nextHop feeds what was appended at a destination into the PSM of a mirror
// of that destination (the next link of a chain) and returns the kinds it
// sees. With a clean mapping every batch is a plain append there.
func nextHop(t *testing.T, cluster string, appended []out) []Kind {
	t.Helper()
	p := NewPSM(PSMConfig{Rand: seqRand(t)})
	var kinds []Kind
	for _, a := range appended {
		d := p.Decide(BatchInfo{Origin{cluster, a.mapped}, 7, a.epoch, a.seq, a.n - 1})
		kinds = append(kinds, d.Kind)
		p.Commit(d, t0)
	}
	return kinds
}

// naive maps without a PSM, the way a stateless mirror would.
func naive(in []fwd) []out {
	var o []out
	for _, f := range in {
		o = append(o, out{Origin{f.cluster, f.pid}, MapPID(f.pid, f.region), f.epoch, f.seq, f.n, KindAppend})
	}
	return o
}

// singleOrigin checks that every mapped PID carries batches of one origin.
func singleOrigin(t *testing.T, appended []out) {
	t.Helper()
	owner := map[int64]Origin{}
	for _, a := range appended {
		if o, ok := owner[a.mapped]; ok && o != a.origin {
			t.Errorf("mapped PID %d carries batches of %v and %v", a.mapped, o, a.origin)
		}
		owner[a.mapped] = a.origin
	}
}

// The three corruptions at the top of spec 000, each set up as two origins
// that would share a mapped PID: two source clusters whose IDs fold to the
// same region, both with a producer of PID 5. Without the PSM the batches
// interleave under one PID and the next hop misreads them (the corruption);
// with it, the second origin gets a salt and the next hop sees clean appends.
func TestPSMPreventsSpecCorruptions(t *testing.T) {
	cA, cB := uuidWithRegion(42, 1), uuidWithRegion(42, 2)
	for _, tc := range []struct {
		name string
		in   []fwd
		// what a stateless mapping makes the next hop see
		naiveKinds []Kind
	}{
		{
			// 1. Same epoch, wrong sequence: B's sequence 0-4 lands
			// after A's 0-9 under one PID and one epoch.
			name: "same epoch wrong sequence",
			in: []fwd{
				{cA, 42, 5, 0, 0, 10},
				{cB, 42, 5, 0, 0, 5},
				{cA, 42, 5, 0, 10, 10},
				{cB, 42, 5, 0, 5, 5},
			},
			naiveKinds: []Kind{KindAppend, KindDuplicate, KindAppend, KindDuplicate},
		},
		{
			// 2. Different epochs under one PID: B's lower epoch
			// interleaves with A's.
			name: "different epochs",
			in: []fwd{
				{cA, 42, 5, 3, 0, 2},
				{cB, 42, 5, 1, 0, 2},
				{cA, 42, 5, 3, 2, 2},
				{cB, 42, 5, 1, 2, 2},
			},
			naiveKinds: []Kind{KindAppend, KindLowerEpoch, KindAppend, KindLowerEpoch},
		},
		{
			// 3. Transactional interleaving: two transactional
			// producers, open transactions at once (the agent clears
			// the transactional bit; what matters is that their
			// batches do not share a PID).
			name: "transactional interleaving",
			in: []fwd{
				{cA, 42, 5, 7, 0, 3},
				{cB, 42, 5, 7, 0, 1},
				{cA, 42, 5, 7, 3, 3},
				{cB, 42, 5, 8, 0, 1},
				{cA, 42, 5, 8, 0, 3},
			},
			naiveKinds: []Kind{KindAppend, KindDuplicate, KindAppend, KindAppend, KindSequenceGap},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextHop(t, "dst", naive(tc.in)); fmt.Sprint(got) != fmt.Sprint(tc.naiveKinds) {
				t.Fatalf("without a PSM the next hop sees %v, want %v (the corruption this test is about)", got, tc.naiveKinds)
			}
			p := NewPSM(PSMConfig{Rand: seqRand(t, 1000)})
			appended, salts := drive(t, p, tc.in)
			if len(appended) != len(tc.in) {
				t.Fatalf("%d of %d batches appended", len(appended), len(tc.in))
			}
			if len(salts) != 1 || salts[0].Origin != (Origin{cB, 5}) || salts[0].Salt != 1000 || salts[0].Colliding != cA {
				t.Fatalf("salts = %+v, want one salt 1000 for %s/5 colliding with %s", salts, cB, cA)
			}
			for _, a := range appended {
				want := MapPID(5, 42)
				if a.origin.Cluster == cB {
					want = MapPIDSalted(5, 42, 1000)
				}
				if a.mapped != want {
					t.Errorf("%v appended under %d, want %d", a.origin, a.mapped, want)
				}
			}
			singleOrigin(t, appended)
			for i, k := range nextHop(t, "dst", appended) {
				if k != KindAppend {
					t.Errorf("next hop sees batch %d as %v, want append", i, k)
				}
			}
		})
	}
}

// A PID of 2^31 or more loses its high bits in the mapping; the PSM's origin
// check turns the clash into an ordinary collision.
func TestPSMMaskedPIDCollision(t *testing.T) {
	const c = "AAAAAAAAAAAAAAAAAAAAKg"
	p := NewPSM(PSMConfig{Rand: seqRand(t, 5)})
	appended, salts := drive(t, p, []fwd{
		{c, 42, 9, 0, 0, 1},
		{c, 42, 9 + 1<<31, 0, 0, 1},
		{c, 42, 9, 0, 1, 1},
		{c, 42, 9 + 1<<31, 0, 1, 1},
	})
	if len(salts) != 1 || salts[0].Origin.PID != 9+1<<31 || salts[0].Colliding != c {
		t.Fatalf("salts = %+v, want one for PID %d", salts, int64(9+1<<31))
	}
	if appended[1].mapped != MapPID(9, 47) || appended[3].mapped != MapPID(9, 47) {
		t.Errorf("masked PID appended under %d and %d, want %d", appended[1].mapped, appended[3].mapped, MapPID(9, 47))
	}
	singleOrigin(t, appended)
}

// A chain A→B→C where B's cluster ID folds to A's region: on the B→C link a
// PID that A→B forwarded (negative) and a local producer of B with the same
// low PID clash. The forwarded PID keeps its identity in both orders.
func TestPSMChainNegativeAndLocalClash(t *testing.T) {
	clusterA := uuidWithRegion(0xA11CE, 1)
	clusterB := uuidWithRegion(0xA11CE, 2) // folds to A's region
	forwarded := MapPID(7, 0xA11CE)        // A's PID 7 as it sits in B's log
	if forwarded != MapPID(7, 0xA11CE) || clusterA == clusterB {
		t.Fatal("test setup")
	}
	t.Run("forwarded first, local salted", func(t *testing.T) {
		p := NewPSM(PSMConfig{Rand: seqRand(t, 3)})
		appended, salts := drive(t, p, []fwd{
			{clusterB, 0xA11CE, forwarded, 0, 0, 2},
			{clusterB, 0xA11CE, 7, 0, 0, 2},
			{clusterB, 0xA11CE, forwarded, 0, 2, 2},
			{clusterB, 0xA11CE, 7, 0, 2, 2},
		})
		if len(salts) != 1 || salts[0].Origin != (Origin{clusterB, 7}) || salts[0].Colliding != clusterB {
			t.Fatalf("salts = %+v, want one for B's local PID 7", salts)
		}
		if appended[0].mapped != forwarded || appended[2].mapped != forwarded {
			t.Error("the forwarded PID did not keep its identity")
		}
		if appended[1].mapped != MapPIDSalted(7, 0xA11CE, 3) {
			t.Errorf("local PID under %d, want salted %d", appended[1].mapped, MapPIDSalted(7, 0xA11CE, 3))
		}
		singleOrigin(t, appended)
	})
	t.Run("local first, holder salted", func(t *testing.T) {
		p := NewPSM(PSMConfig{Rand: seqRand(t, 3)})
		appended, salts := drive(t, p, []fwd{
			{clusterB, 0xA11CE, 7, 0, 0, 2},
			{clusterB, 0xA11CE, forwarded, 0, 0, 2},
			{clusterB, 0xA11CE, 7, 0, 2, 2},
			{clusterB, 0xA11CE, forwarded, 0, 2, 2},
		})
		if len(salts) != 1 || salts[0].Origin != (Origin{clusterB, 7}) {
			t.Fatalf("salts = %+v, want one for B's local PID 7 (the holder)", salts)
		}
		want := []int64{forwarded, forwarded, MapPIDSalted(7, 0xA11CE, 3), forwarded}
		want[0] = MapPID(7, 0xA11CE) // before the clash, the local PID held the slot
		for i, a := range appended {
			if a.mapped != want[i] {
				t.Errorf("batch %d (%v) under %d, want %d", i, a.origin, a.mapped, want[i])
			}
		}
		if m, ok := p.Mapped(Origin{clusterB, forwarded}); !ok || m != forwarded {
			t.Errorf("forwarded origin holds %d (%v), want %d", m, ok, forwarded)
		}
	})
}

// Two forwarded negative PIDs from different origins cannot be remapped:
// the batch is appended as it is and reported.
func TestPSMUnresolvable(t *testing.T) {
	neg := MapPID(11, 0xBEEF)
	p := NewPSM(PSMConfig{Rand: seqRand(t)})
	in := []fwd{
		{"cluster-1", 1, neg, 0, 0, 1},
		{"cluster-2", 2, neg, 0, 0, 1},
		{"cluster-2", 2, neg, 0, 0, 1}, // a duplicate stays a duplicate
		{"cluster-2", 2, neg, 0, 1, 1},
	}
	var kinds []Kind
	for _, f := range in {
		d := p.Decide(f.info())
		kinds = append(kinds, d.Kind)
		if d.Mapped != neg {
			t.Errorf("forwarded PID remapped to %d", d.Mapped)
		}
		if d.Kind == KindUnresolvable && d.Holder != (Origin{"cluster-1", neg}) {
			t.Errorf("holder %v, want cluster-1", d.Holder)
		}
		p.Commit(d, t0)
	}
	if want := []Kind{KindAppend, KindUnresolvable, KindDuplicate, KindUnresolvable}; fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
}

// Same-origin classification: duplicates, gaps, epochs, wrap-around and
// producers without sequences.
func TestPSMSequences(t *testing.T) {
	const c = "c"
	for _, tc := range []struct {
		name  string
		in    []fwd
		kinds []Kind
	}{
		{"in order", []fwd{{c, 1, 3, 0, 0, 5}, {c, 1, 3, 0, 5, 5}}, []Kind{KindAppend, KindAppend}},
		{"exact duplicate", []fwd{{c, 1, 3, 0, 0, 5}, {c, 1, 3, 0, 0, 5}}, []Kind{KindAppend, KindDuplicate}},
		{"older duplicate", []fwd{{c, 1, 3, 0, 0, 5}, {c, 1, 3, 0, 5, 5}, {c, 1, 3, 0, 0, 5}}, []Kind{KindAppend, KindAppend, KindDuplicate}},
		{"gap from compaction", []fwd{{c, 1, 3, 0, 0, 5}, {c, 1, 3, 0, 9, 1}, {c, 1, 3, 0, 10, 1}}, []Kind{KindAppend, KindSequenceGap, KindAppend}},
		{"first batch of unknown producer mid-sequence", []fwd{{c, 1, 3, 0, 500, 5}}, []Kind{KindAppend}},
		{"new epoch restarts", []fwd{{c, 1, 3, 0, 0, 5}, {c, 1, 3, 1, 0, 5}, {c, 1, 3, 1, 5, 1}}, []Kind{KindAppend, KindAppend, KindAppend}},
		{"lower epoch", []fwd{{c, 1, 3, 2, 0, 5}, {c, 1, 3, 1, 5, 5}, {c, 1, 3, 2, 5, 1}}, []Kind{KindAppend, KindLowerEpoch, KindAppend}},
		{"wrap around", []fwd{{c, 1, 3, 0, math.MaxInt32 - 4, 5}, {c, 1, 3, 0, 0, 5}, {c, 1, 3, 0, math.MaxInt32 - 4, 5}}, []Kind{KindAppend, KindAppend, KindDuplicate}},
		{"batch spanning the wrap", []fwd{{c, 1, 3, 0, math.MaxInt32 - 1, 4}, {c, 1, 3, 0, 2, 1}}, []Kind{KindAppend, KindAppend}},
		{"no sequence", []fwd{{c, 1, 3, 0, -1, 5}, {c, 1, 3, 0, -1, 5}}, []Kind{KindAppend, KindAppend}},
		{"no producer id", []fwd{{c, 1, -1, -1, -1, 5}, {c, 1, -1, -1, -1, 5}}, []Kind{KindAppend, KindAppend}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPSM(PSMConfig{Rand: seqRand(t)})
			var kinds []Kind
			for _, f := range tc.in {
				d := p.Decide(f.info())
				kinds = append(kinds, d.Kind)
				p.Commit(d, t0)
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tc.kinds) {
				t.Errorf("kinds = %v, want %v", kinds, tc.kinds)
			}
		})
	}
}

// The salt search skips salts whose slot is taken and the slot that is -1,
// and a salted origin keeps its mapping after a restart (salts replayed).
func TestPSMSaltSearch(t *testing.T) {
	cA, cB, cC := uuidWithRegion(42, 1), uuidWithRegion(42, 2), uuidWithRegion(43, 3)
	p := NewPSM(PSMConfig{Rand: seqRand(t, 1, 1<<32, 2)})
	// C's PID 5 holds region 43's slot; so salt 1 (42+1) is taken, salt
	// 1<<32 is salt 0 in disguise (the contested slot), salt 2 is free.
	appended, salts := drive(t, p, []fwd{
		{cC, 43, 5, 0, 0, 1},
		{cA, 42, 5, 0, 0, 1},
		{cB, 42, 5, 0, 0, 1},
	})
	if len(salts) != 1 || salts[0].Salt != 2 || appended[2].mapped != MapPID(5, 44) {
		t.Fatalf("salts %+v, B's batch under %d; want salt 2 and %d", salts, appended[2].mapped, MapPID(5, 44))
	}

	// Restart: a new PSM with the replayed salt maps B the same way,
	// whoever comes first.
	q := NewPSM(PSMConfig{Rand: seqRand(t)})
	q.AddSalt(Origin{cB, 5}, 2, t0)
	again, more := drive(t, q, []fwd{{cB, 42, 5, 0, 1, 1}, {cA, 42, 5, 0, 1, 1}})
	if len(more) != 0 || again[0].mapped != MapPID(5, 44) || again[1].mapped != MapPID(5, 42) {
		t.Errorf("after restart: %+v, salts %+v", again, more)
	}

	// The slot -1 (region 0xFFFFFFFF, low bits all ones) is never used.
	r := NewPSM(PSMConfig{Rand: seqRand(t, 9)})
	d := r.Decide(BatchInfo{Origin{"x", math.MaxInt32}, 0xFFFFFFFF, 0, 0, 0})
	if d.Kind != KindCollision || d.Salt.Salt != 9 || d.Salt.Mapped != MapPID(math.MaxInt32, 8) {
		t.Errorf("PID mapping to -1: %+v", d)
	}
}

// Barrier reset drops every mirrored (negative) producer entry, keeps salts,
// and an origin that comes back maps as before.
func TestPSMResetMirrored(t *testing.T) {
	cA, cB := uuidWithRegion(42, 1), uuidWithRegion(42, 2)
	p := NewPSM(PSMConfig{Rand: seqRand(t, 10)})
	drive(t, p, []fwd{{cA, 42, 5, 0, 0, 1}, {cB, 42, 5, 0, 0, 1}, {cA, 42, 6, 0, 0, 1}})
	if p.Len() != 3 {
		t.Fatalf("Len = %d before reset, want 3", p.Len())
	}
	if n := p.ResetMirrored(); n != 3 || p.Len() != 0 {
		t.Fatalf("ResetMirrored = %d, Len after = %d; want 3 and 0", n, p.Len())
	}
	if s, ok := p.Salt(Origin{cB, 5}); !ok || s != 10 {
		t.Errorf("salt after reset = %d, %v; want 10, true", s, ok)
	}
	// Salts lists them for a fresh PSM that must map as this one does.
	if all := p.Salts(); len(all) != 1 || all[Origin{cB, 5}] != 10 {
		t.Errorf("Salts() = %v, want only %v: 10", all, Origin{cB, 5})
	}
	// After the reset the same sequence is not a duplicate any more: the
	// barrier is where a new session starts clean.
	appended, salts := drive(t, p, []fwd{{cB, 42, 5, 0, 0, 1}, {cA, 42, 5, 0, 0, 1}})
	if len(salts) != 0 || appended[0].mapped != MapPIDSalted(5, 42, 10) || appended[1].mapped != MapPID(5, 42) {
		t.Errorf("after reset: %+v, salts %+v", appended, salts)
	}
	if n := p.ResetMirrored(); n != 2 {
		t.Errorf("second reset dropped %d, want 2", n)
	}
}

// Idle entries expire after producer_state_expiry; salts of expired or
// inactive origins are returned for tombstoning; active ones stay.
func TestPSMExpire(t *testing.T) {
	cA, cB := uuidWithRegion(42, 1), uuidWithRegion(42, 2)
	p := NewPSM(PSMConfig{Expiry: time.Hour, Rand: seqRand(t, 10, 20)})
	commit := func(f fwd, at time.Time) {
		d := p.Decide(f.info())
		if d.Kind == KindCollision {
			p.AddSalt(d.Salt.Origin, d.Salt.Salt, at)
			d = p.Decide(f.info())
		}
		p.Commit(d, at)
	}
	commit(fwd{cA, 42, 5, 0, 0, 1}, t0)
	commit(fwd{cB, 42, 5, 0, 0, 1}, t0)                     // salted 10
	commit(fwd{cA, 42, 6, 0, 0, 1}, t0.Add(30*time.Minute)) // stays active
	p.AddSalt(Origin{"old", 1}, 77, t0.Add(-2*time.Hour))   // replayed, never used

	if p.Expirable(t0.Add(-3 * time.Hour)) {
		t.Error("Expirable before anything is an hour idle")
	}
	if !p.Expirable(t0.Add(61 * time.Minute)) {
		t.Error("not Expirable when entries are an hour idle")
	}
	expired, tomb := p.Expire(t0.Add(61 * time.Minute))
	if expired != 2 || p.Len() != 1 {
		t.Fatalf("expired %d, left %d; want 2 and 1", expired, p.Len())
	}
	got := map[Origin]bool{}
	for _, o := range tomb {
		got[o] = true
	}
	if len(tomb) != 2 || !got[Origin{cB, 5}] || !got[Origin{"old", 1}] {
		t.Errorf("tombstones %v, want B/5 and old/1", tomb)
	}
	if !slices.IsSortedFunc(tomb, compareOrigins) {
		t.Errorf("tombstones %v are not in origin order (the state records must not depend on map order)", tomb)
	}
	if _, ok := p.Salt(Origin{cB, 5}); ok {
		t.Error("expired salt still present")
	}
	if _, ok := p.Mapped(Origin{cA, 6}); !ok {
		t.Error("active producer expired")
	}
	if p.Expirable(t0.Add(89 * time.Minute)) {
		t.Error("Expirable right after an expiry")
	}
	if expired, tomb := p.Expire(t0.Add(89 * time.Minute)); expired != 0 || len(tomb) != 0 {
		t.Errorf("second expiry: %d, %v; want nothing", expired, tomb)
	}
}

// A salt replayed for an origin that currently holds an entry under another
// mapping makes it give up the slot (the eviction path of a collision).
func TestPSMAddSaltMovesEntry(t *testing.T) {
	p := NewPSM(PSMConfig{Rand: seqRand(t)})
	d := p.Decide(BatchInfo{Origin{"c", 5}, 42, 0, 0, 0})
	p.Commit(d, t0)
	p.AddSalt(Origin{"c", 5}, 0, t0) // same mapping: entry stays
	if m, ok := p.Mapped(Origin{"c", 5}); !ok || m != MapPID(5, 42) {
		t.Fatalf("entry dropped by a salt that keeps its mapping")
	}
	p.AddSalt(Origin{"c", 5}, 1, t0)
	if _, ok := p.Mapped(Origin{"c", 5}); ok {
		t.Fatal("entry kept under its old mapping after a new salt")
	}
	if d := p.Decide(BatchInfo{Origin{"c", 5}, 42, 0, 1, 0}); d.Mapped != MapPID(5, 43) || d.Kind != KindAppend {
		t.Errorf("after salt: %+v", d)
	}
	p.DeleteSalt(Origin{"c", 5})
	if _, ok := p.Salt(Origin{"c", 5}); ok {
		t.Error("DeleteSalt left the salt")
	}
}

// TestPSMSnapshotRestore guards I3's input: a PSM rebuilt from a snapshot
// decides every later batch as the original does (a duplicate stays a
// duplicate, a clash stays a clash), and equal states snapshot equally.
func TestPSMSnapshotRestore(t *testing.T) {
	regionA, _ := RegionOf("MkU3OEVBNTcwNTJENDM2Qg")
	now := time.Unix(1_700_000_000, 0)
	orig := NewPSM(PSMConfig{})
	batches := []BatchInfo{
		{Origin: Origin{Cluster: "a", PID: 5}, Region: regionA, Epoch: 2, BaseSequence: 0, LastOffsetDelta: 9},
		{Origin: Origin{Cluster: "a", PID: 6}, Region: regionA, Epoch: 0, BaseSequence: 0, LastOffsetDelta: 0},
		{Origin: Origin{Cluster: "a", PID: -77}, Region: regionA, Epoch: 1, BaseSequence: 10, LastOffsetDelta: 4},
		{Origin: Origin{Cluster: "a", PID: 7}, Region: regionA, Epoch: 0, BaseSequence: -1, LastOffsetDelta: 3},
	}
	for _, b := range batches {
		orig.Commit(orig.Decide(b), now)
	}
	snap := orig.Snapshot()
	if len(snap) != len(batches) {
		t.Fatalf("snapshot holds %d entries, want %d", len(snap), len(batches))
	}
	restored := NewPSM(PSMConfig{})
	restored.Restore(snap)
	if !reflect.DeepEqual(restored.Snapshot(), snap) {
		t.Fatalf("snapshot of the restored PSM differs:\n got %+v\nwant %+v", restored.Snapshot(), snap)
	}
	next := []BatchInfo{
		{Origin: Origin{Cluster: "a", PID: 5}, Region: regionA, Epoch: 2, BaseSequence: 0, LastOffsetDelta: 9},    // duplicate
		{Origin: Origin{Cluster: "a", PID: 5}, Region: regionA, Epoch: 2, BaseSequence: 10, LastOffsetDelta: 1},   // next
		{Origin: Origin{Cluster: "a", PID: -77}, Region: regionA, Epoch: 1, BaseSequence: 12, LastOffsetDelta: 0}, // duplicate of a forwarded PID
		{Origin: Origin{Cluster: "a", PID: 6}, Region: regionA, Epoch: 0, BaseSequence: 5, LastOffsetDelta: 0},    // gap
		{Origin: Origin{Cluster: "a", PID: 5}, Region: regionA, Epoch: 1, BaseSequence: 50, LastOffsetDelta: 0},   // lower epoch
		{Origin: Origin{Cluster: "b", PID: -77}, Region: regionA, Epoch: 0, BaseSequence: 0, LastOffsetDelta: 0},  // another origin, same forwarded PID: unresolvable
	}
	for i, b := range next {
		want, got := orig.Decide(b), restored.Decide(b)
		if want.Kind != got.Kind || want.Mapped != got.Mapped {
			t.Errorf("batch %d: restored PSM decides %s under %d, the original %s under %d", i, got.Kind, got.Mapped, want.Kind, want.Mapped)
		}
		orig.Commit(want, now)
		restored.Commit(got, now)
	}
	if orig.Decide(next[0]).Kind != KindDuplicate {
		t.Error("the test's first next batch is not a duplicate; it would not exercise the restored sequence")
	}
}
