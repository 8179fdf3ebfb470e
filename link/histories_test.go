package link

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/translate"
)

// The property test of histories (issue 21, deliverable 4): a random
// history of produces by every kind of producer (idempotent, transactional
// with aborts, plain with a retry that leaves its batch twice, a chain
// source's forwarded batch sent twice), compaction, DeleteRecords at the
// source and at the destination, agent crashes at random points, restarts,
// pauses and resumes, on a compacted topic mirrored by a real link on kfake.
// After each history, with the link caught up:
//
//   - the destination holds, in source order, only committed records, each
//     at most as often as the source held it (a retried batch's records
//     twice, a chain copy's once): nothing duplicated, nothing aborted;
//   - every committed record the source still holds is at the destination,
//     unless the destination deleted it (its records after the first one
//     it still holds are all there): nothing lost;
//   - every source position translates, the running link's way and the
//     offline way, to the destination offset of the mirror of the first
//     record at or after it that the link mirrored, or up to the mirror of
//     the first such record the source still holds (records the source
//     removed after they were mirrored may be skipped), or is reported as
//     below the destination's log start when that mirror was deleted.
//
// The truth comes from both logs read in full and the ledger of what the
// history produced. Histories are repeatable from their seed:
// MIRRORD_HISTORY_SEED=N runs that one; MIRRORD_HISTORIES=N runs N
// (default 4: what CI runs); MIRRORD_HISTORY_STEPS=N sets the most steps
// of one history (default 14).
func TestHistories(t *testing.T) {
	e := onKfake(t)
	n, steps, first := 4, 14, uint64(time.Now().UnixNano()%1_000_000)
	if s := os.Getenv("MIRRORD_HISTORIES"); s != "" {
		n = mustAtoi(t, s)
	}
	if s := os.Getenv("MIRRORD_HISTORY_STEPS"); s != "" {
		steps = mustAtoi(t, s)
	}
	if s := os.Getenv("MIRRORD_HISTORY_SEED"); s != "" {
		first, n = uint64(mustAtoi(t, s)), 1
	}
	var records, positions, inexact, stepsRun int
	began := time.Now()
	for i := range n {
		seed := first + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := runHistory(t, e, seed, steps)
			records += h.records
			positions += h.positions
			inexact += h.inexact
			stepsRun += len(h.steps)
		})
	}
	t.Logf("%d histories from seed %d (%d steps, %d records produced, %d positions translated two ways, %d without an exact answer) in %s",
		n, first, stepsRun, records, positions, inexact, time.Since(began).Round(time.Second))
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// entry is one record the history produced, in source order.
type entry struct {
	id      string // the record's value: unique per record, the same in each copy of a batch
	key     string
	off     int64 // source offset
	aborted bool
	// copies is how often the destination may hold the record: 1, or 2
	// for a plain producer's retried batch (the link cannot tell the
	// copies apart); a chain copy is an entry of its own with skip set.
	copies int
	skip   bool // a chain source's second copy: the link skips it
	// barriers is how many sessions had reached MIRRORING when the
	// record was produced: a chain copy fetched in a later session than
	// its original is appended again (the barrier empties the producer
	// state of forwarded PIDs: DESIGN §12 I3, spec 000).
	barriers int64
}

// history is one run: its ledger and what it did.
type history struct {
	t     *testing.T
	rng   *rand.Rand
	f     *fixture
	topic string
	l     *testLink
	name  int // link session names

	ledger  []entry
	n       int   // records produced
	chain   int32 // the chain producer's next sequence
	paused  bool
	ended   int64 // MIRRORING transitions of the sessions that ended
	steps   []string
	records int
	// positions translated, for the report, and those that had no exact
	// answer (translate.ErrInexact)
	positions, inexact int
}

func runHistory(t *testing.T, e *env, seed uint64, most int) *history {
	f := e.mirrored(t, fmt.Sprintf("hist%d", seed), srcTopic("h", 1).with(compactedConfig))
	f.cfg.Link.OnOffsetOutOfRange = fetcher.OutOfRangeEarliest
	h := &history{t: t, rng: rand.New(rand.NewPCG(seed, 21)), f: f, topic: f.topic("h")}
	defer func() {
		if t.Failed() {
			t.Logf("history %d: %s", seed, strings.Join(h.steps, "; "))
		}
	}()
	h.start()
	steps := 4 + h.rng.IntN(most-3)
	for range steps {
		switch r := h.rng.IntN(100); {
		case r < 45:
			h.produce()
		case r < 55:
			h.step("compact")
			f.src.Fake.Compact()
		case r < 63:
			h.deleteAt(f.src, "source")
		case r < 70:
			h.deleteAt(f.dst, "destination")
		case r < 80:
			h.crash()
		case r < 88:
			h.pauseOrResume()
		default:
			h.settle()
		}
	}
	h.produce() // something after the last change
	if h.l == nil {
		h.start()
	}
	if h.paused {
		h.step("resume")
		h.l.Resume()
		h.paused = false
	}
	h.l.waitState(t, Mirroring, 60*time.Second)
	waitCaughtUp(t, h.l, endOffset(t, f.src, h.topic, 0), 90*time.Second)
	h.check()
	return h
}

func (h *history) step(format string, args ...any) {
	h.steps = append(h.steps, fmt.Sprintf(format, args...))
}

func (h *history) start() {
	h.name++
	h.step("start %d", h.name)
	h.l = h.f.start(fmt.Sprintf("s%d", h.name))
}

// barriers is how many times a session of the history went from PREPARING
// to MIRRORING (each time with a barrier) so far.
func (h *history) barriers() int64 {
	n := h.ended
	if h.l != nil {
		n += h.l.prepared.Load()
	}
	return n
}

// crash ends the running session without a drain or a final checkpoint,
// sometimes right away, sometimes after a moment, and starts the next one.
func (h *history) crash() {
	if h.l == nil {
		h.start()
		return
	}
	wait := time.Duration(h.rng.IntN(300)) * time.Millisecond
	h.step("crash after %s", wait)
	time.Sleep(wait)
	h.l.stop(h.t, true)
	h.ended += h.l.prepared.Load()
	h.l, h.paused = nil, false
	if h.rng.IntN(2) == 0 {
		h.start()
	}
}

func (h *history) pauseOrResume() {
	if h.l == nil {
		h.start()
		return
	}
	if h.paused {
		h.step("resume")
		h.l.Resume()
		h.paused = false
		return
	}
	if st := h.l.Status().State; st != Mirroring {
		h.step("no pause: %s", st)
		return
	}
	h.step("pause")
	h.l.Pause()
	h.l.waitState(h.t, Paused, 30*time.Second)
	h.paused = true
}

// settle lets the link catch up.
func (h *history) settle() {
	if h.l == nil || h.paused {
		h.step("wait")
		time.Sleep(200 * time.Millisecond)
		return
	}
	h.step("catch up")
	h.l.waitState(h.t, Mirroring, 60*time.Second)
	waitCaughtUp(h.t, h.l, endOffset(h.t, h.f.src, h.topic, 0), 60*time.Second)
}

// deleteAt deletes records of c's partition up to a random offset between
// its log start and its end.
func (h *history) deleteAt(c *cluster, side string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	starts, err := c.Admin.ListStartOffsets(ctx, h.topic)
	if err != nil {
		h.t.Fatal(err)
	}
	start, ok := starts.Lookup(h.topic, 0)
	if !ok || start.Err != nil {
		h.step("nothing to delete at the %s: no partition yet", side)
		return
	}
	end := endOffset(h.t, c, h.topic, 0)
	if end <= start.Offset {
		h.step("nothing to delete at the %s", side)
		return
	}
	to := start.Offset + 1 + h.rng.Int64N(end-start.Offset)
	h.step("delete the %s to %d (of %d-%d)", side, to, start.Offset, end)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: h.topic, Partition: 0, At: to})
	rs, err := c.Admin.DeleteRecords(ctx, offs)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := rs.Error(); err != nil {
		h.t.Fatalf("delete records at the %s: %v", side, err)
	}
}

// produce produces one batch of a random kind: 1 to 8 records with keys of
// a small key space (the cleaner then removes records).
func (h *history) produce() {
	n := 1 + h.rng.IntN(8)
	recs := make([]batchtest.Record, n)
	ids := make([]string, n)
	keys := make([]string, n)
	for i := range recs {
		h.n++
		keys[i] = fmt.Sprintf("k%d", h.rng.IntN(6))
		ids[i] = fmt.Sprintf("r%04d", h.n)
		recs[i] = batchtest.Record{Key: []byte(keys[i]), Value: []byte(ids[i]), TimestampDelta: int64(i), OffsetDelta: -1}
	}
	h.records += n
	now := time.Now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch kind := h.rng.IntN(5); kind {
	case 0, 1: // idempotent, or transactional (a third aborted)
		txn := kind == 1
		abort := txn && h.rng.IntN(3) == 0
		opts := []kgo.Opt{kgo.DefaultProduceTopic(h.topic), kgo.ProducerLinger(50 * time.Millisecond)}
		if txn {
			opts = append(opts, kgo.TransactionalID(fmt.Sprintf("%s-tx%d", h.topic, h.n)))
		}
		cl := h.f.src.NewClient(h.t, opts...)
		defer cl.Close()
		if txn {
			if err := cl.BeginTransaction(); err != nil {
				h.t.Fatal(err)
			}
		}
		krs := make([]*kgo.Record, n)
		for i := range krs {
			krs[i] = &kgo.Record{Key: []byte(keys[i]), Value: []byte(ids[i])}
		}
		if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
			h.t.Fatal(err)
		}
		if txn {
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
				h.t.Fatal(err)
			}
		}
		for i, r := range krs {
			h.ledger = append(h.ledger, entry{id: ids[i], key: keys[i], off: r.Offset, aborted: abort, copies: 1})
		}
		h.step("produce %d %s", n, map[bool]string{false: "idempotent", true: map[bool]string{false: "transactional", true: "aborted"}[abort]}[txn])
	case 2: // plain, retried: the batch twice
		b := batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: now, Codec: int8(h.rng.IntN(5)), Records: recs})
		for range 2 {
			base := produceRawAt(h.t, h.f.src, h.topic, b)
			for i := range recs {
				h.ledger = append(h.ledger, entry{id: ids[i], key: keys[i], off: base + int64(i), copies: 2})
			}
		}
		h.step("produce %d plain, retried", n)
	case 3: // plain, retried late: another producer's batch landed between the copies
		b := batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: now, Codec: int8(h.rng.IntN(5)), Records: recs})
		base := produceRawAt(h.t, h.f.src, h.topic, b)
		for i := range recs {
			h.ledger = append(h.ledger, entry{id: ids[i], key: keys[i], off: base + int64(i), copies: 2})
		}
		h.n++
		mid := fmt.Sprintf("r%04d", h.n)
		key := fmt.Sprintf("k%d", h.rng.IntN(6))
		h.records++
		base = produceRawAt(h.t, h.f.src, h.topic, batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: now + 1,
			Records: []batchtest.Record{{Key: []byte(key), Value: []byte(mid), OffsetDelta: -1}}}))
		h.ledger = append(h.ledger, entry{id: mid, key: key, off: base, copies: 1})
		base = produceRawAt(h.t, h.f.src, h.topic, b)
		for i := range recs {
			h.ledger = append(h.ledger, entry{id: ids[i], key: keys[i], off: base + int64(i), copies: 2})
		}
		h.step("produce %d plain, retried after another batch", n)
	default: // a chain source's forwarded batch, sent twice
		const upstream = int64(-9223371946660462587)
		b := batchtest.Build(batchtest.Spec{PID: upstream, BaseSequence: h.chain, FirstTimestamp: now, Codec: int8(h.rng.IntN(5)), Records: recs})
		h.chain += int32(n)
		for c := range 2 {
			base := produceRawAt(h.t, h.f.src, h.topic, b)
			for i := range recs {
				h.ledger = append(h.ledger, entry{id: ids[i], key: keys[i], off: base + int64(i), copies: 1, skip: c == 1, barriers: h.barriers()})
			}
		}
		h.step("produce %d chain, twice", n)
	}
}

// produceRawAt appends batch to partition 0 of topic at c's leader and
// returns its base offset.
func produceRawAt(t *testing.T, c *cluster, topic string, batch []byte) int64 {
	t.Helper()
	return produceRawTo(t, c, topic, 0, batch)
}

// check compares the destination with the ledger and the source, and
// translates every source position.
//
// Which copy of a record held twice at the source a mirror is of is not
// always known: a chain copy's original the source still holds is the one
// the link mirrored (it skipped the copy), a retried record's last copy the
// source still holds is mirrored (nothing removes a later copy before an
// earlier one); otherwise either may be, and the truth is taken both ways
// (early: a record's first copies, late: its last), a translation may land
// anywhere between.
func (h *history) check() {
	t := h.t
	src, dst := h.f.src, h.f.dst
	srcEnd, dstEnd := endOffset(t, src, h.topic, 0), endOffset(t, dst, h.topic, 0)
	now := readPartition(t, src, h.topic, 0, true, srcEnd) // what the source holds, committed
	dstRecs := readPartition(t, dst, h.topic, 0, false, dstEnd)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	starts, err := dst.Admin.ListStartOffsets(ctx, h.topic)
	if err != nil {
		t.Fatal(err)
	}
	dstStart, _ := starts.Lookup(h.topic, 0)
	srcStarts, err := src.Admin.ListStartOffsets(ctx, h.topic)
	if err != nil {
		t.Fatal(err)
	}
	srcStart, _ := srcStarts.Lookup(h.topic, 0)
	surviving := map[int64]bool{}
	for _, r := range now {
		surviving[r.Offset] = true
	}

	// Each record's copies (source offsets, in order) and how often the
	// destination may hold it.
	type rec struct {
		offs    []int64
		allowed int
		chain   bool
		aborted bool
		first   int // ledger index of the first copy
	}
	recs := map[string]*rec{}
	for i, en := range h.ledger {
		r := recs[en.id]
		if r == nil {
			r = &rec{allowed: en.copies, aborted: en.aborted, first: i}
			recs[en.id] = r
		}
		r.offs = append(r.offs, en.off)
		r.chain = r.chain || en.skip
		if en.skip && h.barriers() > en.barriers {
			r.allowed = 2 // the copy may have been fetched after a barrier
		}
	}
	// Nothing but committed records, each at most as often as allowed.
	seen := map[string]int{}
	var ids []string // the destination's records, in order
	var dsts []int64
	for _, r := range dstRecs {
		id := string(r.Value)
		switch rc := recs[id]; {
		case r.Attrs.IsControl():
			t.Errorf("destination offset %d holds a control record: the link appends data batches only", r.Offset)
		case rc == nil:
			t.Errorf("destination offset %d holds %q, which no producer of the history committed", r.Offset, id)
		case rc.aborted:
			t.Errorf("destination offset %d holds %q of an aborted transaction", r.Offset, id)
		default:
			seen[id]++
			if seen[id] > rc.allowed {
				t.Errorf("destination offset %d holds %q for the %d. time; the link mirrors it at most %d time(s): a duplicate", r.Offset, id, seen[id], rc.allowed)
				continue
			}
			ids, dsts = append(ids, id), append(dsts, r.Offset)
		}
	}
	// The pairings of mirrors with source offsets.
	type mirror struct{ src, dst int64 }
	pairing := func(late bool) []mirror {
		out := make([]mirror, len(ids))
		occ := map[string]int{}
		for i, id := range ids {
			rc, c := recs[id], seen[id]
			early := !late
			switch {
			case rc.chain && surviving[rc.offs[0]] && rc.allowed == 1:
				// The link skipped the copy. Not so when the copy may
				// have been fetched after a barrier (allowed 2): then
				// it was appended again, and a destination that lost
				// the original's mirror (DeleteRecords) holds the
				// copy's only (seed 556393).
				early = true
			case !rc.chain && len(rc.offs) > 1 && surviving[rc.offs[len(rc.offs)-1]]:
				early = false
			}
			j := occ[id]
			if !early {
				j += len(rc.offs) - c
			}
			out[i] = mirror{src: rc.offs[j], dst: dsts[i]}
			occ[id]++
		}
		return out
	}
	pairings := [2][]mirror{pairing(false), pairing(true)}
	// In source order: some choice of copies, each mirror's between its
	// early and late pairing, ascends (the least that fits, greedily).
	last := int64(-1)
	occ := map[string]int{}
	for i, id := range ids {
		rc := recs[id]
		lo, hi := occ[id], occ[id]+len(rc.offs)-seen[id]
		occ[id]++
		j := lo
		for j <= hi && rc.offs[j] < last {
			j++
		}
		if j > hi {
			t.Errorf("destination offset %d holds %q (source offsets %v) after the mirror of source offset %d: out of order", dsts[i], id, rc.offs, last)
			continue
		}
		last = rc.offs[j]
	}
	// Every committed record the source still holds is at the destination
	// from the first one the destination holds on.
	if len(ids) > 0 {
		firstSrc := max(pairings[0][0].src, pairings[1][0].src)
		for _, r := range now {
			// A chain copy's record is mirrored at its original, if
			// the link saw that.
			o := r.Offset
			if rc := recs[string(r.Value)]; rc != nil && rc.chain {
				o = rc.offs[0]
			}
			if rc := recs[string(r.Value)]; rc != nil && rc.chain && !surviving[rc.offs[0]] && seen[string(r.Value)] == 0 {
				// A known limit (README): the cleaner removed the
				// record from the original and kept it in the copy;
				// the link may have mirrored the original cut and
				// skipped the copy as a duplicate.
				t.Logf("source offset %d (%q): in a chain copy whose original lost it to the cleaner; not at the destination (known limit)", r.Offset, r.Value)
				continue
			}
			if o >= firstSrc && seen[string(r.Value)] == 0 {
				t.Errorf("source offset %d (%q) is committed and still at the source, and not at the destination, which holds the records from source offset %d on: lost",
					r.Offset, r.Value, firstSrc)
			}
		}
	} else if len(now) > 0 {
		t.Errorf("the destination holds nothing (its log %d-%d) and the source holds %d committed records", dstStart.Offset, dstEnd, len(now))
	}

	// Translation of every source position: between the mirror of the
	// first record at or after it the link mirrored and the mirror of the
	// first one the source still holds, either pairing.
	want := func(ms []mirror, p int64, survivingOnly bool) int64 {
		for _, m := range ms {
			if m.src >= p && (!survivingOnly || surviving[m.src]) {
				return m.dst
			}
		}
		return dstEnd
	}
	firstMirrored := int64(-1)
	if len(ids) > 0 {
		firstMirrored = max(pairings[0][0].src, pairings[1][0].src)
	}
	defer func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, r := range now {
			fmt.Fprintf(&b, " %d:%s", r.Offset, r.Value)
		}
		t.Logf("source (log start %d, end %d):%s", srcStart.Offset, srcEnd, b.String())
		b.Reset()
		for i, id := range ids {
			fmt.Fprintf(&b, " %d:%s(%d|%d)", dsts[i], id, pairings[0][i].src, pairings[1][i].src)
		}
		t.Logf("destination (log start %d, end %d), with the source offsets paired early|late:%s", dstStart.Offset, dstEnd, b.String())
	}()
	off, err := NewOffline(ctx, h.f.cfg, Deps{SourceOpts: src.Opts(), DestinationOpts: dst.Opts()})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	ways := []way{
		{name: "link", fn: func(ctx context.Context, p int64) (translate.Result, error) { return h.l.Translate(ctx, h.topic, 0, p) }},
		{name: "offline", fn: func(ctx context.Context, p int64) (translate.Result, error) { return off.Translate(ctx, h.topic, 0, p) }},
	}
	for p := int64(0); p <= srcEnd; p++ {
		q := max(p, srcStart.Offset)
		lo := min(want(pairings[0], q, false), want(pairings[1], q, false))
		hi := max(want(pairings[0], q, true), want(pairings[1], q, true))
		// The destination deleted records: the mirror of the first
		// record at or after q may be among them.
		deleted := dstStart.Offset > 0 && (firstMirrored < 0 || q <= firstMirrored)
		for _, w := range ways {
			h.positions++
			// Each translation has its minute (a hang guard; the
			// check's deadline is for its reads).
			tctx, tcancel := context.WithTimeout(context.Background(), time.Minute)
			got, err := w.fn(tctx, p)
			tcancel()
			switch {
			case deleted && errors.Is(err, translate.ErrBelowDestinationStart):
			case errors.Is(err, translate.ErrInexact):
				// The documented limit: a position between records the
				// cleaner removed from a batch the link had re-encoded.
				h.inexact++
			case err != nil:
				t.Errorf("%s: translate %d: %v (want %d up to %d)", w.name, p, err, lo, hi)
			case got.DestinationOffset < lo || got.DestinationOffset > hi:
				t.Errorf("%s: translate %d: destination offset %d via %s (source batch %d, destination batch %d), want %d up to %d",
					w.name, p, got.DestinationOffset, got.Via, got.SourceBatch, got.DestinationBatch, lo, hi)
			}
		}
	}
}
