package fetcher

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// fetchReq is one Fetch request for a broker loop to send.
type fetchReq struct {
	broker int32
	items  []reqItem
}

// reqItem is one partition of a fetchReq.
type reqItem struct {
	p        tp.Partition
	gen      uint64
	offset   int64
	maxBytes int32
	epoch    int32
	reserved int64 // budget the coordinator reserved for it
}

// outcome is what a broker loop brings back for a fetchReq.
type outcome struct {
	broker int32
	err    error // the request failed as a whole
	// screenErr: Deps.Screen failed for the response's batches, which
	// are fetched again.
	screenErr error
	items     []itemOutcome
}

// itemOutcome is one partition's part of an outcome.
type itemOutcome struct {
	reqItem
	missing bool  // the response does not hold the partition
	code    int16 // the partition's error code
	f       filtered
	records int // bytes of records in the response
	hw      int64
	lso     int64

	logStart int64
	// rangeStart and rangeEnd are the log start offset and the high
	// watermark looked up after OFFSET_OUT_OF_RANGE; rangeErr is the
	// lookup's error.
	rangeStart, rangeEnd int64
	rangeErr             error
}

// collector runs a full garbage collection for each request and reports
// the garbage run it was asked to reclaim: runtime.GC returns after a
// whole cycle that began after the call, so every response let go of
// before the request is reclaimed by then. Started by Run, which waits for
// it.
func (f *Fetcher) collector(ctx context.Context, in <-chan uint64, out chan<- uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case g := <-in:
			f.collect()
			f.m.collections.Inc()
			select {
			case out <- g:
			case <-ctx.Done():
				return
			}
		}
	}
}

// brokerLoop sends the requests of one source broker, one at a time. It is
// started by the coordinator, which waits for it; it ends when its work
// channel is closed or ctx is done.
func (f *Fetcher) brokerLoop(ctx context.Context, broker int32, work <-chan *fetchReq, out chan<- *outcome) {
	for {
		select {
		case <-ctx.Done():
			return
		case req, ok := <-work:
			if !ok {
				return
			}
			o := f.fetch(ctx, req)
			select {
			case out <- o:
			case <-ctx.Done():
				return
			}
		}
	}
}

// fetch sends one READ_COMMITTED Fetch request to the broker's connection and
// takes the response apart per partition.
func (f *Fetcher) fetch(ctx context.Context, fr *fetchReq) *outcome {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1 // a consumer
	req.MaxWaitMillis = int32(f.cfg.MaxWait.Milliseconds())
	req.MinBytes = 1
	// The request limit never binds: the partition limits do, and the
	// coordinator reserves the buffer for their sum. A request limit
	// that binds partway through a partition makes kfake leave out that
	// partition's aborted transactions (DESIGN §11;
	// TestKfakeDropsAbortedTxnsWhenRequestLimitBinds), and a limit of
	// just the sum binds whenever a broker returns a first batch above a
	// partition limit (KIP-74). Real brokers cap the limit at their
	// fetch.max.bytes and compute the aborted transactions for whatever
	// range they return.
	req.MaxBytes = math.MaxInt32
	req.IsolationLevel = 1 // READ_COMMITTED
	// Sessionless: every request names all its partitions and offsets.
	// Sessions (KIP-227) save request bytes for idle partitions; here each
	// request holds only partitions granted buffer space, which changes
	// from request to request, so a session would mostly add and forget.
	req.SessionID = 0
	req.SessionEpoch = -1

	tidx := make(map[string]int)
	for _, it := range fr.items {
		i, ok := tidx[it.p.Topic]
		if !ok {
			i = len(req.Topics)
			tidx[it.p.Topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = it.p.Topic // up to v12
			rt.TopicID = it.p.ID  // v13+
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = it.p.Partition
		rp.CurrentLeaderEpoch = it.epoch
		rp.FetchOffset = it.offset
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = it.maxBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}

	o := &outcome{broker: fr.broker, items: make([]itemOutcome, len(fr.items))}
	for i, it := range fr.items {
		o.items[i].reqItem = it
	}
	kresp, err := f.cl.Broker(int(fr.broker)).Request(ctx, req)
	if err != nil {
		o.err = err
		return o
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		o.err = fmt.Errorf("fetch response error: %w", err)
		return o
	}

	// Responses v13+ name topics by ID only.
	type key struct {
		topic string
		p     int32
	}
	byID := make(map[[16]byte]string, len(tidx))
	for _, it := range fr.items {
		byID[it.p.ID] = it.p.Topic
	}
	got := make(map[key]*kmsg.FetchResponseTopicPartition)
	for i := range resp.Topics {
		rt := &resp.Topics[i]
		topic := rt.Topic
		if topic == "" {
			topic = byID[rt.TopicID]
		}
		for j := range rt.Partitions {
			got[key{topic, rt.Partitions[j].Partition}] = &rt.Partitions[j]
		}
	}

	var outOfRange []*itemOutcome
	for i := range o.items {
		it := &o.items[i]
		rp := got[key{it.p.Topic, it.p.Partition}]
		if rp == nil {
			it.missing = true
			continue
		}
		it.code = rp.ErrorCode
		it.hw, it.lso, it.logStart = rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset
		switch rp.ErrorCode {
		case 0:
			aborted := make([]abortedTxn, len(rp.AbortedTransactions))
			for k, a := range rp.AbortedTransactions {
				aborted[k] = abortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset}
			}
			it.records = len(rp.RecordBatches)
			it.f = filterRecords(rp.RecordBatches, aborted, it.offset, f.cfg.CheckCRCs)
		case kerr.OffsetOutOfRange.Code:
			outOfRange = append(outOfRange, it)
		}
	}
	if len(outOfRange) > 0 {
		f.lookupRange(ctx, outOfRange)
	}
	if f.screen != nil {
		var hs []transform.Header
		for i := range o.items {
			for _, b := range o.items[i].f.Batches {
				hs = append(hs, b.Header)
			}
		}
		if len(hs) > 0 {
			o.screenErr = f.screen(ctx, hs)
		}
	}
	return o
}

// lookupRange looks up the log start offset and high watermark of
// partitions that were out of range.
func (f *Fetcher) lookupRange(ctx context.Context, items []*itemOutcome) {
	var topics []string
	seen := make(map[string]bool)
	for _, it := range items {
		if !seen[it.p.Topic] {
			seen[it.p.Topic] = true
			topics = append(topics, it.p.Topic)
		}
	}
	starts, err := f.adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = f.adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
	}
	for _, it := range items {
		if err != nil {
			it.rangeErr = err
			continue
		}
		s, okS := starts.Lookup(it.p.Topic, it.p.Partition)
		e, okE := ends.Lookup(it.p.Topic, it.p.Partition)
		if !okS || !okE {
			it.rangeErr = fmt.Errorf("list offsets of %s: %w", it.p, kerr.UnknownTopicOrPartition)
			continue
		}
		it.rangeStart, it.rangeEnd = s.Offset, e.Offset
	}
}

// resolver looks up partition leaders for the coordinator, one batch of
// partitions at a time. Run starts it and waits for it.
func (f *Fetcher) resolver(ctx context.Context, in <-chan []resolveReq, out chan<- []resolved) {
	for {
		var reqs []resolveReq
		select {
		case <-ctx.Done():
			return
		case reqs = <-in:
		}
		rs := make([]resolved, len(reqs))
		for i, r := range reqs {
			rs[i].resolveReq = r
			rs[i].leader, rs[i].err = f.leaders.Lookup(ctx, r.key)
			if rs[i].err == nil && rs[i].leader.Broker < 0 {
				rs[i].err = errors.New("no leader")
			}
		}
		select {
		case out <- rs:
		case <-ctx.Done():
			return
		}
	}
}
