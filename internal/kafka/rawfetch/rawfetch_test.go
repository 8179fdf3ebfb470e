package rawfetch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Guards the reason the package exists: a READ_COMMITTED fetch whose
// partition limit is smaller than the first batch still gets that batch
// (KIP-74) and the partition's aborted-transaction list, because the
// request limit never binds (DESIGN §11).
func TestDoKeepsAbortedList(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, "t"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr := kafkatest.Client(t, c, kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	for _, commit := range []bool{false, true} {
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := pr.ProduceSync(ctx, kgo.StringRecord("a"), kgo.StringRecord("b")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := pr.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	cl := kafkatest.Client(t, c)
	md, err := kadm.NewClient(cl).Metadata(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	td := md.Topics["t"]
	p := tp.Partition{Topic: "t", ID: td.ID, Partition: 0}
	rp, err := Do(ctx, cl, td.Partitions[0].Leader, Request{Partition: p, LeaderEpoch: -1, PartitionMaxBytes: 1, ReadCommitted: true})
	if err != nil {
		t.Fatal(err)
	}
	if rp.ErrorCode != 0 || len(rp.RecordBatches) == 0 || len(rp.AbortedTransactions) != 1 {
		t.Fatalf("partition answer: error %d, %d bytes, aborted %v; want data and one aborted transaction", rp.ErrorCode, len(rp.RecordBatches), rp.AbortedTransactions)
	}

	// A partition the broker does not have is answered with its error
	// code, for the caller to interpret.
	missing := tp.Partition{Topic: "t", ID: td.ID, Partition: 7}
	rp, err = Do(ctx, cl, td.Partitions[0].Leader, Request{Partition: missing, LeaderEpoch: -1, PartitionMaxBytes: 1})
	if err != nil || !errors.Is(kerr.ErrorForCode(rp.ErrorCode), kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown partition: %v, answer %+v", err, rp)
	}
}
