package fetcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// Shows a kfake behaviour, not a fetcher fault (DESIGN §11): when a
// READ_COMMITTED fetch reaches the request-level MaxBytes partway through a
// partition, kfake returns that partition's batches but leaves out its
// AbortedTransactions (01_fetch.go breaks out of its loop before it fills
// the list); Apache Kafka computes the list for whatever range it returns. A
// consumer that trusts such a response takes aborted records for committed
// ones. The fetcher therefore sends a request limit that never binds (see
// fetch in broker.go); do not "fix" the filter around this. If this test
// fails, kfake changed: revisit the comment in broker.go.
func TestKfakeDropsAbortedTxnsWhenRequestLimitBinds(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 1, "k")
	txn := producer(t, c, kgo.TransactionalID("caveat"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, txn, "k", 0, "aborted-1", "aborted-2", "aborted-3")
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, producer(t, c, kgo.DisableIdempotentWrite()), "k", 0, "committed")
	k := tp.Key{Topic: "k", Partition: 0}

	full := rawFetchResp(ctx, t, c, k, 0, 1<<20, 1<<20).Topics[0].Partitions[0]
	raws, _, err := transform.Split(full.RecordBatches, nil)
	if err != nil || len(raws) != 3 {
		t.Fatalf("want the aborted batch, the abort marker and the committed batch; got %d batches, %v", len(raws), err)
	}
	if len(full.AbortedTransactions) != 1 {
		t.Fatalf("unlimited fetch: %d aborted transactions, want 1", len(full.AbortedTransactions))
	}

	// A request limit that ends after the marker, before the last batch.
	limit := int32(len(raws[0]) + len(raws[1]))
	cut := rawFetchResp(ctx, t, c, k, 0, limit, 1<<20).Topics[0].Partitions[0]
	if got, _, _ := transform.Split(cut.RecordBatches, nil); len(got) != 2 {
		t.Fatalf("limited fetch returned %d batches, want the aborted batch and the marker", len(got))
	}
	if len(cut.AbortedTransactions) != 0 {
		t.Fatalf("kfake now returns the aborted transactions when the request limit binds (%v): revisit DESIGN §11 and fetch in broker.go", cut.AbortedTransactions)
	}
	// The consequence for a consumer that trusts the response.
	if f := filterRecords(cut.RecordBatches, nil, 0, true); len(f.Batches) != 1 || f.Batches[0].Header.BaseOffset != 0 {
		t.Fatalf("filtering the limited response delivered %v", delivered(f))
	}
}

// interceptor answers Fetch requests for partition 0 of a topic with
// crafted records; it counts what it answered and the partition limits of
// every request it saw.
type interceptor struct {
	mu       sync.Mutex
	answered int
	limits   map[int64][]int32 // fetch offset → PartitionMaxBytes of each request
}

// intercept installs the control: answer returns the records to answer a
// fetch at offset with, or false to let kfake serve it. With keep, every
// matching fetch is answered, else only the first.
func intercept(c *kfake.Cluster, topic string, id [16]byte, hw int64, keep bool, answer func(offset int64) ([]byte, bool)) *interceptor {
	ic := &interceptor{limits: make(map[int64][]int32)}
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		if len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 {
			return nil, nil, false
		}
		rp := req.Topics[0].Partitions[0]
		ic.mu.Lock()
		defer ic.mu.Unlock()
		ic.limits[rp.FetchOffset] = append(ic.limits[rp.FetchOffset], rp.PartitionMaxBytes)
		records, ok := answer(rp.FetchOffset)
		if !ok || !keep && ic.answered > 0 {
			return nil, nil, false
		}
		c.KeepControl() // to go on observing
		ic.answered++
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = topic, id
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hw, hw, 0
		sp.RecordBatches = records
		rt.Partitions = append(rt.Partitions, sp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	return ic
}

func (ic *interceptor) count() int { ic.mu.Lock(); defer ic.mu.Unlock(); return ic.answered }

// Guards damaged responses, answered by kfake's Control in place of the real
// fetch: a truncated trailing batch ends the result before it and the
// fetcher continues exactly; a response with no complete batch doubles the
// partition limit; a corrupt batch is fetched again once: clean then, the
// stream is exact; corrupt again, the partition fails naming the offset.
func TestTruncatedAndCorruptResponses(t *testing.T) {
	flipLast := func(b []byte) { b[len(b)-1] ^= 0x55 }
	flipMagic := func(b []byte) { b[16] = 7 }
	for _, tc := range []struct {
		name      string
		checkCRCs bool
		keep      bool
		// craft returns the answer for a fetch at offset, given the
		// real batches of the partition, or false.
		craft    func(batches [][]byte, offset int64) ([]byte, bool)
		answered int
		failAt   int   // index of the batch the partition fails at; -1: exact
		doubled  int32 // the partition limit the refetch at 0 must use; 0: unchecked
	}{
		{
			name: "truncated trailing batch",
			craft: func(bs [][]byte, off int64) ([]byte, bool) {
				if off != 0 {
					return nil, false
				}
				return slices.Concat(bs[0], bs[1], bs[2], bs[3][:len(bs[3])/2]), true
			},
			answered: 1, failAt: -1,
		},
		{
			name: "no complete batch doubles the partition limit",
			craft: func(bs [][]byte, off int64) ([]byte, bool) {
				if off != 0 {
					return nil, false
				}
				return bs[0][:len(bs[0])-1], true
			},
			answered: 1, failAt: -1, doubled: 2 * DefaultPartitionMaxBytes,
		},
		{
			name:      "crc mismatch once, clean on the refetch",
			checkCRCs: true,
			craft:     corruptFrom(2, flipLast, 0),
			answered:  1, failAt: -1,
		},
		{
			name:      "crc mismatch twice fails",
			checkCRCs: true, keep: true,
			craft:    corruptFrom(2, flipLast, -1),
			answered: 2, failAt: 2,
		},
		{
			name:     "bad magic twice fails without crc checks",
			keep:     true,
			craft:    corruptFrom(4, flipMagic, -1),
			answered: 2, failAt: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t)
			c := source(t, 1, "t")
			cl := producer(t, c, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
			for i := range 6 {
				produce(ctx, t, cl, "t", 0, fmt.Sprintf("b%d-0", i), fmt.Sprintf("b%d-1", i), fmt.Sprintf("b%d-2", i))
			}
			endAll(ctx, t, c, "t", 1)
			ends := endOffsets(ctx, t, c, "t")
			want := readCommitted(ctx, t, c, "t", ends)
			k := tp.Key{Topic: "t", Partition: 0}
			records, _ := rawFetch(ctx, t, c, k, 0)
			batches, _, err := transform.Split(records, nil)
			if err != nil || len(batches) != 7 {
				t.Fatalf("%d batches, %v", len(batches), err)
			}
			base := func(i int) int64 { h, _ := transform.ParseHeader(batches[i]); return h.BaseOffset }
			id := c.TopicInfo("t").TopicID
			ic := intercept(c, "t", id, ends[k], tc.keep, func(off int64) ([]byte, bool) { return tc.craft(batches, off) })

			f, _ := newFetcher(t, c, Config{CheckCRCs: tc.checkCRCs})
			con := newConsumer(t, f)
			p := tp.Partition{Topic: "t", Partition: 0}
			con.assign(p, 0)
			run(t, f)
			if tc.failAt < 0 {
				con.until(ctx, ends)
				compare(t, con.s, want)
			} else {
				var r Result
				for r.Err == nil {
					select {
					case r = <-f.Results():
						if r.Err == nil {
							con.take(r)
						}
					case <-ctx.Done():
						t.Fatal("the partition did not fail")
					}
				}
				at := base(tc.failAt)
				if !errors.Is(r.Err, ErrCorrupt) || !errors.Is(r.Err, transform.ErrCorrupt) || r.Start != at ||
					!strings.Contains(r.Err.Error(), fmt.Sprintf("t[0] at offset %d, fetched twice", at)) {
					t.Fatalf("result [%d, %d) error %v, want ErrCorrupt at offset %d", r.Start, r.End, r.Err, at)
				}
				compare(t, con.s, map[tp.Key][]rec{k: want[k][:at]})
			}
			if n := ic.count(); n != tc.answered {
				t.Errorf("%d fetches answered with damaged data, want %d", n, tc.answered)
			}
			if tc.doubled != 0 {
				ic.mu.Lock()
				limits := ic.limits[0]
				ic.mu.Unlock()
				if len(limits) < 2 || limits[1] != tc.doubled {
					t.Errorf("partition limits of the fetches at 0: %v, want the second at %d", limits, tc.doubled)
				}
			}
		})
	}
}

// corruptFrom answers fetches at offset 0 and at the base of batch bad with
// the batches from there on, batch bad damaged by damage. only restricts the
// answers to fetches at that offset (-1: both).
func corruptFrom(bad int, damage func([]byte), only int64) func([][]byte, int64) ([]byte, bool) {
	return func(bs [][]byte, off int64) ([]byte, bool) {
		h, _ := transform.ParseHeader(bs[bad])
		if (off != 0 && off != h.BaseOffset) || (only >= 0 && off != only) {
			return nil, false
		}
		first := 0
		if off != 0 {
			first = bad
		}
		var out []byte
		for i := first; i < len(bs); i++ {
			b := slices.Clone(bs[i])
			if i == bad {
				damage(b)
			}
			out = append(out, b...)
		}
		return out, true
	}
}
