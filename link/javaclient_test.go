package link

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/javaclient"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// An independent client judges the mirror (issue 9): the Java client's
// idempotent producers (one per compression type) and its transactional
// producer (transactions spanning partitions and topics, every third
// aborted) write the source, before the link starts and while it runs,
// with the agent killed once in between; the Java consumer
// (read_committed, check.crcs) then reads the destination, and each
// partition must hold exactly the committed records, in source order, with
// their keys, values, headers and timestamps.
func TestJavaClientsThroughMirror(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		jc := javaclient.ForTest(t)
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		f := e.mirrored(t, "java", srcTopic("java-a", 3), srcTopic("java-b", 3))
		src, dst, topics := f.src, f.dst, f.topics("java-a", "java-b")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		produce := func(round string) ([]javaclient.Record, error) {
			return jc.Produce(ctx, javaclient.ProduceConfig{
				Bootstrap: src.Addrs(), Topics: topics, Records: 60,
				Transactions: 12, TxnRecords: 7, AbortEvery: 3,
				TransactionalID: e.topic("java-" + round),
			})
		}
		sent, err := produce("before")
		if err != nil {
			t.Fatal(err)
		}
		l := f.start("java")
		l.waitState(t, Mirroring, 60*time.Second)
		var during []javaclient.Record
		var duringErr error
		done := make(chan struct{})
		go func() { defer close(done); during, duringErr = produce("during") }()
		time.Sleep(2 * time.Second) // the JVM starts and begins writing
		l.stop(t, true)
		<-done
		if duringErr != nil {
			t.Fatal(duringErr)
		}
		f.start("java")
		after, err := produce("after")
		if err != nil {
			t.Fatal(err)
		}
		sent = slices.Concat(sent, during, after)
		rep := f.waitMirrored(2*time.Minute, "java-a", "java-b")

		got, err := jc.Consume(ctx, javaclient.ConsumeConfig{Bootstrap: dst.Addrs(), Topics: topics})
		if err != nil {
			t.Fatal(err)
		}
		type part struct {
			topic string
			p     int32
		}
		want := map[part][]javaclient.Record{}
		var committed, aborted int
		for _, r := range sent {
			if !r.Committed() {
				aborted++
				continue
			}
			committed++
			want[part{r.Topic, r.Partition}] = append(want[part{r.Topic, r.Partition}], r)
		}
		have := map[part][]javaclient.Record{}
		for _, r := range got {
			if r.TimestampType != "CreateTime" {
				t.Fatalf("destination %s[%d] offset %d: timestamp type %s", r.Topic, r.Partition, r.Offset, r.TimestampType)
			}
			have[part{r.Topic, r.Partition}] = append(have[part{r.Topic, r.Partition}], r)
		}
		for k, ws := range want {
			slices.SortFunc(ws, func(a, b javaclient.Record) int { return cmp.Compare(a.Offset, b.Offset) })
			gs := have[k]
			if len(gs) != len(ws) {
				t.Errorf("%s[%d]: the Java consumer read %d records at the destination, the Java producers committed %d", k.topic, k.p, len(gs), len(ws))
				continue
			}
			for i := range ws {
				if err := sameJavaRecord(gs[i], ws[i]); err != nil {
					t.Fatalf("%s[%d]: destination offset %d (source offset %d): %v", k.topic, k.p, gs[i].Offset, ws[i].Offset, err)
				}
			}
		}
		if len(have) != len(want) {
			t.Errorf("destination has records in %d partitions, the source in %d", len(have), len(want))
		}
		t.Logf("%s: Java producers committed %d records (%d aborted); the Java consumer read all %d from the mirror in order (verify: %d records)",
			b, committed, aborted, len(got), rep.Records)
	})
}

// sameJavaRecord compares what a consumer sees of two records: key, value,
// headers and timestamp, null and empty told apart.
func sameJavaRecord(got, want javaclient.Record) error {
	switch {
	case !bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil):
		return fmt.Errorf("key %q, want %q", got.Key, want.Key)
	case !bytes.Equal(got.Value, want.Value) || (got.Value == nil) != (want.Value == nil):
		return fmt.Errorf("value %q, want %q", got.Value, want.Value)
	case got.Timestamp != want.Timestamp:
		return fmt.Errorf("timestamp %d, want %d", got.Timestamp, want.Timestamp)
	case len(got.Headers) != len(want.Headers):
		return fmt.Errorf("headers %v, want %v", got.Headers, want.Headers)
	}
	for i, g := range got.Headers {
		w := want.Headers[i]
		if g.Key != w.Key || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) {
			return fmt.Errorf("header %d %q=%q, want %q=%q", i, g.Key, g.Value, w.Key, w.Value)
		}
	}
	return nil
}
