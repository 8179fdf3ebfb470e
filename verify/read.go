package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/rawfetch"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

const (
	// fetchPartitionBytes is the partition limit of a fetch; package
	// rawfetch keeps the request limit from binding (DESIGN §11).
	fetchPartitionBytes = 4 << 20
	fetchMaxWait        = 500 * time.Millisecond

	// maxAttempts bounds retries of a request that fails retriably (leader
	// moved, connection lost); maxStalls bounds fetches in a row that
	// return nothing below the end offset.
	maxAttempts = 20
	maxStalls   = 5
)

// side is one partition of one side (source or destination) and how far to
// read it.
type side struct {
	cl        *kgo.Client
	role      string // "source" or "destination", for errors
	topic     string
	id        [16]byte
	partition int32
	leader    int32
	committed bool // READ_COMMITTED
	source    bool // the source side: its LogAppendTime batches' mirrors show create times
	start     int64
	end       int64
}

func (s *side) String() string { return fmt.Sprintf("%s %s[%d]", s.role, s.topic, s.partition) }

// topicMeta is what verify needs of a topic's metadata.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32 // partition → leader broker (-1: none now)
}

// snapshot lists the partitions to compare and their offsets: the
// destination's first (high watermarks), then the source's (last stable
// offsets), so that nothing a running mirror appends in between can make
// the destination snapshot longer than the source's.
func snapshot(ctx context.Context, cfg Config) ([]job, error) {
	srcTopics := slices.Sorted(maps.Keys(cfg.Topics))
	dstTopics := slices.Compact(slices.Sorted(maps.Values(cfg.Topics)))

	dmeta, err := metadata(ctx, cfg.Destination, dstTopics)
	if err != nil {
		return nil, fmt.Errorf("verify: destination: %w", err)
	}
	dstRanges, err := offsetRanges(ctx, cfg.Destination, slices.Sorted(maps.Keys(dmeta)), cfg.Transactional)
	if err != nil {
		return nil, fmt.Errorf("verify: destination: %w", err)
	}
	smeta, err := metadata(ctx, cfg.Source, srcTopics)
	if err != nil {
		return nil, fmt.Errorf("verify: source: %w", err)
	}
	for _, t := range srcTopics {
		if _, ok := smeta[t]; !ok {
			return nil, fmt.Errorf("verify: source topic %q: %w", t, ErrUnknownTopic)
		}
	}
	srcRanges, err := offsetRanges(ctx, cfg.Source, srcTopics, true)
	if err != nil {
		return nil, fmt.Errorf("verify: source: %w", err)
	}

	var jobs []job
	for _, st := range srcTopics {
		dt := cfg.Topics[st]
		sm, dm := smeta[st], dmeta[dt]
		for p, leader := range sm.leaders {
			j := job{srcTopic: st, dstTopic: dt, partition: p}
			r := srcRanges[partKey{st, p}]
			j.src = &side{cl: cfg.Source, role: "source", topic: st, id: sm.id, partition: p, leader: leader, committed: true, source: true, start: r.start, end: r.end}
			if dl, ok := dm.leaders[p]; ok {
				r := dstRanges[partKey{dt, p}]
				j.dst = &side{cl: cfg.Destination, role: "destination", topic: dt, id: dm.id, partition: p, leader: dl, start: r.start, end: r.end, committed: cfg.Transactional}
			}
			jobs = append(jobs, j)
		}
		for p, dl := range dm.leaders {
			if _, ok := sm.leaders[p]; ok {
				continue
			}
			r := dstRanges[partKey{dt, p}]
			jobs = append(jobs, job{srcTopic: st, dstTopic: dt, partition: p,
				dst: &side{cl: cfg.Destination, role: "destination", topic: dt, id: dm.id, partition: p, leader: dl, start: r.start, end: r.end, committed: cfg.Transactional}})
		}
	}
	sortJobs(jobs)
	return jobs, nil
}

// metadata describes topics; a topic that does not exist is absent from the
// result.
func metadata(ctx context.Context, cl *kgo.Client, topics []string) (map[string]topicMeta, error) {
	var last error
	for attempt := range maxAttempts {
		if attempt > 0 {
			if err := backoff.Sleep(ctx, readRetry.Wait(attempt)); err != nil {
				return nil, fmt.Errorf("metadata: %w (last error: %w)", err, last)
			}
		}
		resp, err := leaders.Metadata(ctx, cl, topics...)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			last = err
			continue
		}
		out := make(map[string]topicMeta, len(topics))
		last = nil
		for _, t := range resp.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			err := kerr.ErrorForCode(t.ErrorCode)
			switch {
			case err == nil:
			case errors.Is(err, kerr.UnknownTopicOrPartition):
				continue
			case kerr.IsRetriable(err):
				last = fmt.Errorf("metadata of topic %q: %w", name, err)
				continue
			default:
				return nil, fmt.Errorf("metadata of topic %q: %w", name, err)
			}
			m := topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
			for _, p := range t.Partitions {
				m.leaders[p.Partition] = p.Leader
			}
			out[name] = m
		}
		if last == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("gave up after %d attempts: %w", maxAttempts, last)
}

type partKey struct {
	topic     string
	partition int32
}

type offsetRange struct{ start, end int64 }

// offsetRanges lists log start offsets and end offsets: last stable offsets
// if committed, high watermarks otherwise.
func offsetRanges(ctx context.Context, cl *kgo.Client, topics []string, committed bool) (map[partKey]offsetRange, error) {
	out := make(map[partKey]offsetRange)
	if len(topics) == 0 {
		return out, nil
	}
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	list, what := adm.ListEndOffsets, "high watermarks"
	if committed {
		list, what = adm.ListCommittedOffsets, "last stable offsets"
	}
	ends, err := list(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	for _, t := range topics {
		for p, s := range starts[t] {
			if s.Err != nil {
				return nil, fmt.Errorf("list start offset of %s[%d]: %w", t, p, s.Err)
			}
			e, ok := ends.Lookup(t, p)
			switch {
			case !ok:
				return nil, fmt.Errorf("list %s: none for %s[%d]", what, t, p)
			case e.Err != nil:
				return nil, fmt.Errorf("list %s of %s[%d]: %w", what, t, p, e.Err)
			}
			out[partKey{t, p}] = offsetRange{s.Offset, e.Offset}
		}
	}
	return out, nil
}

// read fetches the partition from start to end and sends its records in
// chunks. It closes out only when it has read everything; on an error it
// returns it, and the errgroup's cancellation tells the comparator.
func (s *side) read(ctx context.Context, out chan<- []rec) error {
	if s == nil { // a partition only the destination has: no source records
		close(out)
		return nil
	}
	dec := kgo.DefaultDecompressor()
	iso := kgo.ReadUncommitted()
	if s.committed {
		iso = kgo.ReadCommitted()
	}
	var (
		spans       []span
		lastBase    int64 = -1 // base offset of the batch of the last record sent
		lastPlace   int32      // that record's place in its batch
		stalls      int
		created     map[int64]int64 // create times of the LogAppendTime batch at createdBase
		createdBase int64
	)
	for offset := s.start; offset < s.end; {
		rp, err := s.fetch(ctx, offset)
		if err != nil {
			return err
		}
		if spans, err = batchSpans(rp.RecordBatches, spans[:0]); err != nil {
			return fmt.Errorf("%s at offset %d: %w", s, offset, err)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         offset,
			IsolationLevel: iso,
			Topic:          s.topic,
			Partition:      s.partition,
		}, rp, dec, nil)
		if fp.Err != nil && len(fp.Records) == 0 {
			return fmt.Errorf("%s at offset %d: %w: %w", s, offset, ErrCorrupt, fp.Err)
		}
		chunk := make([]rec, 0, len(fp.Records))
		j := 0
		for _, r := range fp.Records {
			if r.Offset >= s.end {
				break
			}
			for j < len(spans) && spans[j].last < r.Offset {
				j++
			}
			if j == len(spans) || r.Offset < spans[j].base {
				return fmt.Errorf("%s: record at offset %d lies outside every batch's offset range: %w", s, r.Offset, ErrCorrupt)
			}
			rc := rec{Record: r, baseSeq: spans[j].baseSeq}
			if spans[j].base == lastBase {
				rc.place = lastPlace + 1
			}
			if spans[j].raw != nil && s.source {
				// A source record of a LogAppendTime batch: a mirror,
				// a CreateTime topic, shows the create time its
				// producer gave it, which kgo does not report for such
				// a batch (it reports the append time).
				if created == nil || createdBase != spans[j].base {
					if created, err = createTimes(spans[j].raw, dec); err != nil {
						return fmt.Errorf("%s at offset %d: %w: %w", s, spans[j].base, ErrCorrupt, err)
					}
					createdBase = spans[j].base
				}
				ts, ok := created[r.Offset]
				if !ok {
					return fmt.Errorf("%s: record at offset %d is not in its LogAppendTime batch: %w", s, r.Offset, ErrCorrupt)
				}
				rc.mirrorTime, rc.appendTime = time.UnixMilli(ts), true
			}
			chunk = append(chunk, rc)
			lastBase, lastPlace = spans[j].base, rc.place
		}
		if next <= offset {
			if stalls++; stalls >= maxStalls {
				return fmt.Errorf("%s: %d fetches at offset %d returned nothing below the end offset %d (log start %d, high watermark %d): %w",
					s, stalls, offset, s.end, rp.LogStartOffset, rp.HighWatermark, ErrNoProgress)
			}
			if err := backoff.Sleep(ctx, readRetry.Wait(stalls)); err != nil {
				return err
			}
			continue
		}
		stalls = 0
		offset = next
		if len(chunk) == 0 {
			continue
		}
		select {
		case out <- chunk:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	close(out)
	return nil
}

// fetch fetches one partition at offset from its leader, following leader
// moves.
func (s *side) fetch(ctx context.Context, offset int64) (*kmsg.FetchResponseTopicPartition, error) {
	var last error
	for attempt := range maxAttempts {
		if attempt > 0 {
			if err := backoff.Sleep(ctx, readRetry.Wait(attempt)); err != nil {
				return nil, fmt.Errorf("%s: fetch at offset %d: %w (last error: %w)", s, offset, err, last)
			}
			if err := s.refresh(ctx); err != nil {
				return nil, err
			}
		}
		rp, err := s.fetchOnce(ctx, offset)
		if err == nil {
			return rp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retriable(err) {
			if errors.Is(err, kerr.OffsetOutOfRange) && rp != nil {
				return nil, fmt.Errorf("%s: fetch at offset %d: log start %d, high watermark %d (the log changed under the snapshot): %w",
					s, offset, rp.LogStartOffset, rp.HighWatermark, err)
			}
			return nil, fmt.Errorf("%s: fetch at offset %d: %w", s, offset, err)
		}
		last = err
	}
	return nil, fmt.Errorf("%s: fetch at offset %d: gave up after %d attempts: %w", s, offset, maxAttempts, last)
}

func (s *side) fetchOnce(ctx context.Context, offset int64) (*kmsg.FetchResponseTopicPartition, error) {
	if s.leader < 0 {
		return nil, kerr.LeaderNotAvailable
	}
	part, err := rawfetch.Do(ctx, s.cl, s.leader, rawfetch.Request{
		Partition:         tp.Partition{Topic: s.topic, ID: s.id, Partition: s.partition},
		Offset:            offset,
		LeaderEpoch:       -1,
		PartitionMaxBytes: fetchPartitionBytes,
		ReadCommitted:     s.committed,
		MaxWait:           fetchMaxWait,
		MinBytes:          1,
	})
	if errors.Is(err, rawfetch.ErrNoPartition) {
		return nil, &responseError{err.Error()}
	}
	if err != nil {
		return nil, err
	}
	return part, kerr.ErrorForCode(part.ErrorCode)
}

// refresh looks the partition's leader up again.
func (s *side) refresh(ctx context.Context) error {
	m, err := metadata(ctx, s.cl, []string{s.topic})
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	tm, ok := m[s.topic]
	if !ok {
		return fmt.Errorf("%s: the topic was deleted during verify: %w", s, ErrUnknownTopic)
	}
	if tm.id != s.id {
		return fmt.Errorf("%s: the topic was recreated during verify (topic ID changed): %w", s, ErrUnknownTopic)
	}
	leader, ok := tm.leaders[s.partition]
	if !ok {
		return fmt.Errorf("%s: the partition no longer exists: %w", s, ErrUnknownTopic)
	}
	s.leader = leader
	return nil
}

// responseError: a response that does not answer the request.
type responseError struct{ msg string }

func (e *responseError) Error() string { return e.msg }

// retriable: errors that a leader refresh and a new attempt may cure. Errors
// that are not Kafka error codes come from the connection (kgo has already
// retried on a new one); the leader may have moved off a dead broker.
func retriable(err error) bool {
	var ke *kerr.Error
	var re *responseError
	switch {
	case errors.As(err, &re):
		return false
	case !errors.As(err, &ke):
		return true
	}
	return kerr.IsRetriable(err) ||
		errors.Is(err, kerr.UnknownTopicID) ||
		errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownLeaderEpoch) ||
		errors.Is(err, kerr.LeaderNotAvailable) ||
		errors.Is(err, kerr.NotLeaderForPartition)
}

// readRetry is the wait before a read is tried again.
var readRetry = backoff.Policy{First: 50 * time.Millisecond, Max: time.Second}

// span is what verify reads from a v2 batch header.
type span struct {
	base, last int64 // first and last offset the batch covers
	baseSeq    int32
	// raw is the batch when the source broker stamped it with
	// LogAppendTime (its records' own create times are then what a
	// CreateTime mirror shows; see createTimes), else nil.
	raw []byte
}

// batchSpans appends the spans of the complete batches in a fetched buffer;
// it stops at a partial batch (brokers cut the last batch at the size limit)
// and fails on a legacy message set.
func batchSpans(b []byte, dst []span) ([]span, error) {
	for len(b) > transform.PosMagic {
		if m := int8(b[transform.PosMagic]); m != 2 {
			return dst, fmt.Errorf("magic %d at offset %d, record batch format v2 needed: %w",
				m, int64(binary.BigEndian.Uint64(b)), ErrUnsupportedFormat)
		}
		if len(b) < transform.BatchHeaderSize {
			break
		}
		length := int64(int32(binary.BigEndian.Uint32(b[transform.PosLength:])))
		if length < transform.BatchHeaderSize-transform.LengthOverhead || length+transform.LengthOverhead > int64(len(b)) {
			break
		}
		base := int64(binary.BigEndian.Uint64(b))
		sp := span{
			base:    base,
			last:    base + int64(int32(binary.BigEndian.Uint32(b[transform.PosLastOffsetDelta:]))),
			baseSeq: int32(binary.BigEndian.Uint32(b[transform.PosBaseSequence:])),
		}
		if b[transform.PosAttributes+1]&transform.AttrTimestampLogAppend != 0 {
			sp.raw = b[:length+transform.LengthOverhead]
		}
		dst = append(dst, sp)
		b = b[length+transform.LengthOverhead:]
	}
	return dst, nil
}

// createTimes decodes the records of a v2 batch (decompressing them) and
// returns each record's create time, by offset: the batch's first
// timestamp plus the record's timestamp delta.
func createTimes(b []byte, dec kgo.Decompressor) (map[int64]int64, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("record batch: %w", err)
	}
	raw := rb.Records
	if codec := byte(rb.Attributes & 0x07); codec != 0 {
		var err error
		if raw, err = dec.Decompress(rb.Records, kgo.CompressionCodecType(codec)); err != nil {
			return nil, fmt.Errorf("decompress: %w", err)
		}
	}
	out := make(map[int64]int64, rb.NumRecords)
	rec := kmsg.NewRecord()
	for i := range int(rb.NumRecords) {
		length, n := kbin.Varint(raw)
		if n <= 0 || length < 0 || int(length) > len(raw)-n {
			return nil, fmt.Errorf("record %d of %d: bad length", i, rb.NumRecords)
		}
		if err := rec.ReadFrom(raw[:n+int(length)]); err != nil {
			return nil, fmt.Errorf("record %d of %d: %w", i, rb.NumRecords, err)
		}
		raw = raw[n+int(length):]
		out[rb.FirstOffset+int64(rec.OffsetDelta)] = rb.FirstTimestamp + rec.TimestampDelta64
	}
	return out, nil
}
