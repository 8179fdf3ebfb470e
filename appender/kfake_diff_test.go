package appender_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// Pins a kfake difference (docs/kafka-differences.md, row 8): an
// InitProducerId for a transactional.id that exists already bumps its
// epoch, and Kafka's coordinator takes the request's transaction timeout
// as the one it aborts the next transactions by (TransactionMetadata's
// prepareIncrementProducerEpoch is given the request's timeout). kfake
// keeps the timeout of the transactional.id's first InitProducerId. A link
// whose session_timeout (the state session's transaction timeout) or
// transaction_timeout changed between two sessions therefore runs its
// next session under the new timeout on Kafka and under the first one on
// kfake; no test depends on either. When kfake takes the new timeout too,
// this test fails on kfake and the row is due to go.
func TestTxnReinitTransactionTimeout(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-reinit-timeout", 1)
		txid := mirrortest.NamesFor(t, b).Of("txn-reinit-timeout")
		e.timeout = 60 * time.Second
		e.open(t, txid)
		e.timeout = 20 * time.Second
		e.open(t, txid)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		described, err := kadm.NewClient(e.c.Client).DescribeTransactions(ctx, txid)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := described[txid]
		if !ok || d.Err != nil {
			t.Fatalf("DescribeTransactions %s: %+v, %v", txid, d, d.Err)
		}
		want := int32(20_000) // Kafka: the newest InitProducerId's
		if !b.Real() {
			want = 60_000 // kfake: the first InitProducerId's
		}
		if d.TimeoutMillis != want {
			t.Fatalf("%s: transaction timeout after a second InitProducerId (60 s, then 20 s) is %d ms, want %d", b, d.TimeoutMillis, want)
		}
	})
}
