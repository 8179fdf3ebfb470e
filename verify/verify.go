package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// DefaultConcurrency is how many partitions Run compares at once when
// Config.Concurrency is 0.
const DefaultConcurrency = 4

// Errors for the decisions a caller of Run makes. A difference between the
// sides is not an error: it is Report.First.
var (
	// ErrInvalidConfig: the Config is unusable; the error lists every
	// problem.
	ErrInvalidConfig = errors.New("invalid verify config")
	// ErrUnknownTopic: a source topic does not exist.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrCorrupt: a fetched batch does not decode (CRC, length,
	// compression) or holds records outside its own offset range.
	ErrCorrupt = errors.New("corrupt record batch")
	// ErrUnsupportedFormat: a partition holds a legacy message set (magic
	// 0 or 1); mirrord mirrors record batch format v2 only.
	ErrUnsupportedFormat = errors.New("unsupported message format")
	// ErrNoProgress: fetches below the snapshot's end offset keep
	// returning nothing (the log changed under the snapshot).
	ErrNoProgress = errors.New("fetch makes no progress")
)

// Config says what to compare.
type Config struct {
	// Source and Destination are the caller's clients. Run only sends
	// requests through them (metadata, list offsets, fetch); it does not
	// consume with them or close them.
	Source, Destination *kgo.Client
	// Topics maps each source topic to its destination topic.
	Topics map[string]string
	// SourceClusterID is the source cluster's ID, for the region of the
	// PID mapping (transform.RegionOf).
	SourceClusterID string
	// Salt returns the collision salt recorded in the state topic for an
	// origin at a destination partition; dest carries the destination
	// topic's name and ID (the state topic keys salts by topic ID). Nil:
	// no salts. Run calls it from several partitions' goroutines at once,
	// at most once per origin and partition.
	Salt func(dest tp.Partition, o transform.Origin) (int64, bool)
	// Returns says which source batches the link does not send (those
	// that started at the destination; with unattributed = "skip", those
	// without a producer ID: DESIGN §16): their records are not expected
	// at the destination. The zero value expects every record.
	Returns transform.Returns
	// Screen, when set, is called with the headers of a chunk's
	// transactional source records before Returns decides them
	// (statestore.Origins.Learn brings Returns.Sessions up to date).
	Screen func(ctx context.Context, hs []transform.Header) error
	// SharedDestination: the destination topics have producers of their
	// own (active-active, shared_destination): their records, which carry
	// the destination cluster's producer IDs (never a mapped one), are not
	// compared. It needs Returns.SkipUnattributed and preserve delivery:
	// only then does every record the link appends carry a mapped producer
	// ID, which tells the mirror from the destination's own records.
	SharedDestination bool
	// MaxRecords stops each partition after this many source records.
	// 0: all records up to the end offsets listed at the start.
	MaxRecords int64
	// Concurrency is how many partitions are compared at once; 0 means
	// DefaultConcurrency.
	Concurrency int
	// Transactional compares a mirror written in transactional delivery
	// (DESIGN §14): the destination is read READ_COMMITTED up to its last
	// stable offsets (a dead session's aborted appends and the commit
	// markers are not the mirror), and its batches carry the session's
	// producer ID, epoch and sequences and the transactional bit, so those
	// are not compared; the records, their order and codecs are, and
	// every destination batch must begin where a source batch begins
	// (a session may join a run of source batches into one: coalesce_bytes).
	Transactional bool
}

func (c *Config) validate() error {
	var errs []error
	if c.Source == nil {
		errs = append(errs, errors.New("Source: no client"))
	}
	if c.Destination == nil {
		errs = append(errs, errors.New("Destination: no client"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("Topics: no topics to compare"))
	}
	for _, src := range slices.Sorted(maps.Keys(c.Topics)) {
		if src == "" {
			errs = append(errs, errors.New("Topics: empty source topic name"))
		}
		if c.Topics[src] == "" {
			errs = append(errs, fmt.Errorf("Topics[%q]: empty destination topic name", src))
		}
	}
	if c.SourceClusterID == "" {
		errs = append(errs, errors.New("SourceClusterID: empty; the PID mapping needs the source region"))
	}
	if c.MaxRecords < 0 {
		errs = append(errs, fmt.Errorf("MaxRecords: %d is negative", c.MaxRecords))
	}
	if c.SharedDestination && (c.Transactional || !c.Returns.SkipUnattributed) {
		errs = append(errs, errors.New(`SharedDestination: the destination's own records can be told from the mirror's only in preserve delivery with unattributed = "skip" (every appended record then carries a mapped producer ID)`))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("Concurrency: %d is negative", c.Concurrency))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Difference is the first place where a destination partition is not the
// mirror of its source partition.
type Difference struct {
	SourceTopic, DestTopic string
	Partition              int32
	// SourceOffset and DestOffset locate the records compared; -1 where
	// that side has no record (a missing or extra record, a missing
	// partition).
	SourceOffset, DestOffset int64
	// Field is one of the Field constants.
	Field string
	// Want is what the destination should hold, Got what it holds; both
	// printable and truncated.
	Want, Got string
}

// Error is one line an operator can act on.
func (d *Difference) Error() string {
	return fmt.Sprintf("%s[%d] -> %s[%d]: %s at source offset %s, destination offset %s: want %s, got %s",
		d.SourceTopic, d.Partition, d.DestTopic, d.Partition, describe(d.Field),
		offsetString(d.SourceOffset), offsetString(d.DestOffset), d.Want, d.Got)
}

func describe(field string) string {
	switch field {
	case FieldMissing:
		return "missing in destination"
	case FieldExtra:
		return "extra record in destination"
	case FieldOrder:
		return "records out of order"
	case FieldBatch:
		return "batch boundary differs"
	}
	return field + " differs"
}

func offsetString(o int64) string {
	if o < 0 {
		return "none"
	}
	return strconv.FormatInt(o, 10)
}

// PartitionReport is the outcome for one partition.
type PartitionReport struct {
	SourceTopic, DestTopic string
	Partition              int32
	// Records is how many source records the destination holds equal and
	// in order.
	Records int64
	// SourceStart/SourceEnd and DestStart/DestEnd are the offsets read:
	// log start to last stable offset at the source, log start to high
	// watermark at the destination, as listed at the start of Run. -1 for
	// a side that does not have the partition.
	SourceStart, SourceEnd int64
	DestStart, DestEnd     int64
	// Behind is how many source records follow the destination's last
	// record (0 if the partition has a Difference).
	Behind int64
	// Difference is the partition's first difference, nil if none.
	Difference *Difference
}

// Report is the outcome of Run.
type Report struct {
	// Partitions in (source topic, partition) order. Destination
	// partitions beyond the source's partition count are included (with
	// SourceStart/SourceEnd -1); their numbers put them after the topic's
	// source partitions.
	Partitions []PartitionReport
	// Records and Behind are the sums over the partitions.
	Records, Behind int64
	// First is the first difference in (source topic, partition) order;
	// nil if the destination is the mirror of the source (possibly behind).
	First *Difference
}

// Run compares every partition of each source topic in cfg.Topics with the
// same-numbered partition of its destination topic. The error says that Run
// could not compare (bad config, unknown source topic, I/O, context ended);
// a difference is reported in Report.First.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	region, _ := transform.RegionOf(cfg.SourceClusterID)

	jobs, err := snapshot(ctx, cfg)
	if err != nil {
		return Report{}, err
	}

	reports := make([]PartitionReport, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Concurrency)
	for i, j := range jobs {
		g.Go(func() error {
			rep, err := j.run(gctx, cfg, region)
			reports[i] = rep
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, fmt.Errorf("verify: %w", err)
	}

	rep := Report{Partitions: reports}
	for _, p := range reports {
		rep.Records += p.Records
		rep.Behind += p.Behind
		if rep.First == nil && p.Difference != nil {
			rep.First = p.Difference
		}
	}
	return rep, nil
}

// job is one partition to compare. src is nil for a destination partition
// the source does not have, dst nil for a source partition the destination
// does not have.
type job struct {
	srcTopic, dstTopic string
	partition          int32
	src, dst           *side
}

func sortJobs(jobs []job) {
	slices.SortFunc(jobs, func(a, b job) int {
		if c := cmp.Compare(a.srcTopic, b.srcTopic); c != 0 {
			return c
		}
		return cmp.Compare(a.partition, b.partition)
	})
}

func (j job) run(ctx context.Context, cfg Config, region transform.Region) (PartitionReport, error) {
	rep := PartitionReport{
		SourceTopic: j.srcTopic, DestTopic: j.dstTopic, Partition: j.partition,
		SourceStart: -1, SourceEnd: -1, DestStart: -1, DestEnd: -1,
	}
	if j.src != nil {
		rep.SourceStart, rep.SourceEnd = j.src.start, j.src.end
	}
	if j.dst == nil {
		rep.Difference = &Difference{
			SourceTopic: j.srcTopic, DestTopic: j.dstTopic, Partition: j.partition,
			Field: FieldMissing, SourceOffset: -1, DestOffset: -1,
			Want: fmt.Sprintf("partition %s[%d] (source offsets %d to %d)", j.dstTopic, j.partition, j.src.start, j.src.end),
			Got:  "no such partition",
		}
		return rep, nil
	}
	rep.DestStart, rep.DestEnd = j.dst.start, j.dst.end

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	srcCh, dstCh := make(chan []rec, 1), make(chan []rec, 1)
	g.Go(func() error { return j.src.read(gctx, srcCh) })
	g.Go(func() error { return j.dst.read(gctx, dstCh) })

	c := comparator{
		src:    cursor{next: sent(chanFeed(srcCh), cfg.Returns, cfg.Screen)},
		dst:    cursor{next: mirrored(chanFeed(dstCh), cfg.SharedDestination)},
		pids:   newPIDCheck(region, cfg.SourceClusterID, tp.Partition{Topic: j.dstTopic, ID: j.dst.id, Partition: j.partition}, cfg.Salt),
		max:    cfg.MaxRecords,
		srcEnd: rep.SourceEnd,
		txn:    cfg.Transactional,
	}
	out, cerr := c.run(gctx)
	cancel() // the comparator may stop before the readers reach the end
	werr := g.Wait()
	if cerr != nil {
		// A reader's failure cancels gctx and so ends the comparator;
		// report the cause, not the cancellation.
		if werr != nil && !errors.Is(werr, context.Canceled) {
			return rep, werr
		}
		return rep, fmt.Errorf("%s[%d]: %w", j.srcTopic, j.partition, cerr)
	}
	// The comparator's result is complete; a reader cut short after it
	// took what it needed does not change it.
	rep.Records, rep.Behind = out.records, out.behind
	if d := out.diff; d != nil {
		d.SourceTopic, d.DestTopic, d.Partition = j.srcTopic, j.dstTopic, j.partition
		rep.Difference = d
	}
	return rep, nil
}

// sent is f without the records the link does not send (Config.Returns).
func sent(f feed, r transform.Returns, screen func(ctx context.Context, hs []transform.Header) error) feed {
	return func(ctx context.Context) ([]rec, error) {
		for {
			chunk, err := f(ctx)
			if err != nil {
				return nil, err
			}
			if screen != nil {
				var hs []transform.Header
				for _, x := range chunk {
					if x.Attrs.IsTransactional() {
						hs = append(hs, transform.Header{ProducerID: x.ProducerID, Attributes: transform.AttrTransactional})
					}
				}
				if err := screen(ctx, hs); err != nil {
					return nil, err
				}
			}
			kept := chunk[:0]
			for _, x := range chunk {
				if r.Of(x.ProducerID) == transform.Away {
					kept = append(kept, x)
				}
			}
			if len(kept) > 0 {
				return kept, nil
			}
		}
	}
}

// mirrored is f, the destination's records, without those of the
// destination's own producers when it is shared (Config.SharedDestination):
// a mirror's records carry mapped producer IDs, below -1.
func mirrored(f feed, shared bool) feed {
	if !shared {
		return f
	}
	return func(ctx context.Context) ([]rec, error) {
		for {
			chunk, err := f(ctx)
			if err != nil {
				return nil, err
			}
			kept := chunk[:0]
			for _, x := range chunk {
				if x.ProducerID < -1 {
					kept = append(kept, x)
				}
			}
			if len(kept) > 0 {
				return kept, nil
			}
		}
	}
}

func chanFeed(ch <-chan []rec) feed {
	return func(ctx context.Context) ([]rec, error) {
		select {
		case chunk, ok := <-ch:
			if !ok {
				return nil, io.EOF
			}
			return chunk, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
