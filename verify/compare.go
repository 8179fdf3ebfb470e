package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// Fields a Difference names. The content fields are compared first; the
// producer and batch fields only for records whose content is equal.
const (
	FieldKey           = "key"
	FieldValue         = "value"
	FieldHeaders       = "headers"
	FieldTimestamp     = "timestamp"      // value or type (create time, log append time)
	FieldProducerID    = "producer_id"    // not the mapping of the source PID
	FieldProducerEpoch = "producer_epoch" // epochs differ
	FieldBatch         = "batch"          // a destination batch starts inside a source batch, or holds a source batch that does not continue it
	FieldSequence      = "sequence"       // the records' sequences differ (base sequence of the carrying batch plus the record's place in it)
	FieldCompression   = "compression"    // codecs of the carrying batches differ
	FieldTransactional = "transactional"  // the destination batch kept the transactional bit
	FieldMissing       = "missing"        // a source record (or the whole partition) is not in the destination
	FieldExtra         = "extra"          // a destination record that no source record accounts for
	FieldOrder         = "order"          // both sides hold the record, at different places
)

// window is how many records ahead of a content mismatch the comparator
// looks on each side to tell a missing, extra or reordered record from a
// changed one. A batch missing as a whole is recognised if it holds fewer
// records than this; beyond it a mismatch is reported by the field that
// differs, still at the right offsets.
const window = 1024

// maxShown bounds the bytes of a key, value or header shown in a Difference.
const maxShown = 64

// rec is one record as the comparator sees it: the decoded record and what
// it needs of the batch that carried it.
type rec struct {
	*kgo.Record
	baseSeq int32 // base sequence of the carrying batch; -1: none
	place   int32 // index of the record among those this side returned from its batch
	// appendTime: a source record of a batch stamped LogAppendTime,
	// whose mirror (a CreateTime topic) shows mirrorTime, the create
	// time its producer gave it (README: LogAppendTime sources).
	appendTime bool
	mirrorTime time.Time
}

// first: the first record this side returned from its batch.
func (r *rec) first() bool { return r.place == 0 }

// seq is the record's sequence: its batch's base sequence plus its place in
// the batch, wrapping from the largest int32 to 0 as producers number
// records; -1 for a batch without a base sequence. It counts places among the
// records read, not offset deltas, because a batch that the source's
// cleaner left with gaps is mirrored as a dense batch under the same base
// sequence (transform.Reencode): counting deltas would make every record
// after a gap a difference.
func (r *rec) seq() int32 {
	if r.baseSeq < 0 {
		return -1
	}
	return int32((int64(r.baseSeq) + int64(r.place)) % (math.MaxInt32 + 1))
}

// feed yields a side's records in offset order, a chunk at a time, and
// io.EOF after the last one.
type feed func(ctx context.Context) ([]rec, error)

// cursor buffers a feed so that the comparator can look ahead.
type cursor struct {
	next feed
	buf  []rec
	eof  bool
}

// peek returns the record k places ahead of the current one; ok is false if
// the side ends before it.
func (c *cursor) peek(ctx context.Context, k int) (r *rec, ok bool, err error) {
	for len(c.buf) <= k && !c.eof {
		chunk, err := c.next(ctx)
		if errors.Is(err, io.EOF) {
			c.eof = true
			break
		}
		if err != nil {
			return nil, false, err
		}
		c.buf = append(c.buf, chunk...)
	}
	if len(c.buf) <= k {
		return nil, false, nil
	}
	return &c.buf[k], true, nil
}

// advance drops the current record (peek(0) must have returned one).
func (c *cursor) advance() {
	c.buf[0] = rec{}
	c.buf = c.buf[1:]
	if len(c.buf) == 0 {
		c.buf = nil
	}
}

// pidCheck says which producer ID a destination record must carry for a
// source producer ID (DESIGN §3–4): a negative PID unchanged; a PID ≥ 0
// mapped into the source region, or into the salted region if the state
// topic holds a collision salt for its origin.
//
// A salted origin may show the unsalted mapping for a prefix of its records:
// the PSM salts a slot's holder when a forwarded negative PID claims the
// slot, after the holder already appended ("the slot changes hands once").
// So the unsalted mapping is accepted until the salted one has been seen in
// the partition, and not after.
type pidCheck struct {
	region  transform.Region
	cluster string
	dest    tp.Partition
	salt    func(tp.Partition, transform.Origin) (int64, bool)
	origins map[int64]*saltState
}

type saltState struct {
	salt   int64
	salted bool // the origin has a salt
	seen   bool // a record under the salted mapping was seen
}

func newPIDCheck(r transform.Region, cluster string, dest tp.Partition, salt func(tp.Partition, transform.Origin) (int64, bool)) *pidCheck {
	return &pidCheck{region: r, cluster: cluster, dest: dest, salt: salt, origins: make(map[int64]*saltState)}
}

// check returns the producer ID expected for src and whether got is
// acceptable.
func (p *pidCheck) check(src, got int64) (want int64, ok bool) {
	if src < 0 {
		return src, got == src
	}
	st := p.origins[src]
	if st == nil {
		st = new(saltState)
		if p.salt != nil {
			st.salt, st.salted = p.salt(p.dest, transform.Origin{Cluster: p.cluster, PID: src})
		}
		p.origins[src] = st
	}
	plain := transform.MapPID(src, p.region)
	if !st.salted {
		return plain, got == plain
	}
	salted := transform.MapPIDSalted(src, p.region, st.salt)
	switch {
	case got == salted:
		st.seen = true
		return salted, true
	case got == plain && !st.seen:
		return plain, true
	}
	return salted, false
}

// comparator walks a source and a destination partition in step.
type comparator struct {
	src, dst cursor
	pids     *pidCheck
	max      int64 // source records to take at most; 0: all
	srcEnd   int64 // source end offset, for messages; -1: no source partition
	// txn: the destination was written in transactional delivery; the
	// producer fields are the session's (Config.Transactional).
	txn bool
	// prev is the source record compared (and found equal) last; nil
	// before the first. A source batch that begins inside a destination
	// batch must follow it directly to be part of the same run.
	prev *kgo.Record
}

// outcome is what one partition's comparison found. diff carries no topic
// or partition; the caller fills them in.
type outcome struct {
	records int64 // source records the destination holds equal, in order
	behind  int64 // source records after the destination's last record
	diff    *Difference
}

func (c *comparator) run(ctx context.Context) (outcome, error) {
	var out outcome
	for c.max == 0 || out.records < c.max {
		s, sok, err := c.src.peek(ctx, 0)
		if err != nil {
			return out, err
		}
		d, dok, err := c.dst.peek(ctx, 0)
		if err != nil {
			return out, err
		}
		switch {
		case !sok && !dok:
			return out, nil
		case !sok:
			want := fmt.Sprintf("no record (the source ends at offset %d)", c.srcEnd)
			if c.srcEnd < 0 {
				want = "no record (the source topic has no such partition)"
			}
			out.diff = &Difference{
				Field:        FieldExtra,
				SourceOffset: -1,
				DestOffset:   d.Offset,
				Want:         want,
				Got:          summary(d),
			}
			return out, nil
		case !dok:
			// The destination is behind: count what it lacks.
			for c.max == 0 || out.records+out.behind < c.max {
				if _, ok, err := c.src.peek(ctx, 0); err != nil {
					return out, err
				} else if !ok {
					break
				}
				out.behind++
				c.src.advance()
			}
			return out, nil
		}
		diff, err := c.compare(ctx, s, d)
		if err != nil {
			return out, err
		}
		if diff != nil {
			out.diff = diff
			return out, nil //nolint:nilerr // a difference is the comparison's result, not a failure to compare
		}
		out.records++
		c.prev = s.Record
		c.src.advance()
		c.dst.advance()
	}
	return out, nil
}

// compare checks the current pair of records.
func (c *comparator) compare(ctx context.Context, s, d *rec) (*Difference, error) {
	if field, want, got := contentDiff(s, d); field != "" {
		return c.classify(ctx, s, d, pairDiff(s, d, field, want, got))
	}
	if c.txn {
		return sessionDiff(s, d), nil
	}
	return c.preserveDiff(s, d), nil
}

// pairDiff is a difference in field between source record s and
// destination record d.
func pairDiff(s, d *rec, field, want, got string) *Difference {
	return &Difference{Field: field, SourceOffset: s.Offset, DestOffset: d.Offset, Want: want, Got: got}
}

// sessionDiff compares the batch fields of a pair of equal records of a
// transactional-delivery mirror, whose producer fields are the session's.
func sessionDiff(s, d *rec) *Difference {
	// A transactional session may join a run of consecutive source
	// batches into one destination batch (coalesce_bytes): a source batch
	// may then begin inside a destination batch, but a destination batch
	// still begins where a source batch does.
	if d.first() && !s.first() {
		return pairDiff(s, d, FieldBatch, batchPlace(s.first()), batchPlace(d.first()))
	}
	if sc, dc := s.Attrs.CompressionType(), d.Attrs.CompressionType(); sc != dc {
		return pairDiff(s, d, FieldCompression, codecName(sc), codecName(dc))
	}
	if !d.Attrs.IsTransactional() {
		return pairDiff(s, d, FieldTransactional, "transactional bit set (the session's transaction)", "transactional bit cleared")
	}
	return nil
}

// preserveDiff compares the producer and batch fields of a pair of equal
// records of a preserve-delivery mirror.
func (c *comparator) preserveDiff(s, d *rec) *Difference {
	if want, ok := c.pids.check(s.ProducerID, d.ProducerID); !ok {
		return pairDiff(s, d, FieldProducerID, pidString(want), pidString(d.ProducerID))
	}
	if s.ProducerEpoch != d.ProducerEpoch {
		return pairDiff(s, d, FieldProducerEpoch, strconv.Itoa(int(s.ProducerEpoch)), strconv.Itoa(int(d.ProducerEpoch)))
	}
	if d.first() && !s.first() {
		return pairDiff(s, d, FieldBatch, batchPlace(false), batchPlace(true))
	}
	if s.first() && !d.first() {
		if why := c.joinFault(s, d); why != "" {
			return pairDiff(s, d, FieldBatch, batchPlace(true)+" ("+why+")", batchPlace(false))
		}
	}
	// Comparing each record's sequence, not its batch's base sequence,
	// also checks that a source batch inside a destination batch
	// continues the destination batch's sequences.
	if s.seq() != d.seq() {
		return pairDiff(s, d, FieldSequence, seqString(s), seqString(d))
	}
	if sc, dc := s.Attrs.CompressionType(), d.Attrs.CompressionType(); sc != dc {
		return pairDiff(s, d, FieldCompression, codecName(sc), codecName(dc))
	}
	if d.Attrs.IsTransactional() {
		return pairDiff(s, d, FieldTransactional, "transactional bit cleared", "transactional bit set")
	}
	return nil
}

// joinFault says why source record s, the first of its batch, cannot be
// part of the destination batch in which d is not the first record; "" if
// it can. Preserve delivery joins only a run of one producer's consecutive
// batches, into the batch that producer would have sent with a longer
// linger: s must directly follow the source record before it in that batch,
// with the same producer ID and epoch (the caller then compares s's
// sequence, which must continue the batch's). mirrord never joins batches
// without a producer ID (-1), whatever their base sequence says (franz-go
// numbers them from 0 all the same), nor batches without a base sequence.
func (c *comparator) joinFault(s, d *rec) string {
	switch {
	case s.ProducerID == -1:
		return "batches without a producer ID are never joined"
	case s.baseSeq < 0 || d.baseSeq < 0:
		return "batches without a sequence are never joined"
	case c.prev == nil:
		return "no source record precedes it in the destination batch"
	case s.Offset != c.prev.Offset+1:
		return fmt.Sprintf("the destination batch holds source offset %d before it: only contiguous batches are joined", c.prev.Offset)
	case s.ProducerID != c.prev.ProducerID || s.ProducerEpoch != c.prev.ProducerEpoch:
		return fmt.Sprintf("the destination batch holds a record of source producer %d, epoch %d before it: only one producer's batches are joined",
			c.prev.ProducerID, c.prev.ProducerEpoch)
	}
	return ""
}

// classify decides whether a content mismatch at s/d is a missing, extra or
// reordered record, by looking for each side's record a little further on
// the other side; if neither is found, it is a changed record (byField).
func (c *comparator) classify(ctx context.Context, s, d *rec, byField *Difference) (*Difference, error) {
	// Peeking may grow the buffers: keep copies, not pointers into them.
	sv, dv := *s, *d
	inSrc, err := lookahead(ctx, &c.src, &dv) // the destination record comes later in the source
	if err != nil {
		return nil, err
	}
	inDst, err := lookahead(ctx, &c.dst, &sv) // the source record comes later in the destination
	if err != nil {
		return nil, err
	}
	switch {
	case inSrc != nil && inDst != nil:
		return &Difference{
			Field: FieldOrder, SourceOffset: sv.Offset, DestOffset: dv.Offset,
			Want: "source offset " + summary(&sv),
			Got:  fmt.Sprintf("source offset %s (the destination holds source offset %d at offset %d)", summary(inSrc), sv.Offset, inDst.Offset),
		}, nil
	case inSrc != nil:
		return &Difference{
			Field: FieldMissing, SourceOffset: sv.Offset, DestOffset: -1,
			Want: summary(&sv),
			Got:  fmt.Sprintf("no such record: destination offset %d holds source offset %d", dv.Offset, inSrc.Offset),
		}, nil
	case inDst != nil:
		return &Difference{
			Field: FieldExtra, SourceOffset: -1, DestOffset: dv.Offset,
			Want: fmt.Sprintf("source offset %d next (found at destination offset %d)", sv.Offset, inDst.Offset),
			Got:  summary(&dv),
		}, nil
	}
	return byField, nil
}

// lookahead returns the first record among the cursor's next window records
// (after the current one) whose content equals r's.
func lookahead(ctx context.Context, c *cursor, r *rec) (*rec, error) {
	for k := 1; k <= window; k++ {
		x, ok, err := c.peek(ctx, k)
		if err != nil || !ok {
			return nil, err
		}
		if f, _, _ := contentDiff(r, x); f == "" {
			return x, nil
		}
	}
	return nil, nil
}

// contentDiff names the first content field in which a and b differ, with
// a's and b's version of it; "" if they are equal.
func contentDiff(a, b *rec) (field, av, bv string) {
	if b.appendTime && !a.appendTime { // the source record second (lookahead)
		f, bv, av := contentDiff(b, a)
		return f, av, bv
	}
	switch {
	case !bytesEqual(a.Key, b.Key):
		return FieldKey, showBytes(a.Key), showBytes(b.Key)
	case !bytesEqual(a.Value, b.Value):
		return FieldValue, showBytes(a.Value), showBytes(b.Value)
	case !headersEqual(a.Headers, b.Headers):
		return FieldHeaders, showHeaders(a.Headers), showHeaders(b.Headers)
	case a.appendTime:
		if a.mirrorTime.UnixMilli() != b.Timestamp.UnixMilli() || b.Attrs.TimestampType() != 0 {
			return FieldTimestamp, fmt.Sprintf("%d (create time, of a record the source stamped with log append time %d)",
				a.mirrorTime.UnixMilli(), a.Timestamp.UnixMilli()), showTimestamp(b)
		}
	case a.Timestamp.UnixMilli() != b.Timestamp.UnixMilli() || a.Attrs.TimestampType() != b.Attrs.TimestampType():
		return FieldTimestamp, showTimestamp(a), showTimestamp(b)
	}
	return "", "", ""
}

// bytesEqual tells null from empty: Kafka does.
func bytesEqual(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func headersEqual(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytesEqual(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func showBytes(b []byte) string {
	if b == nil {
		return "null"
	}
	if len(b) <= maxShown {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(b[:maxShown])), len(b))
}

func showHeaders(hs []kgo.RecordHeader) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, h := range hs {
		if i > 0 {
			sb.WriteString(", ")
		}
		if i == 8 {
			fmt.Fprintf(&sb, "... %d more", len(hs)-i)
			break
		}
		sb.WriteString(showBytes([]byte(h.Key)))
		sb.WriteByte('=')
		sb.WriteString(showBytes(h.Value))
	}
	sb.WriteByte(']')
	return sb.String()
}

func showTimestamp(r *rec) string {
	kind := "create time"
	switch r.Attrs.TimestampType() {
	case 1:
		kind = "log append time"
	case -1:
		kind = "no timestamp type"
	}
	return fmt.Sprintf("%d (%s)", r.Timestamp.UnixMilli(), kind)
}

// summary names a record by offset and key, for missing/extra/order.
func summary(r *rec) string {
	return fmt.Sprintf("%d (key %s)", r.Offset, showBytes(r.Key))
}

func pidString(pid int64) string {
	if r, low, ok := transform.DecodePID(pid); ok {
		return fmt.Sprintf("%d (region 0x%08x, pid %d)", pid, uint32(r), low)
	}
	return strconv.FormatInt(pid, 10)
}

// seqString shows a record's sequence and how it follows from its batch.
func seqString(r *rec) string {
	if r.baseSeq < 0 {
		return fmt.Sprintf("no sequence (base sequence %d)", r.baseSeq)
	}
	return fmt.Sprintf("sequence %d (base sequence %d, %d records before it in its batch)", r.seq(), r.baseSeq, r.place)
}

func batchPlace(first bool) string {
	if first {
		return "first record of a batch"
	}
	return "record inside a batch"
}

func codecName(c uint8) string {
	switch c {
	case 0:
		return "none"
	case 1:
		return "gzip"
	case 2:
		return "snappy"
	case 3:
		return "lz4"
	case 4:
		return "zstd"
	}
	return "codec " + strconv.Itoa(int(c))
}
