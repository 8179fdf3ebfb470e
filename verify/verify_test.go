package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

const srcTopic = "orders"

// fixture is a source cluster with a topic written by idempotent,
// transactional (some aborted) and plain producers over all five codecs,
// and a destination cluster.
type fixture struct {
	srcC, dstC *kfake.Cluster
	src, dst   *kgo.Client
	partitions int32
	batches    map[int32][]*mbatch // every source batch, as fetched
}

// tsBase is recent: brokers apply retention.ms (7 days by default) to
// record timestamps.
var tsBase = time.Now().Add(-time.Hour).Truncate(time.Millisecond)

// testRecord makes a compressible record with a mix of null and empty
// keys, values and headers.
func testRecord(kind string, round, p, i int, ts time.Time) *kgo.Record {
	r := &kgo.Record{
		Partition: int32(p),
		Key:       fmt.Appendf(nil, "%s-%d-%d-%d", kind, round, p, i),
		Value:     fmt.Appendf(nil, "value %s %d %d %d %s", kind, round, p, i, strings.Repeat("abcdefgh", 8)),
		Timestamp: ts,
	}
	switch {
	case i%7 == 3:
		r.Key = nil
	case i%7 == 5:
		r.Key = []byte{}
	}
	switch {
	case i%11 == 4:
		r.Value = nil
	case i%11 == 6:
		r.Value = []byte{}
	}
	if i%3 == 0 {
		r.Headers = []kgo.RecordHeader{{Key: "trace", Value: fmt.Appendf(nil, "t-%d", i)}, {Key: "null"}, {Key: "empty", Value: []byte{}}}
	}
	return r
}

// produceMixed writes rounds of records to every partition of topic from
// five producers: idempotent (lz4), transactional (zstd; every third
// transaction aborted, and the last one), and plain (gzip, snappy, none).
// It returns how many records it wrote as committed.
func produceMixed(t testing.TB, c *kfake.Cluster, topic string, partitions int32, rounds, perPartition int) int {
	t.Helper()
	ctx := testCtx(t)
	common := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	idem := kafkatest.Client(t, c, append(common, kgo.ProducerBatchCompression(kgo.Lz4Compression()))...)
	txn := kafkatest.Client(t, c, append(common, kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.TransactionalID("verify-"+topic))...)
	plain := map[string]*kgo.Client{
		"gzip":   kafkatest.Client(t, c, append(common, kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.GzipCompression()))...),
		"snappy": kafkatest.Client(t, c, append(common, kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.SnappyCompression()))...),
		"none":   kafkatest.Client(t, c, append(common, kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.NoCompression()))...),
	}
	ts := tsBase
	records := func(kind string, round int) []*kgo.Record {
		var rs []*kgo.Record
		for p := range int(partitions) {
			for i := range perPartition {
				ts = ts.Add(time.Millisecond)
				rs = append(rs, testRecord(kind, round, p, i, ts))
			}
		}
		return rs
	}
	produce := func(cl *kgo.Client, rs []*kgo.Record) {
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
	committed := 0
	for round := range rounds {
		produce(idem, records("idem", round))
		committed += int(partitions) * perPartition

		abort := round%3 == 1 || round == rounds-1
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(txn, records("txn", round))
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
		if !abort {
			committed += int(partitions) * perPartition
		}

		for _, kind := range []string{"gzip", "snappy", "none"} {
			produce(plain[kind], records(kind, round))
			committed += int(partitions) * perPartition
		}
	}
	return committed
}

func newFixture(t testing.TB, partitions int32, rounds, perPartition int, opts ...kfake.Opt) *fixture {
	t.Helper()
	srcC, dstC := kafkatest.Pair(t, opts...)
	f := &fixture{
		srcC: srcC, dstC: dstC,
		src: kafkatest.Client(t, srcC), dst: kafkatest.Client(t, dstC),
		partitions: partitions,
		batches:    make(map[int32][]*mbatch),
	}
	createTopic(t, f.src, srcTopic, partitions, nil)
	produceMixed(t, srcC, srcTopic, partitions, rounds, perPartition)
	for p := range partitions {
		f.batches[p] = fetchSource(t, f.src, srcTopic, p)
	}
	return f
}

// kept is the test mirror's output for each partition: the committed
// batches with mapped PIDs.
func (f *fixture) kept() map[int32][]*mbatch {
	out := make(map[int32][]*mbatch)
	for p, bs := range f.batches {
		out[p] = keptBatches(bs, testRegion)
	}
	return out
}

// mirror creates topic at the destination and appends the batches.
func (f *fixture) mirror(t testing.TB, topic string, partitions int32, parts map[int32][]*mbatch) {
	t.Helper()
	createTopic(t, f.dst, topic, partitions, nil)
	for p, bs := range parts {
		if p < partitions {
			produceBatches(t, f.dst, topic, p, bs)
		}
	}
}

func (f *fixture) config(dstTopic string) Config {
	return Config{
		Source: f.src, Destination: f.dst,
		Topics:          map[string]string{srcTopic: dstTopic},
		SourceClusterID: kafkatest.SourceClusterID,
	}
}

// consumeCommitted counts a partition's committed records with a kgo
// read_committed consumer, independently of verify's reader: until the
// record at lastOffset.
func consumeCommitted(t testing.TB, c *kfake.Cluster, topic string, p int32, lastOffset int64) int64 {
	t.Helper()
	ctx := testCtx(t)
	cl := kafkatest.Client(t, c,
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	var n int64
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s[%d]: %v", topic, p, err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			n++
			done = done || r.Offset >= lastOffset
		})
		if done {
			return n
		}
	}
}

// A faithful mirror of idempotent, transactional (with aborts) and plain
// producers over all codecs shows no difference, and verify compares every
// committed record: no more (aborted, control), no less.
func TestRunExactMirror(t *testing.T) {
	f := newFixture(t, 3, 6, 12, kfake.NumBrokers(3))
	kept := f.kept()

	codecs := make(map[int8]bool)
	var aborted, txnKept, idem, plain int
	for p := range f.partitions {
		for _, b := range f.batches[p] {
			switch {
			case b.kind == kindAborted:
				aborted++
			case b.kind == kindKept && b.hdr.Transactional():
				txnKept++
			case b.kind == kindKept && b.hdr.ProducerID >= 0:
				idem++
			case b.kind == kindKept:
				plain++
			}
			if b.kind == kindKept {
				codecs[b.hdr.Compression()] = true
			}
		}
	}
	if len(codecs) != 5 || aborted == 0 || txnKept == 0 || idem == 0 || plain == 0 {
		t.Fatalf("fixture lacks variety: codecs %v, aborted %d, committed txn %d, idempotent %d, plain %d batches",
			codecs, aborted, txnKept, idem, plain)
	}

	// A transaction left open at the end: verify must stop at the last
	// stable offset, below it.
	open := kafkatest.Client(t, f.srcC, kgo.DefaultProduceTopic(srcTopic), kgo.TransactionalID("open"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(testCtx(t), &kgo.Record{Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	f.mirror(t, srcTopic, f.partitions, kept)
	// Each partition led by another broker, on both sides.
	for p := range f.partitions {
		for _, c := range []*kfake.Cluster{f.srcC, f.dstC} {
			if err := c.MoveTopicPartition(srcTopic, p, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := Run(testCtx(t), f.config(srcTopic))
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil {
		t.Fatalf("difference in an exact mirror: %v", rep.First)
	}
	hwm, err := kadm.NewClient(f.src).ListEndOffsets(testCtx(t), srcTopic)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := hwm.Lookup(srcTopic, 0); rep.Partitions[0].SourceEnd >= h.Offset {
		t.Fatalf("partition 0 read up to %d, the open transaction's high watermark is %d", rep.Partitions[0].SourceEnd, h.Offset)
	}
	if len(rep.Partitions) != int(f.partitions) {
		t.Fatalf("%d partition reports, want %d", len(rep.Partitions), f.partitions)
	}
	var total int64
	for p, pr := range rep.Partitions {
		bs := kept[int32(p)]
		last := bs[len(bs)-1]
		want := consumeCommitted(t, f.srcC, srcTopic, int32(p), last.src[len(last.src)-1])
		if pr.Partition != int32(p) || pr.Records != want || pr.Records != countRecords(bs) || pr.Behind != 0 || pr.Difference != nil {
			t.Errorf("partition %d: %+v; want %d records (kgo read_committed consumer), %d mirrored", p, pr, want, countRecords(bs))
		}
		if pr.DestEnd != countRecords(bs) || pr.SourceEnd <= last.src[len(last.src)-1] {
			t.Errorf("partition %d: ends source %d, destination %d", p, pr.SourceEnd, pr.DestEnd)
		}
		total += pr.Records
	}
	if rep.Records != total {
		t.Errorf("report records %d, partitions sum to %d", rep.Records, total)
	}
}

type wantResult struct {
	partition int32
	field     string // "": no difference
	src, dst  int64
	behind    int64 // of the partition
}

// Each way of damaging the mirror is reported with the right field and
// offsets, and only the first in (topic, partition) order.
func TestRunReportsDifferences(t *testing.T) {
	f := newFixture(t, 3, 4, 6)
	thirdRegion, _ := transform.RegionOf(kafkatest.ThirdClusterID)

	// pick returns the index of the first batch from a third of the way
	// in that satisfies ok.
	pick := func(t *testing.T, bs []*mbatch, ok func(*mbatch) bool) int {
		for j := len(bs) / 3; j < len(bs); j++ {
			if ok(bs[j]) {
				return j
			}
		}
		t.Fatalf("no suitable batch among %v", bs)
		return -1
	}
	multi := func(b *mbatch) bool { return b.count() >= 3 }
	idempotent := func(b *mbatch) bool {
		return b.hdr.ProducerID >= 0 && !b.hdr.Transactional() && b.count() >= 2
	}
	const salt = 0x5a17

	tests := []struct {
		name  string
		edit  func(t *testing.T, parts map[int32][]*mbatch) wantResult
		parts int32 // destination partitions; 0: as many as the source
		salt  bool  // give Run the salt of partition 1's idempotent producer
	}{
		{name: "changed value", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			recs := bs[j].records(t)
			recs[1].value = []byte("corrupt")
			bs[j].edit(recs)
			return wantResult{1, FieldValue, bs[j].src[1], destOffset(bs, j, 1), 0}
		}},
		{name: "changed timestamp", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			recs := bs[j].records(t)
			recs[2].ts += 1000
			bs[j].edit(recs)
			return wantResult{1, FieldTimestamp, bs[j].src[2], destOffset(bs, j, 2), 0}
		}},
		{name: "record missing in the middle", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			missing := bs[j].src[1]
			bs[j].edit(slices.Delete(bs[j].records(t), 1, 2))
			bs[j].src = slices.Delete(bs[j].src, 1, 2)
			return wantResult{1, FieldMissing, missing, -1, 0}
		}},
		{name: "batch missing", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			missing := bs[j].src[0]
			parts[1] = slices.Delete(bs, j, j+1)
			return wantResult{1, FieldMissing, missing, -1, 0}
		}},
		{name: "extra record", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			recs := bs[j].records(t)
			bs[j].edit(slices.Insert(recs, 1, trecord{key: []byte("extra"), value: []byte("extra"), ts: recs[1].ts}))
			bs[j].src = slices.Insert(bs[j].src, 1, -1)
			return wantResult{1, FieldExtra, -1, destOffset(bs, j, 1), 0}
		}},
		{name: "batch duplicated", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			parts[1] = slices.Insert(bs, j+1, bs[j].clone())
			return wantResult{1, FieldExtra, -1, destOffset(parts[1], j+1, 0), 0}
		}},
		{name: "aborted batch mirrored", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			var ab *mbatch
			for _, b := range f.batches[1] {
				if b.kind == kindAborted {
					ab = b.clone()
					break
				}
			}
			if ab == nil {
				t.Fatal("no aborted batch in partition 1")
			}
			ab.pid = transform.MapPID(ab.hdr.ProducerID, testRegion)
			bs := parts[1]
			j := slices.IndexFunc(bs, func(b *mbatch) bool { return b.hdr.BaseOffset > ab.hdr.BaseOffset })
			parts[1] = slices.Insert(bs, j, ab)
			return wantResult{1, FieldExtra, -1, destOffset(parts[1], j, 0), 0}
		}},
		{name: "records reordered", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			recs := bs[j].records(t)
			recs[0], recs[1] = recs[1], recs[0]
			bs[j].edit(recs)
			return wantResult{1, FieldOrder, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "batches reordered", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			bs[j], bs[j+1] = bs[j+1], bs[j]
			return wantResult{1, FieldOrder, bs[j+1].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "unmapped pid", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, idempotent)
			bs[j].pid = bs[j].hdr.ProducerID
			return wantResult{1, FieldProducerID, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "pid mapped into the wrong region", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, idempotent)
			bs[j].pid = transform.MapPID(bs[j].hdr.ProducerID, thirdRegion)
			return wantResult{1, FieldProducerID, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "salted producer, salt not given", edit: saltProducer(salt), salt: false},
		{name: "salted producer, salt given", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			saltProducer(salt)(t, parts)
			return wantResult{}
		}, salt: true},
		{name: "different codec", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, multi)
			bs[j].edit(bs[j].records(t))
			bs[j].codec = (bs[j].hdr.Compression() + 1) % 5
			return wantResult{1, FieldCompression, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "different epoch", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, idempotent)
			bs[j].edit(bs[j].records(t))
			bs[j].hdr.ProducerEpoch++
			return wantResult{1, FieldProducerEpoch, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "batch split", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			j := pick(t, bs, idempotent)
			recs := bs[j].records(t)
			head, tail := bs[j].clone(), bs[j].clone()
			head.edit(recs[:1])
			head.src = head.src[:1]
			tail.edit(recs[1:])
			tail.src = tail.src[1:]
			tail.hdr.BaseSequence++
			parts[1] = slices.Replace(bs, j, j+1, head, tail)
			return wantResult{1, FieldBatch, tail.src[0], destOffset(parts[1], j+1, 0), 0}
		}},
		{name: "destination behind", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			parts[1] = bs[:len(bs)/2]
			return wantResult{1, "", 0, 0, countRecords(bs[len(bs)/2:])}
		}},
		{name: "extra record at the end", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			bs := parts[1]
			extra := bs[0].clone()
			extra.edit([]trecord{{key: []byte("late"), value: []byte("late"), ts: 1}})
			parts[1] = append(bs, extra)
			return wantResult{1, FieldExtra, -1, countRecords(bs), 0}
		}},
		{name: "first difference in partition order", edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			for _, p := range []int32{2, 1} {
				bs := parts[p]
				j := pick(t, bs, multi)
				recs := bs[j].records(t)
				recs[0].key = []byte("corrupt")
				bs[j].edit(recs)
			}
			bs := parts[1]
			j := pick(t, bs, multi)
			return wantResult{1, FieldKey, bs[j].src[0], destOffset(bs, j, 0), 0}
		}},
		{name: "destination partition missing", parts: 2, edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			return wantResult{2, FieldMissing, -1, -1, 0}
		}},
		{name: "destination partition the source lacks", parts: 4, edit: func(t *testing.T, parts map[int32][]*mbatch) wantResult {
			parts[3] = []*mbatch{parts[0][0].clone()}
			return wantResult{3, FieldExtra, -1, 0, 0}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := make(map[int32][]*mbatch)
			for p, bs := range f.kept() {
				parts[p] = cloneBatches(bs)
			}
			want := tc.edit(t, parts)
			dstTopic := fmt.Sprintf("case-%d", i)
			n := tc.parts
			if n == 0 {
				n = f.partitions
			}
			f.mirror(t, dstTopic, n, parts)

			cfg := f.config(dstTopic)
			if tc.salt {
				origin := transform.Origin{Cluster: kafkatest.SourceClusterID, PID: saltedPID(t, f.kept()[1])}
				dstID, _ := partitionInfo(t, f.dst, dstTopic, 1)
				cfg.Salt = func(k tp.Partition, o transform.Origin) (int64, bool) {
					return salt, k.Topic == dstTopic && k.ID == dstID && k.Partition == 1 && o == origin
				}
			}
			rep, err := Run(testCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, rep, dstTopic, want, n)
		})
	}
}

// saltedPID is the PID of partition 1's idempotent producer.
func saltedPID(t *testing.T, bs []*mbatch) int64 {
	for _, b := range bs {
		if b.hdr.ProducerID >= 0 && !b.hdr.Transactional() {
			return b.hdr.ProducerID
		}
	}
	t.Fatal("no idempotent producer in partition 1")
	return 0
}

// saltProducer maps every batch of partition 1's idempotent producer with
// a salt, as mirrord does after a collision.
func saltProducer(salt int64) func(t *testing.T, parts map[int32][]*mbatch) wantResult {
	return func(t *testing.T, parts map[int32][]*mbatch) wantResult {
		bs := parts[1]
		pid := saltedPID(t, bs)
		first := -1
		for j, b := range bs {
			if b.hdr.ProducerID == pid {
				b.pid = transform.MapPIDSalted(pid, testRegion, salt)
				if first < 0 {
					first = j
				}
			}
		}
		return wantResult{1, FieldProducerID, bs[first].src[0], destOffset(bs, first, 0), 0}
	}
}

func checkResult(t *testing.T, rep Report, dstTopic string, want wantResult, dstPartitions int32) {
	t.Helper()
	if want.field == "" {
		if rep.First != nil {
			t.Fatalf("unexpected difference: %v", rep.First)
		}
	} else {
		d := rep.First
		if d == nil {
			t.Fatalf("no difference; want %s in partition %d at source %d, destination %d", want.field, want.partition, want.src, want.dst)
		}
		if d.SourceTopic != srcTopic || d.DestTopic != dstTopic || d.Partition != want.partition ||
			d.Field != want.field || d.SourceOffset != want.src || d.DestOffset != want.dst {
			t.Fatalf("difference %s[%d]->%s[%d] %s at %d/%d (%v); want partition %d, %s at %d/%d",
				d.SourceTopic, d.Partition, d.DestTopic, d.Partition, d.Field, d.SourceOffset, d.DestOffset, d,
				want.partition, want.field, want.src, want.dst)
		}
		t.Logf("reported: %v", d)
	}
	var behind int64
	for _, pr := range rep.Partitions {
		if pr.Partition == want.partition {
			behind = pr.Behind
		}
	}
	if behind != want.behind || rep.Behind != want.behind {
		t.Fatalf("partition %d behind %d (report %d), want %d", want.partition, behind, rep.Behind, want.behind)
	}
	if n := max(int(dstPartitions), 3); len(rep.Partitions) != n {
		t.Fatalf("%d partition reports, want %d", len(rep.Partitions), n)
	}
	for i, pr := range rep.Partitions {
		if pr.Partition != int32(i) {
			t.Fatalf("report %d is partition %d: not in partition order", i, pr.Partition)
		}
	}
}

// A destination topic that does not exist is missing from its first
// partition on; a source topic that does not exist is an error.
func TestRunMissingTopics(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	src, dst := kafkatest.Client(t, srcC), kafkatest.Client(t, dstC)
	createTopic(t, src, "present", 2, nil)

	rep, err := Run(testCtx(t), Config{Source: src, Destination: dst, Topics: map[string]string{"present": "absent"}, SourceClusterID: kafkatest.SourceClusterID})
	if err != nil {
		t.Fatal(err)
	}
	if d := rep.First; d == nil || d.Field != FieldMissing || d.Partition != 0 || d.DestTopic != "absent" {
		t.Fatalf("first difference %v, want partition 0 missing", d)
	}
	if len(rep.Partitions) != 2 || rep.Partitions[1].Difference == nil || rep.Partitions[1].DestEnd != -1 {
		t.Fatalf("partition reports %+v", rep.Partitions)
	}

	_, err = Run(testCtx(t), Config{Source: src, Destination: dst, Topics: map[string]string{"nope": "present"}, SourceClusterID: kafkatest.SourceClusterID})
	if !errors.Is(err, ErrUnknownTopic) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown source topic: err = %v", err)
	}
}

// A compacted source has batches with offset gaps, which the mirror
// re-encodes densely; the records and batch boundaries still match.
func TestRunCompactedSource(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	f := &fixture{srcC: srcC, dstC: dstC, src: kafkatest.Client(t, srcC), dst: kafkatest.Client(t, dstC), partitions: 1, batches: map[int32][]*mbatch{}}
	compact := "compact"
	createTopic(t, f.src, srcTopic, 1, map[string]*string{"cleanup.policy": &compact})
	prod := kafkatest.Client(t, srcC, kgo.DefaultProduceTopic(srcTopic), kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	ctx := testCtx(t)
	for round := range 6 {
		var rs []*kgo.Record
		for i := range 10 {
			// Keys repeat across rounds: later rounds supersede
			// some records of earlier batches.
			key := fmt.Sprintf("key-%d", (i*7+round*3)%17)
			rs = append(rs, &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, "round %d %s", round, strings.Repeat("z", 40)), Timestamp: tsBase.Add(time.Duration(round*10+i) * time.Millisecond)})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	srcC.Compact()
	f.batches[0] = fetchSource(t, f.src, srcTopic, 0)
	kept := f.kept()
	gaps := 0
	for _, b := range kept[0] {
		if !b.hdr.Dense() {
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatalf("compaction left no batch with offset gaps in %v", kept[0])
	}
	f.mirror(t, "compacted", 1, kept)
	rep, err := Run(ctx, f.config("compacted"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != countRecords(kept[0]) {
		t.Fatalf("difference %v, %d records; want none, %d", rep.First, rep.Records, countRecords(kept[0]))
	}
}

// A preserve-delivery mirror that joined one idempotent producer's
// consecutive batches into one batch (coalescing) is the mirror, read and
// compared through real fetches; the same join of batches without a
// producer ID is a batch boundary difference at the second batch.
func TestRunPreserveJoined(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	f := &fixture{srcC: srcC, dstC: dstC, src: kafkatest.Client(t, srcC), dst: kafkatest.Client(t, dstC), partitions: 1, batches: map[int32][]*mbatch{}}
	createTopic(t, f.src, srcTopic, 1, nil)
	common := []kgo.Opt{kgo.DefaultProduceTopic(srcTopic), kgo.ProducerBatchCompression(kgo.Lz4Compression())}
	idem := kafkatest.Client(t, srcC, common...)
	plain := kafkatest.Client(t, srcC, append(common, kgo.DisableIdempotentWrite())...)
	ctx := testCtx(t)
	for i, cl := range []*kgo.Client{idem, idem, idem, plain, plain} {
		// One ProduceSync per batch: the batches of each producer are
		// consecutive, with contiguous offsets.
		var rs []*kgo.Record
		for k := range 2 + i%2 {
			rs = append(rs, testRecord("joined", i, 0, k, tsBase.Add(time.Duration(i*10+k)*time.Millisecond)))
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	f.batches[0] = fetchSource(t, f.src, srcTopic, 0)
	kept := f.kept()[0]
	firstPlain := slices.IndexFunc(kept, func(b *mbatch) bool { return b.hdr.ProducerID < 0 })
	if firstPlain < 2 || len(kept)-firstPlain < 2 {
		t.Fatalf("want two or more batches of each producer, idempotent first: %v", kept)
	}
	idemRun, plainRun := kept[:firstPlain], kept[firstPlain:]

	f.mirror(t, "joined", 1, map[int32][]*mbatch{0: append([]*mbatch{joinBatches(t, idemRun)}, cloneBatches(plainRun)...)})
	rep, err := Run(ctx, f.config("joined"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != countRecords(kept) {
		t.Fatalf("difference %v, %d records; want none, %d", rep.First, rep.Records, countRecords(kept))
	}

	dst := append(cloneBatches(idemRun), joinBatches(t, plainRun))
	f.mirror(t, "joined-plain", 1, map[int32][]*mbatch{0: dst})
	rep, err = Run(ctx, f.config("joined-plain"))
	if err != nil {
		t.Fatal(err)
	}
	d := rep.First
	wantSrc, wantDst := plainRun[1].src[0], destOffset(dst, firstPlain, plainRun[0].count())
	if d == nil || d.Field != FieldBatch || d.SourceOffset != wantSrc || d.DestOffset != wantDst {
		t.Fatalf("difference %v; want %s at source offset %d, destination offset %d", d, FieldBatch, wantSrc, wantDst)
	}
}

// joinBatches is the one batch preserve delivery's coalescing appends for
// a run of a producer's batches: all their records under the first
// batch's producer ID, epoch and base sequence.
func joinBatches(t testing.TB, run []*mbatch) *mbatch {
	t.Helper()
	var recs []trecord
	for _, b := range run {
		recs = append(recs, b.records(t)...)
	}
	joined := run[0].clone()
	joined.edit(recs)
	return joined
}

// Verify follows a leader error by refreshing metadata and fetching again;
// an error it cannot cure is returned, naming the partition and offset.
func TestRunFetchErrors(t *testing.T) {
	f := newFixture(t, 2, 1, 5)
	f.mirror(t, srcTopic, 2, f.kept())

	var notLeader atomic.Int32
	f.srcC.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		notLeader.Add(1)
		return fetchError(kreq.(*kmsg.FetchRequest), kerr.NotLeaderForPartition), nil, true
	})
	rep, err := Run(testCtx(t), f.config(srcTopic))
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || notLeader.Load() != 1 || rep.Records != countRecords(f.kept()[0])+countRecords(f.kept()[1]) {
		t.Fatalf("after NOT_LEADER: difference %v, %d records, %d errors injected", rep.First, rep.Records, notLeader.Load())
	}

	f.dstC.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		f.dstC.KeepControl()
		return fetchError(kreq.(*kmsg.FetchRequest), kerr.OffsetOutOfRange), nil, true
	})
	_, err = Run(testCtx(t), f.config(srcTopic))
	t.Logf("error: %v", err)
	if !errors.Is(err, kerr.OffsetOutOfRange) || !strings.Contains(err.Error(), "destination "+srcTopic+"[") || !strings.Contains(err.Error(), "at offset 0") {
		t.Fatalf("offset out of range: err = %v", err)
	}
}

// A batch that fails its CRC is an error (ErrCorrupt), not a difference.
func TestRunCorruptBatch(t *testing.T) {
	f := newFixture(t, 1, 1, 5)
	f.mirror(t, srcTopic, 1, f.kept())
	good := f.kept()[0][0].raw
	f.dstC.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		f.dstC.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		resp := fetchError(req, nil)
		bad := slices.Clone(good)
		bad[len(bad)-1] ^= 0xff
		resp.Topics[0].Partitions[0].RecordBatches = bad
		resp.Topics[0].Partitions[0].HighWatermark = 100
		return resp, nil, true
	})
	_, err := Run(testCtx(t), f.config(srcTopic))
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt batch: err = %v", err)
	}
}

// fetchError answers every partition of a fetch with err (nil: no error,
// no records).
func fetchError(req *kmsg.FetchRequest, err *kerr.Error) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			if err != nil {
				sp.ErrorCode = err.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// MaxRecords stops each partition early: a difference after the limit is
// not seen.
func TestRunMaxRecords(t *testing.T) {
	f := newFixture(t, 1, 2, 8)
	parts := f.kept()
	bs := parts[0]
	last := bs[len(bs)-1]
	recs := last.records(t)
	recs[len(recs)-1].value = []byte("corrupt")
	last.edit(recs)
	f.mirror(t, srcTopic, 1, parts)

	cfg := f.config(srcTopic)
	cfg.MaxRecords = countRecords(bs) - 1
	rep, err := Run(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != cfg.MaxRecords {
		t.Fatalf("with MaxRecords %d: difference %v, %d records", cfg.MaxRecords, rep.First, rep.Records)
	}
	cfg.MaxRecords = 0
	if rep, err = Run(testCtx(t), cfg); err != nil || rep.First == nil || rep.First.Field != FieldValue {
		t.Fatalf("without MaxRecords: %v, %v", rep.First, err)
	}
}

// Several topics are compared in one run; the first difference is the
// first in source topic order, then partition order.
func TestRunSeveralTopics(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	src, dst := kafkatest.Client(t, srcC), kafkatest.Client(t, dstC)
	topics := map[string]string{"alpha": "mirror.alpha", "beta": "mirror.beta"}
	for s, d := range topics {
		createTopic(t, src, s, 2, nil)
		produceMixed(t, srcC, s, 2, 2, 4)
		createTopic(t, dst, d, 2, nil)
		for p := range int32(2) {
			bs := keptBatches(fetchSource(t, src, s, p), testRegion)
			// Damage beta[0] and alpha[1]: alpha[1] is first.
			if s == "beta" && p == 0 || s == "alpha" && p == 1 {
				recs := bs[1].records(t)
				recs[0].headers = append(recs[0].headers, kmsg.Header{Key: "added"})
				bs[1].edit(recs)
			}
			produceBatches(t, dst, d, p, bs)
		}
	}
	rep, err := Run(testCtx(t), Config{Source: src, Destination: dst, Topics: topics, SourceClusterID: kafkatest.SourceClusterID, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := rep.First; d == nil || d.SourceTopic != "alpha" || d.DestTopic != "mirror.alpha" || d.Partition != 1 || d.Field != FieldHeaders {
		t.Fatalf("first difference %v, want headers in alpha[1]", d)
	}
	var order []string
	for _, pr := range rep.Partitions {
		order = append(order, fmt.Sprintf("%s[%d]", pr.SourceTopic, pr.Partition))
	}
	if want := []string{"alpha[0]", "alpha[1]", "beta[0]", "beta[1]"}; !slices.Equal(order, want) {
		t.Fatalf("partition order %v, want %v", order, want)
	}
	if pr := rep.Partitions[2]; pr.Difference == nil || pr.Difference.Field != FieldHeaders {
		t.Fatalf("beta[0]: difference %v, want headers", pr.Difference)
	}
}

// A context that ends stops Run with an error, not with a report that
// might read as "no difference".
func TestRunCancelled(t *testing.T) {
	f := newFixture(t, 2, 1, 5)
	f.mirror(t, srcTopic, 2, f.kept())
	// Hold the destination's first fetch until the context has ended.
	ctx, cancel := context.WithCancel(testCtx(t))
	f.dstC.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		cancel()
		f.dstC.KeepControl()
		return nil, errors.New("closing the connection"), true
	})
	rep, err := Run(ctx, f.config(srcTopic))
	t.Logf("error: %v", err)
	if !errors.Is(err, context.Canceled) || rep.First != nil || rep.Partitions != nil {
		t.Fatalf("cancelled run: report %+v, err %v", rep, err)
	}
}

// Aborted transactions spread over more bytes than one fetch returns: the
// partition limit cuts the response inside the partition, and the source
// must still be read as committed data only (the request limit must not be
// the binding one in kfake; see fetchRequestBytes).
func TestRunAbortedAcrossFetches(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	f := &fixture{srcC: srcC, dstC: dstC, src: kafkatest.Client(t, srcC), dst: kafkatest.Client(t, dstC), partitions: 1, batches: map[int32][]*mbatch{}}
	createTopic(t, f.src, srcTopic, 1, nil)
	txn := kafkatest.Client(t, srcC, kgo.DefaultProduceTopic(srcTopic), kgo.TransactionalID("big"),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx := testCtx(t)
	const value = 900 << 10 // one record per batch, about 4.5 fetches' worth of batches in all
	for i := range 20 {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		v := make([]byte, value)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		if err := txn.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "big-%d", i), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(i%2 == 0)); err != nil {
			t.Fatal(err)
		}
	}
	f.batches[0] = fetchSource(t, f.src, srcTopic, 0)
	kept := f.kept()
	if n := countRecords(kept[0]); n != 10 {
		t.Fatalf("test mirror kept %d records, want the 10 committed", n)
	}
	f.mirror(t, srcTopic, 1, kept)
	rep, err := Run(ctx, f.config(srcTopic))
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != 10 {
		t.Fatalf("difference %v, %d records; want none, 10", rep.First, rep.Records)
	}
}

// Verify expects at the destination only what the link sends (DESIGN
// §16): not the batches that started at the destination (the reverse
// link's copies, under the destination's region), and, with unattributed
// = "skip", not those without a producer ID. Without the rule the same
// mirror is reported missing those records.
func TestRunReturns(t *testing.T) {
	f := newFixture(t, 1, 4, 6)
	home, _ := transform.RegionOf(kafkatest.DestClusterID)
	upstream, _ := transform.RegionOf(kafkatest.ThirdClusterID)

	// A source partition that holds batches of an upstream mirror (the
	// third cluster's region), the reverse link's copies of destination
	// batches (the destination's region) and batches without a producer
	// ID, in turn.
	var at, mirror []*mbatch
	plain := 0
	for i, b := range keptBatches(f.batches[0], testRegion) {
		c := b.clone()
		switch {
		case b.hdr.ProducerID < 0:
			c.pid = -1
			plain++
		case i%2 == 0:
			c.pid = transform.MapPID(b.hdr.ProducerID, upstream)
			mirror = append(mirror, c)
		default:
			c.pid = transform.MapPID(b.hdr.ProducerID, home)
		}
		at = append(at, c)
	}
	if len(mirror) == 0 || len(mirror)+plain == len(at) || plain == 0 {
		t.Fatalf("fixture lacks variety: %d batches, %d forwarded, %d without producer ID", len(at), len(mirror), plain)
	}
	createTopic(t, f.src, "both", 1, nil)
	produceBatches(t, f.src, "both", 0, at)
	f.mirror(t, "both.mirror", 1, map[int32][]*mbatch{0: mirror})

	cfg := Config{Source: f.src, Destination: f.dst, Topics: map[string]string{"both": "both.mirror"}, SourceClusterID: kafkatest.SourceClusterID,
		Returns: transform.ReturnsOf(kafkatest.SourceClusterID, kafkatest.DestClusterID, false, true)}
	rep, err := Run(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != countRecords(mirror) {
		t.Fatalf("difference %v, %d records; want none, %d", rep.First, rep.Records, countRecords(mirror))
	}
	for _, r := range []transform.Returns{{}, transform.ReturnsOf(kafkatest.SourceClusterID, kafkatest.DestClusterID, true, true),
		transform.ReturnsOf(kafkatest.SourceClusterID, kafkatest.DestClusterID, false, false)} {
		cfg.Returns = r
		rep, err := Run(testCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.First == nil {
			t.Errorf("returns %+v: no difference, want the records the link does not send reported", r)
		}
	}

	// The destination's own producers write the mirror's topic too (an
	// idempotent one and a plain one, between the mirror's batches):
	// with SharedDestination their records are not the mirror's.
	cfg.Returns = transform.ReturnsOf(kafkatest.SourceClusterID, kafkatest.DestClusterID, false, true)
	for _, opts := range [][]kgo.Opt{nil, {kgo.DisableIdempotentWrite()}} {
		local := kafkatest.Client(t, f.dstC, append(opts, kgo.DefaultProduceTopic("both.mirror"))...)
		if err := local.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("local")}, &kgo.Record{Value: []byte("local too")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// And one more batch of the upstream mirror, after them.
	produceBatches(t, f.dst, "both.mirror", 0, mirror[:1])
	createTopic(t, f.src, "both2", 1, nil)
	produceBatches(t, f.src, "both2", 0, append(at, mirror[0]))
	mirror = append(mirror, mirror[0])
	cfg.Topics = map[string]string{"both2": "both.mirror"}
	if rep, err := Run(testCtx(t), cfg); err != nil || rep.First == nil {
		t.Fatalf("a shared destination compared whole: %v, %v; want its own records reported", rep.First, err)
	}
	cfg.SharedDestination = true
	rep, err = Run(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != nil || rep.Records != countRecords(mirror) {
		t.Fatalf("shared destination: difference %v, %d records; want none, %d", rep.First, rep.Records, countRecords(mirror))
	}
	cfg.Returns.SkipUnattributed = false
	if _, err := Run(testCtx(t), cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "SharedDestination") {
		t.Errorf("shared destination with unattributed forward: %v, want ErrInvalidConfig naming SharedDestination", err)
	}
}
