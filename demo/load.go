package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Kinds of producers in the load.
const (
	Idempotent    = "idempotent"    // kgo's default: idempotent, acks=all
	Transactional = "transactional" // transactions over several partitions, one in AbortEvery aborted
	Plain         = "plain"         // idempotence disabled: PID -1 at the source
)

// TxnRecords is how many records one transaction writes; they spread over
// several topics and partitions. AbortEvery: every AbortEvery-th
// transaction of a producer is aborted.
const (
	TxnRecords = 8
	AbortEvery = 4
)

// chunkRecords is how many records a non-transactional producer sends in
// one ProduceSync.
const chunkRecords = 64

// Producer is one producer of the load.
type Producer struct {
	Name      string // also the prefix of its record keys
	Kind      string // Idempotent, Transactional or Plain
	CodecName string
	Codec     kgo.CompressionCodec
}

// Producers are the load's producers: idempotent ones over every codec,
// two transactional ones and a plain one.
var Producers = []Producer{
	{Name: "idempotent-lz4", Kind: Idempotent, CodecName: "lz4", Codec: kgo.Lz4Compression()},
	{Name: "idempotent-zstd", Kind: Idempotent, CodecName: "zstd", Codec: kgo.ZstdCompression()},
	{Name: "idempotent-snappy", Kind: Idempotent, CodecName: "snappy", Codec: kgo.SnappyCompression()},
	{Name: "idempotent-gzip", Kind: Idempotent, CodecName: "gzip", Codec: kgo.GzipCompression()},
	{Name: "idempotent-none", Kind: Idempotent, CodecName: "none", Codec: kgo.NoCompression()},
	{Name: "transactional-zstd", Kind: Transactional, CodecName: "zstd", Codec: kgo.ZstdCompression()},
	{Name: "transactional-lz4", Kind: Transactional, CodecName: "lz4", Codec: kgo.Lz4Compression()},
	{Name: "plain-snappy", Kind: Plain, CodecName: "snappy", Codec: kgo.SnappyCompression()},
}

// Counts are the load's records and transactions so far. A record counts
// once its producer has it acknowledged (idempotent, plain) or its
// transaction ended (transactional).
type Counts struct {
	Committed, Aborted         int64 // records
	CommittedTxns, AbortedTxns int64
}

// Produced is the sum of committed and aborted records.
func (c Counts) Produced() int64 { return c.Committed + c.Aborted }

// load runs the producers. Its counters are read by the progress loop
// while it runs.
type load struct {
	seeds      []string
	rate       float64  // records per second over all producers; 0: unpaced
	shares     []budget // per producer, so that a limit still gives every kind its part
	onProduced func(committed bool, recs []*kgo.Record)

	committed, aborted         atomic.Int64
	committedTxns, abortedTxns atomic.Int64

	stopOnce sync.Once
	stopCh   chan struct{} // closed: producers finish their chunk and return
}

func newLoad(seeds []string, rate float64, maxRecords int64, onProduced func(bool, []*kgo.Record)) *load {
	l := &load{seeds: seeds, rate: rate, onProduced: onProduced, stopCh: make(chan struct{})}
	l.shares = make([]budget, len(Producers))
	for i, n := range splitRecords(maxRecords, len(Producers)) {
		l.shares[i] = budget{unlimited: maxRecords == 0, left: n}
	}
	return l
}

func (l *load) counts() Counts {
	return Counts{
		Committed: l.committed.Load(), Aborted: l.aborted.Load(),
		CommittedTxns: l.committedTxns.Load(), AbortedTxns: l.abortedTxns.Load(),
	}
}

// stop asks every producer to return after the chunk or transaction it is
// writing. It may be called more than once.
func (l *load) stop() { l.stopOnce.Do(func() { close(l.stopCh) }) }

func (l *load) stopped() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// run runs every producer until stop, the record budget is spent, a
// producer fails or ctx ends, and waits for them. A failing producer stops
// the others at their next chunk; its error is returned. ctx ending
// interrupts producers mid-transaction, which then fail.
func (l *load) run(ctx context.Context) error {
	var g errgroup.Group
	share := l.rate / float64(len(Producers))
	for i, p := range Producers {
		g.Go(func() error {
			err := l.produce(ctx, p, share, &l.shares[i])
			if err != nil {
				l.stop()
				return fmt.Errorf("producer %s: %w", p.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// produce runs one producer at about rate records per second (0: as fast
// as it can).
func (l *load) produce(ctx context.Context, p Producer, rate float64, b *budget) error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(l.seeds...),
		kgo.ClientID("mirrord-demo-" + p.Name),
		kgo.ProducerBatchCompression(p.Codec),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	switch p.Kind {
	case Transactional:
		opts = append(opts, kgo.TransactionalID("mirrord-demo-"+p.Name))
	case Plain:
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	start := time.Now()
	var seq, txn int
	for !l.stopped() {
		if rate > 0 {
			due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second)))
			if !l.sleepUntil(ctx, due) {
				return nil
			}
		}
		size := chunkRecords
		if p.Kind == Transactional {
			size = TxnRecords
		}
		n := b.take(size)
		if n == 0 {
			return nil
		}
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = newRecord(p, seq+i)
		}
		seq += n
		if p.Kind != Transactional {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return err
			}
			l.count(true, recs)
			continue
		}
		commit := txn%AbortEvery != AbortEvery-1
		txn++
		if err := l.transaction(ctx, cl, recs, commit); err != nil {
			return err
		}
	}
	return nil
}

// transaction writes recs in one transaction and commits or aborts it.
func (l *load) transaction(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, commit bool) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return errors.Join(err, cl.EndTransaction(abortCtx, kgo.TryAbort))
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return fmt.Errorf("end transaction (commit %t): %w", commit, err)
	}
	if commit {
		l.committedTxns.Add(1)
	} else {
		l.abortedTxns.Add(1)
	}
	l.count(commit, recs)
	return nil
}

// count adds recs to the committed or aborted totals and tells
// onProduced.
func (l *load) count(committed bool, recs []*kgo.Record) {
	if committed {
		l.committed.Add(int64(len(recs)))
	} else {
		l.aborted.Add(int64(len(recs)))
	}
	if l.onProduced != nil {
		l.onProduced(committed, recs)
	}
}

// sleepUntil waits for t; false if the load was stopped or ctx ended first.
func (l *load) sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-l.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// splitRecords divides a record limit among n producers as evenly as it
// goes.
func splitRecords(limit int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = limit / int64(n)
		if int64(i) < limit%int64(n) {
			out[i]++
		}
	}
	return out
}

// budget is what one producer may still produce. Only its producer's
// goroutine uses it.
type budget struct {
	unlimited bool
	left      int64
}

// take reserves up to n records and returns how many it got (0: spent).
func (b *budget) take(n int) int {
	if b.unlimited {
		return n
	}
	k := min(b.left, int64(n))
	b.left -= k
	return int(k)
}

// topicCycle spreads records over the topics in proportion to their
// partition counts.
var topicCycle = func() []string {
	var out []string
	for _, t := range Topics {
		for range t.Partitions {
			out = append(out, t.Name)
		}
	}
	return out
}()

var words = strings.Fields("mirror broker partition offset leader replica batch record producer epoch sequence " +
	"transaction marker compaction checkpoint barrier salt region session lease fence")

// newRecord is record number seq of producer p: a key unique to the
// producer, a compressible JSON value of about 200 bytes, and headers.
func newRecord(p Producer, seq int) *kgo.Record {
	topic := topicCycle[seq%len(topicCycle)]
	var note strings.Builder
	for i := range 12 {
		if i > 0 {
			note.WriteByte(' ')
		}
		note.WriteString(words[(seq*7+i*i)%len(words)])
	}
	return &kgo.Record{
		Topic: topic,
		Key:   fmt.Appendf(nil, "%s-%08d", p.Name, seq),
		Value: fmt.Appendf(nil, `{"producer":%q,"kind":%q,"codec":%q,"seq":%d,"topic":%q,"amount_cents":%d,"note":%q}`,
			p.Name, p.Kind, p.CodecName, seq, topic, (seq*7919)%100000, note.String()),
		Headers: []kgo.RecordHeader{
			{Key: "producer", Value: []byte(p.Name)},
			{Key: "seq", Value: fmt.Appendf(nil, "%d", seq)},
		},
	}
}
