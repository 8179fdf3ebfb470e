// Package check compares a source topic with its mirror record by record:
// the benchmark's proof that both mirrors copied everything. Unlike
// package verify, which also checks what mirrord promises about batches
// (mapped producer IDs, batch boundaries), it checks only what any mirror
// must keep: per partition and in order, the same keys, values, headers and
// timestamps, and the source's compression codec (where the source
// compressed the record's batch).
//
// Goroutines: none of its own; kgo's end when Topic closes its clients.
package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDifferent says that the mirror does not hold what the source holds.
var ErrDifferent = errors.New("mirror differs from source")

// Topic compares every partition of srcTopic (read committed, from its log
// start to its end) with the same partition of dstTopic and returns the
// number of records compared. A difference is an ErrDifferent that names the
// partition and offsets.
//
// rebatched says the mirror produces the records again (a record-level
// mirror: the kgo peer, MirrorMaker): its producer forms batches of its own
// and, like any producer, leaves one uncompressed where compressing does
// not shrink it (kgo does, for a batch of one record that lz4 does not
// make smaller), so a compressed source record may be uncompressed at the
// destination. A mirror that forwards batches (mirrord) must keep a
// compressed record's codec.
func Topic(ctx context.Context, srcOpts, dstOpts []kgo.Opt, srcTopic, dstTopic string, rebatched bool) (int64, error) {
	srcEnds, err := ends(ctx, srcOpts, srcTopic)
	if err != nil {
		return 0, err
	}
	dstEnds, err := ends(ctx, dstOpts, dstTopic)
	if err != nil {
		return 0, err
	}
	if len(srcEnds) != len(dstEnds) {
		return 0, fmt.Errorf("%w: source topic %s has %d partitions, destination topic %s has %d",
			ErrDifferent, srcTopic, len(srcEnds), dstTopic, len(dstEnds))
	}
	var total int64
	for p := range int32(len(srcEnds)) {
		n, err := partition(ctx, srcOpts, dstOpts, srcTopic, dstTopic, p, srcEnds[p], dstEnds[p], rebatched)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ends lists a topic's end offsets by partition.
func ends(ctx context.Context, opts []kgo.Opt, topic string) ([]int64, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("check: client: %w", err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("check: end offsets of %s: %w", topic, err)
	}
	var out []int64
	for p := int32(0); ; p++ {
		o, ok := offs.Lookup(topic, p)
		if !ok {
			break
		}
		if o.Err != nil {
			return nil, fmt.Errorf("check: end offset of %s[%d]: %w", topic, p, o.Err)
		}
		out = append(out, o.Offset)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("check: topic %s has no partitions", topic)
	}
	return out, nil
}

// reader reads one partition up to an end offset.
type reader struct {
	cl    *kgo.Client
	topic string
	end   int64
	next  int64 // offset after the last record read
	queue []*kgo.Record
}

func newReader(opts []kgo.Opt, topic string, p int32, end int64) (*reader, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers occupy offsets (a mirror that writes
		// transactionally, MirrorMaker 2 with exactly-once, leaves them
		// in the destination): kept, they move the read position to the
		// end offset, and fill skips them.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("check: consumer of %s[%d]: %w", topic, p, err)
	}
	return &reader{cl: cl, topic: topic, end: end}, nil
}

func (r *reader) done() bool { return r.next >= r.end }

// fill polls once more.
func (r *reader) fill(ctx context.Context) error {
	fs := r.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr == nil {
			ferr = fmt.Errorf("check: consume %s[%d]: %w", t, p, err)
		}
	})
	if ferr != nil {
		return ferr
	}
	fs.EachRecord(func(rec *kgo.Record) {
		if rec.Attrs.IsControl() {
			r.next = max(r.next, rec.Offset+1)
			return
		}
		if rec.Offset < r.end {
			r.queue = append(r.queue, rec)
		}
		r.next = rec.Offset + 1
	})
	return nil
}

func partition(ctx context.Context, srcOpts, dstOpts []kgo.Opt, srcTopic, dstTopic string, p int32, srcEnd, dstEnd int64, rebatched bool) (int64, error) {
	src, err := newReader(srcOpts, srcTopic, p, srcEnd)
	if err != nil {
		return 0, err
	}
	defer src.cl.Close()
	dst, err := newReader(dstOpts, dstTopic, p, dstEnd)
	if err != nil {
		return 0, err
	}
	defer dst.cl.Close()
	var n int64
	for {
		for len(src.queue) > 0 && len(dst.queue) > 0 {
			s, d := src.queue[0], dst.queue[0]
			if err := same(s, d, rebatched); err != nil {
				return n, fmt.Errorf("%w: source %s[%d] offset %d, destination %s[%d] offset %d: %w",
					ErrDifferent, srcTopic, p, s.Offset, dstTopic, p, d.Offset, err)
			}
			src.queue, dst.queue = src.queue[1:], dst.queue[1:]
			n++
		}
		switch {
		case len(src.queue) == 0 && !src.done():
			err = src.fill(ctx)
		case len(dst.queue) == 0 && !dst.done():
			err = dst.fill(ctx)
		case len(src.queue) > 0:
			return n, fmt.Errorf("%w: destination %s[%d] ends after %d records; source %s[%d] has more from offset %d",
				ErrDifferent, dstTopic, p, n, srcTopic, p, src.queue[0].Offset)
		case len(dst.queue) > 0:
			return n, fmt.Errorf("%w: destination %s[%d] has a record at offset %d beyond the %d records of source %s[%d]",
				ErrDifferent, dstTopic, p, dst.queue[0].Offset, n, srcTopic, p)
		default:
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// same compares what a mirror must keep of a record (rebatched: see Topic).
func same(s, d *kgo.Record, rebatched bool) error {
	switch {
	case !bytes.Equal(s.Key, d.Key):
		return fmt.Errorf("key %q, want %q", d.Key, s.Key)
	case !bytes.Equal(s.Value, d.Value):
		return fmt.Errorf("value differs (%d bytes, want %d)", len(d.Value), len(s.Value))
	case !s.Timestamp.Equal(d.Timestamp):
		return fmt.Errorf("timestamp %s, want %s", d.Timestamp, s.Timestamp)
	case s.Attrs.CompressionType() != d.Attrs.CompressionType() && s.Attrs.CompressionType() != 0 &&
		!(rebatched && d.Attrs.CompressionType() == 0):
		// A producer leaves a batch uncompressed when compressing does
		// not pay (kgo does, for a batch of one small record): a
		// record-level mirror that writes the topic's codec then
		// compresses what the source did not, which keeps the data.
		return fmt.Errorf("compression type %d, want %d", d.Attrs.CompressionType(), s.Attrs.CompressionType())
	case len(s.Headers) != len(d.Headers):
		return fmt.Errorf("%d headers, want %d", len(d.Headers), len(s.Headers))
	}
	for i, h := range s.Headers {
		if h.Key != d.Headers[i].Key || !bytes.Equal(h.Value, d.Headers[i].Value) {
			return fmt.Errorf("header %d is %q=%q, want %q=%q", i, d.Headers[i].Key, d.Headers[i].Value, h.Key, h.Value)
		}
	}
	return nil
}
