package link

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/rawfetch"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// tailChunkBytes is how much of a destination tail one read asks for.
const tailChunkBytes = 4 << 20

// tailRetry is the wait between attempts of a tail read.
var tailRetry = backoff.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

// tailReader reads a destination partition's batches from an offset up to
// an end offset (the high watermark when the read started), in order, with
// READ_UNCOMMITTED isolation: the batches the link appends are not
// transactional, and reconciliation must see every batch below the high
// watermark, foreign ones included. It is used only when the link
// reconciles, so it reads one partition at a time and synchronously.
type tailReader struct {
	cl      *kgo.Client
	leaders *leaders.Cache
	p       tp.Partition
	pos     int64 // next offset to read
	end     int64
}

// next returns the next chunk of batches (whole batches, each starting at
// or after pos), or none when pos has reached end.
func (t *tailReader) next(ctx context.Context) ([][]byte, error) {
	var lastErr error
	for attempt := 0; t.pos < t.end; attempt++ {
		if attempt > 0 {
			if attempt > 30 {
				return nil, fmt.Errorf("read destination %s from offset %d: %w", t.p, t.pos, lastErr)
			}
			if backoff.Sleep(ctx, tailRetry.Wait(attempt)) != nil {
				return nil, ctx.Err()
			}
		}
		batches, err := t.fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			lastErr = err
			t.leaders.Invalidate(t.p.Key())
			continue
		}
		if len(batches) > 0 {
			return batches, nil
		}
		lastErr = errors.New("no batch returned below the high watermark")
	}
	return nil, nil
}

func (t *tailReader) fetch(ctx context.Context) ([][]byte, error) {
	ld, err := t.leaders.Lookup(ctx, t.p.Key())
	if err != nil {
		return nil, err
	}
	p := t.p
	p.ID = ld.ID
	rp, err := rawfetch.Do(ctx, t.cl, ld.Broker, rawfetch.Request{
		Partition: p, Offset: t.pos, LeaderEpoch: ld.Epoch, PartitionMaxBytes: tailChunkBytes,
	})
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		return nil, err
	}
	var out [][]byte
	buf := rp.RecordBatches
	for len(buf) > 0 && t.pos < t.end {
		b, rest, err := transform.NextBatch(buf)
		if errors.Is(err, transform.ErrTruncated) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("destination %s: %w", t.p, err)
		}
		buf = rest
		h, _ := transform.ParseHeader(b)
		if h.NextOffset() <= t.pos {
			continue // a batch before the position, as brokers return whole batches
		}
		out = append(out, b)
		t.pos = h.NextOffset()
	}
	return out, nil
}

// readTail reads the next chunk of a destination tail for reconciliation.
func (s *session) readTail(ctx context.Context, a DoReadTail) Input {
	tr := &tailReader{cl: s.dst, leaders: s.dstLeaders, p: a.Dst, pos: a.From, end: a.End}
	batches, err := tr.next(ctx)
	return InTailRead{Dst: a.Dst.Key(), Batches: batches, Err: err}
}

// sourceEnd looks up a source partition's last stable offset.
func (s *session) sourceEnd(ctx context.Context, src tp.Partition) Input {
	offs, err := s.srcAdm.ListCommittedOffsets(ctx, src.Topic)
	ev := InSourceEnd{Src: src.Key()}
	if err == nil {
		ev.LSO, err = offsetOf(offs, src, "source last stable")
	}
	ev.Err = err
	return ev
}
