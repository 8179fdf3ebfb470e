package harness

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/bench/check"
	"github.com/seed83556561/mirrord/bench/load"
)

// ProfileLatency measures end-to-end latency instead of throughput: each
// run writes records at a steady rate into a fresh source topic that the
// mirror already follows, and a consumer at the destination notes when each
// record becomes visible there.
const ProfileLatency = "latency"

// Defaults of the latency profile.
const (
	DefaultLatencyRate     = 2000 // records per second: about 2 MB/s of the benchmark's records
	DefaultLatencyDuration = 20 * time.Second
	DefaultLatencyWarmup   = 5 * time.Second // after the first record shows at the destination
)

// LatencySample is one latency run of one mirror.
type LatencySample struct {
	Side, Codec string
	Run         int
	Records     int // records measured (produced after the warm-up)
	// P50, P99 and Max are of the time from a record's timestamp, taken
	// just before the source producer (linger 0) sent it, to its
	// visibility at the destination (a read_committed consumer's poll
	// returned it). SourceP50 and SourceP99 are of the same timestamp to
	// the source's acknowledgement (acks=all): the part of the latency that
	// is the source append itself.
	P50, P99, Max        time.Duration
	SourceP50, SourceP99 time.Duration
}

// latencyRun runs side over a fresh, empty source topic: it starts the
// mirror, produces at the configured rate for warm-up plus duration, then
// waits until the destination holds every record, stops the mirror and
// compares the topics record by record (with Verify).
func (b *bench) latencyRun(ctx context.Context, side, codec string, run, id int) (LatencySample, error) {
	ls := LatencySample{Side: side, Codec: codec, Run: run}
	srcTopic := fmt.Sprintf("lat.%s.r%d", codec, id)
	srcCl, err := b.src.PollClient()
	if err != nil {
		return ls, err
	}
	defer srcCl.Close()
	resp, err := kadm.NewClient(srcCl).CreateTopic(ctx, b.cfg.Partitions, 1, map[string]*string{"compression.type": new("producer")}, srcTopic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return ls, fmt.Errorf("bench: create %s: %w", srcTopic, err)
	}
	empty := SourceTopic{Topic: load.Topic{Name: srcTopic, Codec: codec, Partitions: b.cfg.Partitions}, Ends: make([]int64, b.cfg.Partitions)}
	if err := load.WaitLeaders(ctx, kadm.NewClient(srcCl), []load.Topic{empty.Topic}); err != nil {
		return ls, err
	}
	m, err := b.command(side, empty, id)
	if err != nil {
		return ls, err
	}
	m.delSrc = append(m.delSrc, srcTopic)
	logPath := filepath.Join(b.cfg.WorkDir, "logs", fmt.Sprintf("r%d-%s-%s-latency.log", id, side, codec))
	p, err := start(side, m.bin, m.args, logPath, nil, true)
	if err != nil {
		return ls, err
	}
	defer func() { _, _ = p.stopAccepting(b.cfg.StopTimeout, m.cleanOK) }() // a no-op once stopped below

	cons, err := kgo.NewClient(append(b.dst.Opts(),
		kgo.ConsumeTopics(m.dstTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(DefaultPollInterval),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		return ls, fmt.Errorf("bench: destination consumer: %w", err)
	}
	defer cons.Close()
	codecOpt, _ := load.Codec(codec)
	prod, err := kgo.NewClient(append(b.src.Opts(),
		kgo.DefaultProduceTopic(srcTopic),
		kgo.ProducerBatchCompression(codecOpt),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)...)
	if err != nil {
		return ls, fmt.Errorf("bench: source producer: %w", err)
	}
	defer prod.Close()

	rate, dur, warm := b.cfg.LatencyRate, b.cfg.LatencyDuration, b.cfg.LatencyWarmup
	// The warm-up follows the mirror's start: measureFrom is set when the
	// first record shows at the destination (the mirror runs, and works
	// off what was produced while it started), plus the warm-up; records
	// produced before it are mirrored and checked but not measured, and
	// production goes on for the measured duration after it.
	var (
		mu          sync.Mutex
		measureFrom time.Time
		srcLat      []time.Duration
		perr        error
	)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.RunTimeout)
	defer cancel()
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		gen := load.NewGenerator(uint64(id), load.DefaultValueSize)
		t0 := time.Now()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var n int64
		for {
			mu.Lock()
			from := measureFrom
			mu.Unlock()
			if !from.IsZero() && time.Now().After(from.Add(dur)) {
				break
			}
			select {
			case <-rctx.Done():
				return
			case <-p.done:
				return
			case <-tick.C:
			}
			due := int64(time.Since(t0).Seconds() * float64(rate))
			for ; n < due; n++ {
				r := gen.Record(n)
				r.Timestamp = time.Now()
				prod.Produce(rctx, r, func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil && perr == nil {
						perr = err
					}
					if err == nil && !r.Timestamp.Before(measureFrom) {
						srcLat = append(srcLat, time.Since(r.Timestamp))
					}
				})
			}
		}
		_ = prod.Flush(rctx)
	}()
	// The producer goroutine ends before the run returns, also on an
	// early return (cancel ends its loop and its flush).
	defer func() {
		cancel()
		<-produced
	}()

	var lat []time.Duration
	seen := int64(0)
	var top SourceTopic
	for {
		// A bounded poll, so that a mirror that exited is noticed.
		pctx, pcancel := context.WithTimeout(rctx, time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		now := time.Now()
		if rctx.Err() != nil {
			return ls, fmt.Errorf("bench: %s latency run %d: %w; log %s:\n%s", side, run, rctx.Err(), logPath, tail(logPath))
		}
		if p.exited() {
			return ls, fmt.Errorf("bench: %s latency run %d: %w: %v; log %s:\n%s", side, run, errExited, p.err, logPath, tail(logPath))
		}
		mu.Lock()
		if measureFrom.IsZero() && fs.NumRecords() > 0 {
			measureFrom = now.Add(warm)
		}
		from := measureFrom
		mu.Unlock()
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			if !from.IsZero() && !r.Timestamp.Before(from) {
				lat = append(lat, now.Sub(r.Timestamp))
			}
		})
		select {
		case <-produced:
		default:
			continue
		}
		if top.Ends == nil {
			mu.Lock()
			err := perr
			mu.Unlock()
			if err != nil {
				return ls, fmt.Errorf("bench: produce to %s: %w", srcTopic, err)
			}
			ends, err := kadm.NewClient(srcCl).ListEndOffsets(ctx, srcTopic)
			if err != nil {
				return ls, fmt.Errorf("bench: end offsets of %s: %w", srcTopic, err)
			}
			top = empty
			top.Ends = make([]int64, b.cfg.Partitions)
			for i := range top.Ends {
				o, _ := ends.Lookup(srcTopic, int32(i))
				top.Ends[i] = o.Offset
				top.Records += o.Offset
			}
		}
		if seen >= top.Records {
			break
		}
	}
	if _, err := p.stopAccepting(b.cfg.StopTimeout, m.cleanOK); err != nil {
		return ls, fmt.Errorf("bench: %s latency run %d: %w", side, run, err)
	}
	if seen != top.Records {
		return ls, fmt.Errorf("bench: %s latency run %d: the destination showed %d records, the source holds %d", side, run, seen, top.Records)
	}
	if b.cfg.Verify {
		n, err := check.Topic(ctx, b.src.Opts(), b.dst.Opts(), srcTopic, m.dstTopic, rebatched(side))
		if err != nil {
			return ls, fmt.Errorf("bench: %s latency run %d: %w", side, run, err)
		}
		b.say("%s latency run %d: %s holds the %d records of %s", side, run, m.dstTopic, n, srcTopic)
	}
	if err := b.cleanUp(ctx, m); err != nil {
		return ls, err
	}
	ls.Records = len(lat)
	ls.P50, ls.P99, ls.Max = quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1)
	mu.Lock()
	ls.SourceP50, ls.SourceP99 = quantile(srcLat, 0.5), quantile(srcLat, 0.99)
	mu.Unlock()
	return ls, nil
}

// quantile is the q-quantile of ds (nearest rank), or 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
