package javaclient

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type tp struct {
	topic     string
	partition int32
}

// Guards the independent client itself before it judges mirrors: against
// one real broker, the Java consumer (read_committed) returns exactly the
// records the Java producers committed, in offset order per partition, with
// their keys, values and headers, and none of the aborted ones.
func TestProduceConsume(t *testing.T) {
	for _, v := range realkafka.TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			t0 := time.Now()
			jc := ForTest(t)
			t.Logf("java client built (or found) in %s", time.Since(t0).Round(time.Millisecond))
			c := realkafka.ForTest(t, realkafka.Config{Version: v})
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			topics := []string{"java-a", "java-b"}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, topics...); err != nil {
				t.Fatal(err)
			}

			t1 := time.Now()
			sent, err := jc.Produce(ctx, ProduceConfig{Bootstrap: c.Addrs(), Topics: topics, Records: 40, Transactions: 9, TxnRecords: 6, AbortEvery: 3})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("produce took %s", time.Since(t1).Round(time.Millisecond))
			want := map[tp][]Record{}
			aborted := map[tp]map[int64]bool{}
			producers := map[string]int{}
			nAborted := 0
			for _, r := range sent {
				k := tp{r.Topic, r.Partition}
				producers[r.Producer+"/"+r.Status]++
				if r.Committed() {
					want[k] = append(want[k], r)
					continue
				}
				nAborted++
				if aborted[k] == nil {
					aborted[k] = map[int64]bool{}
				}
				aborted[k][r.Offset] = true
			}
			if nAborted != 3*6 || len(sent) != 5*40+9*6 {
				t.Fatalf("produced %d records, %d aborted (%v); want %d and %d", len(sent), nAborted, producers, 5*40+9*6, 18)
			}

			t1 = time.Now()
			got, err := jc.Consume(ctx, ConsumeConfig{Bootstrap: c.Addrs(), Topics: topics})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("consume took %s: %d records", time.Since(t1).Round(time.Millisecond), len(got))
			byTP := map[tp][]Record{}
			for _, r := range got {
				k := tp{r.Topic, r.Partition}
				if aborted[k][r.Offset] {
					t.Errorf("consumed aborted record %s/%d@%d", r.Topic, r.Partition, r.Offset)
				}
				if r.TimestampType != "CreateTime" {
					t.Errorf("%s/%d@%d: timestamp type %q", r.Topic, r.Partition, r.Offset, r.TimestampType)
				}
				byTP[k] = append(byTP[k], r)
			}
			if len(byTP) != len(want) {
				t.Errorf("consumed %d partitions, produced to %d", len(byTP), len(want))
			}
			// Sort what the producers committed by offset: several producers
			// wrote each partition, one after the other.
			for k, ws := range want {
				sortByOffset(ws)
				gs := byTP[k]
				if len(gs) != len(ws) {
					t.Errorf("%v: consumed %d records, committed %d", k, len(gs), len(ws))
					continue
				}
				for i := range ws {
					if err := same(gs[i], ws[i]); err != nil {
						t.Errorf("%v record %d: %v", k, i, err)
					}
				}
			}
		})
	}
}

func sortByOffset(rs []Record) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Offset < rs[j-1].Offset; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func same(got, want Record) error {
	switch {
	case got.Offset != want.Offset:
		return fmt.Errorf("offset %d, want %d", got.Offset, want.Offset)
	case !bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil):
		return fmt.Errorf("key %q, want %q", got.Key, want.Key)
	case !bytes.Equal(got.Value, want.Value):
		return fmt.Errorf("value %q, want %q", got.Value, want.Value)
	case got.Timestamp != want.Timestamp:
		return fmt.Errorf("timestamp %d, want %d", got.Timestamp, want.Timestamp)
	case len(got.Headers) != len(want.Headers):
		return fmt.Errorf("headers %v, want %v", got.Headers, want.Headers)
	}
	for i := range got.Headers {
		g, w := got.Headers[i], want.Headers[i]
		if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
			return fmt.Errorf("header %d %q=%q, want %q=%q", i, g.Key, g.Value, w.Key, w.Value)
		}
	}
	return nil
}
