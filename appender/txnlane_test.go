package appender_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// produceRequests reads the appender's mirrord_produce_request_batches
// histogram: the Produce requests sent, and the batches they carried.
func produceRequests(t *testing.T, reg *prometheus.Registry) (requests, batches int) {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() != "mirrord_produce_request_batches" {
			continue
		}
		for _, m := range mf.GetMetric() {
			requests += int(m.GetHistogram().GetSampleCount())
			batches += int(m.GetHistogram().GetSampleSum())
		}
	}
	return requests, batches
}

// holdEachBroker makes the first transactional Produce to each broker
// through px wait until release is called.
func holdEachBroker(t *testing.T, px *faultproxy.Proxy) (release func()) {
	r := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(r) }) }
	t.Cleanup(release)
	var mu sync.Mutex
	seen := map[int32]bool{}
	px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
		if f.APIKey != int16(kmsg.Produce) || f.IsResponse() {
			return faultproxy.Pass
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version = f.Version
		if req.ReadFrom(f.Request) != nil || req.TransactionID == nil {
			return faultproxy.Pass
		}
		mu.Lock()
		first := !seen[f.Node]
		seen[f.Node] = true
		mu.Unlock()
		if first {
			<-r
		}
		return faultproxy.Pass
	})
	return release
}

// Guards Produce requests shared by partitions (txnlane.go): appends to
// partitions of one broker that come while the broker has its most
// requests unanswered collect in one request, sent as soon as one is
// answered; the records of every partition read back in order, also when
// each partition has several batches in flight at once, and exactly once
// when the answer to a request of several partitions is lost.
func TestTxnSharedRequests(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		const n = 48
		e := newTxnEnv(t, b, "txn-shared", n)
		reg := prometheus.NewRegistry()
		e.metrics = appender.NewMetrics(reg)
		px := proxied(t, e.c)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-shared"), kgo.SeedBrokers(px.Addrs()...))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kinds := []string{"idempotent", "transactional", "plain"}
		batches := make([][]srcBatch, n)
		for i := range n {
			for step := range 5 {
				batches[i] = append(batches[i], sourceBatch(kinds[(i+step)%3], 10*i+step+1, 1+(i+step)%4, int8((i+step)%5)))
			}
		}
		parts := make([]tp.Key, n)
		for i := range n {
			parts[i] = e.parts[i].Key()
		}
		if err := s.txn.Add(ctx, parts); err != nil {
			t.Fatal(err)
		}

		// Round 0 (retries allowed): every partition's leader is known
		// and serves the new topic.
		if !warmUp(ctx, t, e, s, func(i int) []byte { return batches[i][0].raw }) {
			return
		}
		before, carriedBefore := produceRequests(t, reg)
		retriesBefore := errorsByKind(t, reg)[appender.KindRetriable]

		// Round 1: every broker's first Produce is held on its
		// connection, so no request is answered; the appends after a
		// broker's first requests must wait in one collecting request.
		release := holdEachBroker(t, px)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[i], clone(batches[i][1].raw))
			})
		}
		// Until every append is in a request sent or collecting, and
		// each collecting request waits for a place.
		var sent, collecting, lanes int
		for {
			var stuck bool
			if sent, collecting, lanes, stuck = s.txn.Lanes(); sent+collecting == n && stuck {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("%d batches sent and %d collecting, of %d appended", sent, collecting, n)
			}
		}
		requests, _ := produceRequests(t, reg)
		requests -= before
		t.Logf("held: %d requests carry %d batches, %d batches collect in %d requests", requests, sent, collecting, lanes)
		release()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// Every collecting request went out as one.
		total, carried := produceRequests(t, reg)
		total, carried = total-before, carried-carriedBefore
		if retries := errorsByKind(t, reg)[appender.KindRetriable] - retriesBefore; retries > 0 {
			t.Fatalf("%v batches were sent again in round 1", retries)
		}
		if total != requests+lanes || carried != n {
			t.Fatalf("%d requests carried %d batches, want %d requests (%d held, %d collecting) carrying %d", total, carried, requests+lanes, requests, lanes, n)
		}
		leaders := map[int32]bool{}
		for _, p := range parts {
			l, err := s.ls.Lookup(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			leaders[l.Broker] = true
		}
		brokers := len(leaders)
		if total > brokers*(appender.DefaultMaxInflightPerBroker+1) {
			t.Fatalf("%d requests for %d batches to %d brokers, want at most %d per broker", total, n, brokers, appender.DefaultMaxInflightPerBroker+1)
		}

		total, carried = produceRequests(t, reg)
		// Round 2: two batches of every partition in flight at once.
		for i := range n {
			rs := make([]*appender.Reservation, 2)
			for j := range rs {
				r, err := s.txn.Reserve(parts[i], int32(len(batches[i][j+2].recs)))
				if err != nil {
					t.Fatal(err)
				}
				rs[j] = r
			}
			for j, r := range rs {
				wg.Go(func() {
					if _, err := s.txn.AppendReserved(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[i], clone(batches[i][j+2].raw), r); err != nil {
						t.Errorf("append batch %d of %s: %v", j+3, e.parts[i], err)
					}
				})
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		after, carried2 := produceRequests(t, reg)
		t.Logf("round 2: %d requests carried %d batches", after-total, carried2-carried)

		// Round 3: the answer to a request of several partitions is lost
		// (the broker appended them all): every batch in it is sent again
		// and the broker answers each repeat with its first append.
		var armed atomic.Bool
		armed.Store(true)
		lost := make(chan int, 1)
		px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
			if f.APIKey != int16(kmsg.Produce) || !f.IsResponse() || !armed.Load() {
				return faultproxy.Pass
			}
			req := kmsg.NewPtrProduceRequest()
			req.Version = f.Version
			if req.ReadFrom(f.Request) != nil || req.TransactionID == nil {
				return faultproxy.Pass
			}
			k := 0
			for _, rt := range req.Topics {
				k += len(rt.Partitions)
			}
			if k < 2 || !armed.CompareAndSwap(true, false) {
				return faultproxy.Pass
			}
			lost <- k
			return faultproxy.DropConnection
		})
		retries := errorsByKind(t, reg)[appender.KindRetriable]
		for i := range n {
			wg.Go(func() {
				if _, err := s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[i], clone(batches[i][4].raw)); err != nil {
					t.Errorf("append batch 5 of %s: %v", e.parts[i], err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		select {
		case k := <-lost:
			again := errorsByKind(t, reg)[appender.KindRetriable] - retries
			t.Logf("round 3: the answer for %d batches was lost; %v attempts sent again", k, again)
			if again < float64(k) {
				t.Fatalf("the answer for %d batches was lost, but only %v were sent again", k, again)
			}
		default:
			t.Fatal("no request of several partitions: no answer was lost")
		}
		end(t, s, true)
		var want []got
		for i := range n {
			want = append(want, wantOf(int32(i), batches[i]...)...)
		}
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), want)
	})
}

// Guards the count of a shared request: mirrord_produce_request_batches
// counts the mirrored batches of each request, not the state topic's
// (Uncounted) ones that share it, as produce_requests_total counts only
// requests that carry a mirrored batch. Before, a request of one mirrored
// and one state batch was counted as two batches.
func TestTxnSharedRequestCountsMirroredBatches(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		const n = 24
		e := newTxnEnv(t, b, "txn-counted", n)
		reg := prometheus.NewRegistry()
		e.metrics = appender.NewMetrics(reg)
		px := proxied(t, e.c)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-counted"), kgo.SeedBrokers(px.Addrs()...))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		parts := make([]tp.Key, n)
		for i := range n {
			parts[i] = e.parts[i].Key()
		}
		if err := s.txn.Add(ctx, parts); err != nil {
			t.Fatal(err)
		}
		// Round 0 (retries allowed): every partition's leader is known
		// and serves the new topic (a real broker's first answers may be
		// NOT_LEADER_OR_FOLLOWER, and a batch sent again is a request
		// more).
		if !warmUp(ctx, t, e, s, func(i int) []byte { return sourceBatch("idempotent", i+1, 2, 0).raw }) {
			return
		}
		requestsBefore, batchesBefore := produceRequests(t, reg)
		retriesBefore := errorsByKind(t, reg)[appender.KindRetriable]
		// The partitions of the broker that leads the most.
		byBroker := map[int32][]int{}
		var most int32
		for i, p := range parts {
			l, err := s.ls.Lookup(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			byBroker[l.Broker] = append(byBroker[l.Broker], i)
			if len(byBroker[l.Broker]) > len(byBroker[most]) {
				most = l.Broker
			}
		}
		on := byBroker[most]
		places := appender.DefaultMaxInflightPerBroker
		if len(on) < places+2 {
			t.Fatalf("broker %d leads %d of %d partitions, want %d", most, len(on), n, places+2)
		}
		// Every place of the broker is taken by a request held
		// unanswered; a mirrored and a state batch then collect in the
		// next request.
		release := holdEachBroker(t, px)
		var wg sync.WaitGroup
		appendTo := func(i int, uncounted bool) {
			wg.Go(func() {
				if _, err := s.txn.Append(ctx, appender.TxnAppendConfig{Uncounted: uncounted}, s.ls, e.parts[i], clone(sourceBatch("idempotent", n+i+1, 2, 0).raw)); err != nil {
					t.Errorf("append to %s: %v", e.parts[i], err)
				}
			})
		}
		waitLanes := func(wantSent, wantCollecting int) {
			for {
				sent, collecting, _, stuck := s.txn.Lanes()
				if sent == wantSent && collecting == wantCollecting && (wantCollecting == 0 || stuck) {
					return
				}
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
					t.Fatalf("%d batches sent and %d collecting, want %d and %d", sent, collecting, wantSent, wantCollecting)
				}
			}
		}
		for k, i := range on[:places] {
			appendTo(i, false)
			waitLanes(k+1, 0) // one request each
		}
		appendTo(on[places], false)
		appendTo(on[places+1], true)
		waitLanes(places, 2)
		release()
		wg.Wait()
		if t.Failed() {
			return
		}
		if retries := errorsByKind(t, reg)[appender.KindRetriable] - retriesBefore; retries > 0 {
			t.Fatalf("%v batches were sent again after round 0", retries)
		}
		requests, batches := produceRequests(t, reg)
		requests, batches = requests-requestsBefore, batches-batchesBefore
		if requests != places+1 || batches != places+1 {
			t.Fatalf("mirrord_produce_request_batches counted %d requests of %d batches, want %d requests of %d mirrored batches (the state batch that shared the last one not counted)",
				requests, batches, places+1, places+1)
		}
		end(t, s, true)
	})
}

// warmUp appends batch(i) to every partition i of e, all at once, and
// says whether every append succeeded (each failure is reported). The
// lane tests' first round: it lets the session learn every partition's
// leader and the broker serve the new topic, retries allowed, before the
// round a test counts or holds.
func warmUp(ctx context.Context, t *testing.T, e *txnEnv, s *session, batch func(i int) []byte) bool {
	t.Helper()
	var wg sync.WaitGroup
	for i := range e.parts {
		wg.Go(func() {
			if _, err := s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[i], clone(batch(i))); err != nil {
				t.Errorf("warm-up append to %s: %v", e.parts[i], err)
			}
		})
	}
	wg.Wait()
	return !t.Failed()
}
