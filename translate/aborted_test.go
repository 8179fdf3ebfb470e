package translate

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/transform"
)

// Guards translation in transactional delivery: the destination's batches
// are kept or skipped as a read_committed consumer keeps or skips them, so
// that a dead session's aborted appends are never taken for the mirrors
// its successor appended again. The log: producer 7's aborted transaction
// (offsets 0-3, abort marker 4), producer 8's committed one interleaved
// (2, 5, marker 6), a plain batch (7), producer 7 again in a new
// transaction that commits (8-9, marker 10), and producer 9's aborted
// transaction whose first offset lies before the read (the answer lists
// it all the same) with a batch at 11 and its marker at 12.
func TestAbortedTxns(t *testing.T) {
	const txn, ctl = transform.AttrTransactional, transform.AttrTransactional | transform.AttrControl
	type batch struct {
		base    int64
		lod     int32
		pid     int64
		attrs   int16
		records int32
		want    bool
	}
	log := []batch{
		{0, 1, 7, txn, 2, false},
		{2, 0, 8, txn, 1, true},
		{3, 0, 7, txn, 1, false},
		{4, 0, 7, ctl, 1, false}, // abort marker of 7
		{5, 0, 8, txn, 1, true},
		{6, 0, 8, ctl, 1, false}, // commit marker of 8
		{7, 0, -1, 0, 1, true},
		{8, 1, 7, txn, 2, true}, // 7's next transaction: not aborted
		{10, 0, 7, ctl, 1, false},
		{11, 0, 9, txn, 1, false},
		{12, 0, 9, ctl, 1, false},
		{13, 2, 9, txn, 0, false}, // emptied by the cleaner: nothing to read
	}
	a := newAbortedTxns([]kmsg.FetchResponseTopicPartitionAbortedTransaction{
		{ProducerID: 9, FirstOffset: -5}, // began before the read
		{ProducerID: 7, FirstOffset: 0},
	})
	for _, b := range log {
		h := transform.Header{BaseOffset: b.base, LastOffsetDelta: b.lod, ProducerID: b.pid, Attributes: b.attrs, NumRecords: b.records}
		if got := a.committed(h); got != b.want {
			t.Errorf("batch at %d (producer %d, attributes %#x): committed %v, want %v", b.base, b.pid, b.attrs, got, b.want)
		}
	}
}
