package translate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

const coalesceTopic = "coalesced"

// rawClient is a kgo client for raw requests to c, with the transaction
// protocol's versions capped below KIP-890 part 2 (as appender.TxnV1): an
// explicit AddPartitionsToTxn before a transaction's first Produce.
func rawClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	vs.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	vs.SetMaxKeyVersion(int16(kmsg.AddPartitionsToTxn), 3)
	return kafkatest.Client(t, c, kgo.MaxVersions(vs))
}

// produceBatch appends raw batch b to the topic's partition 0 and returns
// its base offset.
func produceBatch(t *testing.T, cl *kgo.Client, txid *string, b []byte) int64 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis, req.TransactionID = -1, 10_000, txid
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = coalesceTopic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = b
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return p.BaseOffset
}

// txnWriter is a transactional producer that appends raw batches, as a
// session of a transactional link does (transform.Stamp).
type txnWriter struct {
	t     *testing.T
	cl    *kgo.Client
	id    string
	pid   int64
	epoch int16
	seq   int32
	added bool
}

// newTxnWriter begins transactional.id id, aborting the transaction a
// previous producer of it left open.
func newTxnWriter(t *testing.T, cl *kgo.Client, id string) *txnWriter {
	t.Helper()
	w := &txnWriter{t: t, cl: cl, id: id}
	for try := 0; ; try++ {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &w.id
		req.TransactionTimeoutMillis = 60_000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if err == nil {
			w.pid, w.epoch = resp.ProducerID, resp.ProducerEpoch
			return w
		}
		if !kerr.IsRetriable(err) || try > 100 {
			t.Fatalf("init producer id: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// append stamps a copy of b and appends it in the open transaction; it
// returns the batch's base offset.
func (w *txnWriter) append(b []byte) int64 {
	w.t.Helper()
	if !w.added {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = w.id, w.pid, w.epoch
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = coalesceTopic, []int32{0}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), w.cl)
		if err != nil {
			w.t.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
			w.t.Fatalf("add partitions to txn: %v", err)
		}
		w.added = true
	}
	b = append([]byte(nil), b...)
	transform.Stamp(b, w.pid, w.epoch, w.seq)
	h, _ := transform.ParseHeader(b)
	w.seq += h.LastOffsetDelta + 1
	return produceBatch(w.t, w.cl, &w.id, b)
}

// end commits or aborts the open transaction.
func (w *txnWriter) end(commit bool) {
	w.t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = w.id, w.pid, w.epoch, commit
	resp, err := req.RequestWith(context.Background(), w.cl)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		w.t.Fatalf("end txn: %v", err)
	}
	w.added = false
}

// coalesced are two logs as a transactional link with coalescing leaves
// them, and what the test knows of them from building them.
type coalesced struct {
	logs           *Logs
	pair           tp.Pair
	srcEnd, dstEnd int64
	// committed are the source's committed record offsets, in order;
	// mirror maps each to its mirror's destination offset.
	committed []int64
	mirror    map[int64]int64
	spans     []Span     // one per source batch the link appended, committed
	cks       [][2]int64 // checkpoints: (source, destination) after each commit
	srcAdm    *kadm.Client
}

// buildCoalesced produces the scenario's source and destination logs with
// codec: plain source batches and transactions (committed and aborted),
// one source batch the copy of the one before (a plain producer's retry:
// the same records and create times), and a destination written by two
// sessions of a transactional link that coalesces runs of contiguous
// batches, the first crashed inside a transaction that the second's
// InitProducerId aborted and whose batches it appended again, in other
// runs.
func buildCoalesced(t *testing.T, codec int8) *coalesced {
	t.Helper()
	src := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, coalesceTopic))
	dst := kafkatest.NewCluster(t, kafkatest.DestClusterID, kfake.SeedTopics(1, coalesceTopic))
	scl, dcl := rawClient(t, src), rawClient(t, dst)

	now := time.Now().UnixMilli()
	key := 0
	build := func(pid int64, n int, ts int64) []byte {
		rs := make([]batchtest.Record, n)
		for i := range rs {
			rs[i] = batchtest.Record{
				Key: fmt.Appendf(nil, "k%03d", key), Value: fmt.Appendf(nil, "value %d", key), TimestampDelta: int64(i / 2), OffsetDelta: -1,
				Headers: []kmsg.Header{{Key: "h", Value: fmt.Appendf(nil, "%d", key%3)}},
			}
			key++
		}
		return batchtest.Build(batchtest.Spec{PID: pid, Epoch: -1, BaseSequence: -1, Codec: codec, FirstTimestamp: ts, Records: rs})
	}
	type sent struct {
		raw  []byte // as produced (unstamped)
		base int64
	}
	var all []sent // committed source batches, in order
	ts := now
	plain := func(n int) sent {
		ts += 10
		b := build(-1, n, ts)
		s := sent{raw: b, base: produceBatch(t, scl, nil, b)}
		all = append(all, s)
		return s
	}
	upstream := newTxnWriter(t, scl, "upstream")
	txn := func(commit bool, ns ...int) {
		var ss []sent
		for _, n := range ns {
			ts += 10
			b := build(-1, n, ts)
			ss = append(ss, sent{raw: b, base: upstream.append(b)})
		}
		upstream.end(commit)
		if commit {
			all = append(all, ss...)
		}
	}
	plain(3)
	plain(1)
	plain(4)
	plain(2)
	txn(true, 2, 3)
	plain(1)
	plain(2)
	txn(false, 2, 2) // aborted between runs
	plain(5)
	plain(1)
	plain(1)
	plain(3)
	txn(true, 2)
	p10 := plain(2)
	all = append(all, sent{raw: p10.raw, base: produceBatch(t, scl, nil, p10.raw)}) // its copy
	plain(3)
	txn(false, 1) // aborted at the end: the link's position is past it

	// The destination: runs by the index of their batches in all.
	x := &coalesced{mirror: map[int64]int64{}}
	reenc := transform.NewReencoder()
	appendRun := func(w *txnWriter, idx ...int) (dbase int64, parts []Span) {
		var b []byte
		if len(idx) == 1 {
			b = all[idx[0]].raw
		} else {
			var bs [][]byte
			for _, i := range idx {
				bs = append(bs, all[i].raw)
			}
			var err error
			if b, _, err = reenc.Merge(nil, bs, transform.MergeHeader{ProducerID: w.pid, ProducerEpoch: w.epoch, BaseSequence: w.seq, Transactional: true}); err != nil {
				t.Fatal(err)
			}
		}
		dbase = w.append(b)
		runBase := all[idx[0]].base
		next := runBase
		for _, i := range idx {
			h, _ := transform.ParseHeader(all[i].raw)
			sb := all[i].base
			if sb != next {
				t.Fatalf("source batch %d at offset %d is not contiguous with the run's batch before (next offset %d)", i, sb, next)
			}
			next = sb + int64(h.LastOffsetDelta) + 1
			d := dbase + (sb - runBase)
			parts = append(parts, Span{From: sb, Base: sb, End: sb + int64(h.LastOffsetDelta) + 1, DstBase: d, DstEnd: d + int64(h.LastOffsetDelta) + 1})
		}
		return dbase, parts
	}
	commitRuns := func(w *txnWriter, runs ...[]int) {
		var spans []Span
		for _, r := range runs {
			_, ps := appendRun(w, r...)
			spans = append(spans, ps...)
		}
		w.end(true)
		for _, sp := range spans {
			for o := sp.Base; o < sp.End; o++ {
				x.mirror[o] = sp.DstBase + (o - sp.Base)
			}
		}
		x.spans = append(x.spans, spans...)
		x.cks = append(x.cks, [2]int64{spans[len(spans)-1].End, endOf(t, dcl)})
	}
	// Source batch indexes: 0-3 plain, 4-5 the first transaction, 6-7
	// plain, (an aborted transaction), 8-11 plain, 12 a transaction, 13
	// plain, 14 its copy, 15 plain.
	s1 := newTxnWriter(t, dcl, "mirror")
	commitRuns(s1, []int{0, 1, 2}, []int{3}, []int{4, 5})
	// A session that crashes inside its transaction.
	appendRun(s1, 6, 7)
	appendRun(s1, 8, 9)
	s2 := newTxnWriter(t, dcl, "mirror") // aborts s1's transaction
	commitRuns(s2, []int{6}, []int{7}, []int{8, 9, 10})
	commitRuns(s2, []int{11, 12}, []int{13}, []int{14, 15})

	x.srcEnd, x.dstEnd = endOf(t, scl), endOf(t, dcl)
	for _, s := range all {
		h, _ := transform.ParseHeader(s.raw)
		for o := s.base; o < s.base+int64(h.LastOffsetDelta)+1; o++ {
			x.committed = append(x.committed, o)
		}
	}
	srcID, dstID := kafkatest.SourceClusterID, kafkatest.DestClusterID
	region, _ := transform.RegionOf(srcID)
	x.logs = &Logs{Source: NewCluster(kafkatest.Client(t, src)), Destination: NewCluster(kafkatest.Client(t, dst)),
		From: twin.Source{Cluster: srcID, Region: region, Returns: transform.ReturnsOf(srcID, dstID, false, false)}, Stamped: true}
	pr, err := x.logs.Pair(context.Background(), coalesceTopic, tp.Key{Topic: coalesceTopic})
	if err != nil {
		t.Fatal(err)
	}
	x.pair, x.srcAdm = pr, kadm.NewClient(kafkatest.Client(t, src))
	return x
}

// endOf is the partition's high watermark.
func endOf(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	offs, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), coalesceTopic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := offs.Lookup(coalesceTopic, 0)
	return o.Offset
}

// want is the destination offset a consumer at source position p resumes
// at: the mirror of the first committed source record at or after p, or
// the destination's end.
func (x *coalesced) want(p int64) int64 {
	for _, o := range x.committed {
		if o >= p {
			return x.mirror[o]
		}
	}
	return x.dstEnd
}

// anchor is the link's anchor at its head, with the window spans and the
// checkpoint ck (-1: none).
func (x *coalesced) anchor(spans []Span, ck int) Anchor {
	a := Anchor{Pair: x.pair, Head: true, SrcNext: x.srcEnd, DstNext: x.dstEnd, CkSrc: -1, CkDst: -1, Spans: spans}
	switch {
	case ck >= 0:
		a.CkSrc, a.CkDst = x.cks[ck][0], x.cks[ck][1]
	case ck == -2: // the walk from the start of both logs
		a.CkSrc, a.CkDst = 0, 0
	}
	return a
}

// Guards offset translation of a transactional link that coalesces runs
// of source batches into one destination batch (issue 23): every path
// (window, checkpoint walk, timestamp search) places every source position
// at the mirror of its first committed record, inside the runs too, for
// every codec, with aborted transactions at the source between runs and a
// crashed session's aborted appends (in other runs) at the destination.
func TestTranslateCoalesced(t *testing.T) {
	for codec, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(name, func(t *testing.T) {
			x := buildCoalesced(t, int8(codec))
			n := len(x.spans)
			ways := []struct {
				name string
				a    Anchor
				via  map[string]bool // the ways it may answer by
			}{
				{"window", x.anchor(x.spans, -1), map[string]bool{"window": true, "head": true}},
				{"walk", x.anchor(nil, -2), map[string]bool{"checkpoint": true, "head": true}},
				{"short-window", x.anchor(x.spans[n-3:], 0), map[string]bool{"window": true, "checkpoint": true, "timestamp": true, "head": true}},
				{"walk-from-checkpoint", x.anchor(nil, 1), map[string]bool{"checkpoint": true, "timestamp": true, "head": true}},
				{"timestamp", x.anchor(nil, -1), map[string]bool{"timestamp": true, "head": true}},
			}
			ctx := context.Background()
			for _, w := range ways {
				vias := map[string]int{}
				for p := int64(0); p <= x.srcEnd; p++ {
					got, err := x.logs.Translate(ctx, w.a, p)
					if err != nil || got.DestinationOffset != x.want(p) || !w.via[got.Via] {
						t.Errorf("%s: translate %d: %+v, %v; want %d", w.name, p, got, err, x.want(p))
						continue
					}
					vias[got.Via]++
				}
				t.Logf("%s: %v", w.name, vias)
			}
		})
	}
}

// Guards the group translation of a coalesced link: a group's committed
// offset inside a run translates to its mirror there.
func TestTranslateCoalescedGroup(t *testing.T) {
	x := buildCoalesced(t, 3)
	ctx := context.Background()
	p := x.spans[1].Base + 1 // the first run's third batch
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: coalesceTopic, Partition: 0, At: p, LeaderEpoch: -1})
	if _, err := x.srcAdm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	g, err := Group(ctx, x.srcAdm, "g", func(string) bool { return true }, func(ctx context.Context, topic string, partition int32, offset int64) (Result, error) {
		return x.logs.Translate(ctx, x.anchor(nil, -1), offset)
	})
	if err != nil || len(g.Partitions) != 1 || g.Failed() != 0 || g.Partitions[0].DestinationOffset != x.want(p) {
		t.Fatalf("group: %+v, %v; want %d", g, err, x.want(p))
	}
}

// Guards translation after the source's cleaner cut a batch inside a run
// the link had coalesced: the batch no longer is what the link appended as
// a part of the run, nothing confirms which records of the run came from
// it, and the positions from it to the run's end must be
// ErrUntranslatable, never an offset guessed from the records that remain
// (positions in the run's batch before it, and after the run, stay exact).
func TestTranslateCoalescedCut(t *testing.T) {
	src := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, coalesceTopic))
	dst := kafkatest.NewCluster(t, kafkatest.DestClusterID, kfake.SeedTopics(1, coalesceTopic))
	scl, dcl := rawClient(t, src), rawClient(t, dst)
	ctx := context.Background()
	compact := "compact"
	if _, err := kadm.NewClient(scl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &compact}}, coalesceTopic); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMilli()
	build := func(keys ...string) []byte {
		ts += 10
		rs := make([]batchtest.Record, len(keys))
		for i, k := range keys {
			rs[i] = batchtest.Record{Key: []byte(k), Value: fmt.Appendf(nil, "%s@%d", k, ts), TimestampDelta: int64(i), OffsetDelta: -1}
		}
		return batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, Codec: 4, FirstTimestamp: ts, Records: rs})
	}
	a, b, c := build("a0", "a1", "a2"), build("b0", "b1", "b2"), build("c0", "c1", "c2")
	for _, x := range [][]byte{a, b, c} {
		produceBatch(t, scl, nil, x)
	}
	w := newTxnWriter(t, dcl, "mirror")
	run, _, err := transform.NewReencoder().Merge(nil, [][]byte{a, b, c}, transform.MergeHeader{ProducerID: w.pid, ProducerEpoch: w.epoch, BaseSequence: w.seq, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	w.append(run) // source offsets 0-8 at destination offsets 0-8
	w.end(true)
	e, f := build("b0"), build("f0") // e overwrites b0: the cleaner cuts it out of b
	produceBatch(t, scl, nil, e)     // source offset 9
	produceBatch(t, scl, nil, f)     // source offset 10
	w.append(e)                      // destination 10 (9 is the marker)
	w.append(f)                      // destination 11
	w.end(true)
	src.Compact()

	logs := &Logs{Source: NewCluster(kafkatest.Client(t, src)), Destination: NewCluster(kafkatest.Client(t, dst)),
		From: twin.Source{Cluster: kafkatest.SourceClusterID}, Stamped: true}
	pr, err := logs.Pair(ctx, coalesceTopic, tp.Key{Topic: coalesceTopic})
	if err != nil {
		t.Fatal(err)
	}
	srcEnd, dstEnd := endOf(t, scl), endOf(t, dcl)
	if srcEnd != 11 || dstEnd != 13 {
		t.Fatalf("source end %d, destination end %d; want 11 and 13", srcEnd, dstEnd)
	}
	wants := map[int64]int64{0: 0, 1: 1, 2: 2, 9: 10, 10: 11, 11: 13}
	for p := range srcEnd + 1 {
		got, err := logs.Translate(ctx, Anchor{Pair: pr, Head: true, SrcNext: srcEnd, DstNext: dstEnd, CkSrc: -1, CkDst: -1}, p)
		want, exact := wants[p]
		switch {
		case exact && (err != nil || got.DestinationOffset != want):
			t.Errorf("translate %d: %+v, %v; want %d", p, got, err, want)
		case !exact && !errors.Is(err, ErrUntranslatable):
			t.Errorf("translate %d: %+v, %v; want ErrUntranslatable", p, got, err)
		}
	}
}

// Guards translation after the source's log start moved into a run the
// link had coalesced (DeleteRecords, retention): the source returns the
// batch that holds its log start whole, so the run's batches from there
// are still what the link appended, and every position from the log start
// on translates to its mirror by every way, the timestamp search too
// (which checks a run from where it begins at the source: below the log
// start it reads from the log start, where the batch it finds must begin
// at the run's place). A position below the log start is the log start's.
func TestTranslateCoalescedLogStart(t *testing.T) {
	// The first run holds source batches 0-2 (offsets 0-2, 3 and 4-7).
	for _, start := range []int64{1, 3, 5} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			x := buildCoalesced(t, 3)
			ctx := context.Background()
			offs := kadm.Offsets{}
			offs.Add(kadm.Offset{Topic: coalesceTopic, Partition: 0, At: start, LeaderEpoch: -1})
			resp, err := x.srcAdm.DeleteRecords(ctx, offs)
			if err != nil {
				t.Fatal(err)
			}
			if err := resp.Error(); err != nil {
				t.Fatal(err)
			}
			n := len(x.spans)
			ways := []struct {
				name string
				a    Anchor
			}{
				{"window", x.anchor(x.spans, -1)},
				{"short-window", x.anchor(x.spans[n-3:], 0)},
				{"timestamp", x.anchor(nil, -1)},
			}
			for _, w := range ways {
				vias := map[string]int{}
				for p := int64(0); p <= x.srcEnd; p++ {
					got, err := x.logs.Translate(ctx, w.a, p)
					if want := x.want(max(p, start)); err != nil || got.DestinationOffset != want {
						t.Errorf("%s: translate %d: %+v, %v; want %d", w.name, p, got, err, want)
						continue
					}
					vias[got.Via]++
				}
				t.Logf("%s: %v", w.name, vias)
			}
		})
	}
}
