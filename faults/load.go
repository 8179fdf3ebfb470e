package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Ledger is what the load's producers were told: acknowledged records
// (committed, for a transaction), records of aborted transactions, and
// records whose fate a producer could not learn (an error after the
// request may have been written, a commit whose answer was lost). Keys are
// "topic/key"; every key is produced once.
type Ledger struct {
	mu        sync.Mutex
	acked     map[string]bool
	aborted   map[string]bool
	uncertain map[string]bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{acked: map[string]bool{}, aborted: map[string]bool{}, uncertain: map[string]bool{}}
}

func (l *Ledger) add(m map[string]bool, recs []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		m[r.Topic+"/"+string(r.Key)] = true
	}
}

// Counts returns how many records are acknowledged, aborted and uncertain.
func (l *Ledger) Counts() (acked, aborted, uncertain int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.aborted), len(l.uncertain)
}

// Kind is a producer of the load.
type Kind struct {
	Name          string
	Transactional bool
	Idempotent    bool
	Codec         kgo.CompressionCodec
}

// Kinds are the load's producers: idempotent (lz4, zstd), transactional
// with every third transaction aborted (snappy), and plain at acks=all
// without idempotence (gzip), whose retries may write a record twice at
// the source: the mirror must then hold it twice too.
var Kinds = []Kind{
	{Name: "idem-lz4", Idempotent: true, Codec: kgo.Lz4Compression()},
	{Name: "idem-zstd", Idempotent: true, Codec: kgo.ZstdCompression()},
	{Name: "txn-snappy", Transactional: true, Idempotent: true, Codec: kgo.SnappyCompression()},
	{Name: "plain-gzip", Codec: kgo.GzipCompression()},
}

// Load is one producer per Kind writing the topics in rounds until Stop.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	rounds atomic.Int64
	errs   atomic.Int64
	mu     sync.Mutex
	last   error
}

// LoadConfig says what the load writes.
//
// The defaults make a steady, moderate load (at most 400 records a second
// from the four producers, batches of about eleven records per partition) that
// the mirror outruns between faults. An unthrottled load of small batches
// from four producers at once does not leave it that room: mirrord keeps
// one batch per partition in flight and copies the source's batches as
// they are, so four producers each with a batch in flight per partition
// append up to four times as many batches per round trip as it can (the
// first run of the suite, with 50 records per round and 20 ms pauses, left
// it 690,000 records behind after 17 minutes). That is the small-batch
// limit bench/README.md measures, not what this suite is for.
type LoadConfig struct {
	Addrs    []string // the source's bootstrap servers
	Topics   []string
	Records  int           // per round and producer (default 100)
	Pause    time.Duration // between rounds (default 1s)
	Prefix   string        // of every key (e.g. the run's name)
	Ledger   *Ledger
	Producer []kgo.Opt // more options for every producer
}

// StartLoad starts the producers.
func StartLoad(cfg LoadConfig) (*Load, error) {
	if cfg.Records <= 0 {
		cfg.Records = 100
	}
	if cfg.Pause <= 0 {
		cfg.Pause = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel}
	var clients []*kgo.Client
	for _, k := range Kinds {
		opts := append([]kgo.Opt{
			kgo.SeedBrokers(cfg.Addrs...),
			kgo.ProducerBatchCompression(k.Codec),
			kgo.ProducerLinger(2 * time.Millisecond),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MetadataMinAge(200 * time.Millisecond),
		}, cfg.Producer...)
		switch {
		case k.Transactional:
			opts = append(opts, kgo.TransactionalID(cfg.Prefix+"-"+k.Name), kgo.TransactionTimeout(20*time.Second))
		case !k.Idempotent:
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			cancel()
			for _, c := range clients {
				c.Close()
			}
			return nil, err
		}
		clients = append(clients, cl)
	}
	for i, k := range Kinds {
		cl := clients[i]
		l.wg.Go(func() {
			defer cl.Close()
			l.produce(ctx, cl, k, cfg)
		})
	}
	return l, nil
}

// Stop ends the load after the rounds in flight and waits for it.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Rounds is how many rounds the producers completed; Errors how many ended
// with an error (retried, their records counted as uncertain).
func (l *Load) Rounds() int64 { return l.rounds.Load() }

// Errors is how many rounds ended with an error, and the last error.
func (l *Load) Errors() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs.Load(), l.last
}

func (l *Load) fail(err error) {
	l.errs.Add(1)
	l.mu.Lock()
	l.last = err
	l.mu.Unlock()
}

func (l *Load) produce(ctx context.Context, cl *kgo.Client, k Kind, cfg LoadConfig) {
	for round := 0; ctx.Err() == nil; round++ {
		var recs []*kgo.Record
		for i := range cfg.Records {
			recs = append(recs, &kgo.Record{
				Topic: cfg.Topics[i%len(cfg.Topics)],
				Key:   fmt.Appendf(nil, "%s-%s-%06d-%04d", cfg.Prefix, k.Name, round, i),
				Value: fmt.Appendf(nil, "round %d record %d of %s: %s", round, i, k.Name, "a payload that compresses somewhat, somewhat, somewhat"),
				Headers: []kgo.RecordHeader{
					{Key: "producer", Value: []byte(k.Name)},
					{Key: "round", Value: fmt.Appendf(nil, "%d", round)},
				},
			})
		}
		// Rounds in flight finish even after Stop: their fate must be
		// known. A round is bounded by the producer's own timeouts.
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := l.round(pctx, cl, k, round, recs, cfg.Ledger)
		cancel()
		if err != nil {
			l.fail(fmt.Errorf("%s round %d: %w", k.Name, round, err))
		}
		l.rounds.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Pause):
		}
	}
}

// round produces one round; transactional rounds abort every third.
func (l *Load) round(ctx context.Context, cl *kgo.Client, k Kind, round int, recs []*kgo.Record, led *Ledger) error {
	if !k.Transactional {
		res := cl.ProduceSync(ctx, recs...)
		var ok, bad []*kgo.Record
		for _, r := range res {
			if r.Err == nil {
				ok = append(ok, r.Record)
			} else {
				bad = append(bad, r.Record)
			}
		}
		led.add(led.acked, ok)
		led.add(led.uncertain, bad)
		return res.FirstErr()
	}
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	produceErr := cl.ProduceSync(ctx, recs...).FirstErr()
	commit := round%3 != 2 && produceErr == nil
	err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	switch {
	case err == nil && commit:
		led.add(led.acked, recs)
	case err == nil:
		led.add(led.aborted, recs)
	default:
		// The outcome of a failed end is not known to the producer.
		led.add(led.uncertain, recs)
		// kgo needs an abort (or a fresh producer ID) before the next
		// transaction after most errors.
		if abortErr := cl.AbortBufferedRecords(ctx); abortErr != nil {
			err = errors.Join(err, abortErr)
		}
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
	}
	return errors.Join(produceErr, err)
}
