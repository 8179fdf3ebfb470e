package fetcher

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/seed83556561/mirrord/transform"
)

// Control record types (the int16 after the version in a control record's
// key), as in Kafka's ControlRecordType.
const (
	controlAbort  = 0
	controlCommit = 1
)

// abortedTxn is one entry of a fetch response's aborted-transaction index:
// the producer ID of an aborted transaction and the offset of its first
// batch in the partition.
type abortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// filtered is what one partition of a READ_COMMITTED fetch response holds
// once control and aborted batches are taken out.
type filtered struct {
	// Batches are the committed data batches, in offset order.
	Batches []Batch
	// End is the offset after the last batch examined: the next fetch
	// offset. It is start if nothing was examined.
	End int64
	// Aborted is the number of aborted batches dropped up to End.
	Aborted int
	// Examined is the number of complete batches examined (delivered,
	// control or aborted), not counting batches wholly below start.
	Examined int
	// Truncated is the size of a partial batch at the end of the records
	// (the broker cut it at the size limit); not an error.
	Truncated int
	// Err is non-nil if a batch at End is malformed or, with CRC checks,
	// fails its CRC: a *transform.CorruptError (errors.Is
	// transform.ErrCorrupt) or a transform.ErrUnsupportedMagic error.
	// The batches before it are good.
	Err error
}

// filterRecords takes apart the record batches of one partition of a
// READ_COMMITTED fetch response that started at offset start, exactly as a
// Kafka consumer does (Apache Kafka, clients/src/main/java/org/apache/kafka/
// clients/consumer/internals/CompletedFetch.java: nextFetchedRecord with
// consumeAbortedTransactionsUpTo, isBatchAborted and containsAbortMarker):
//
//   - the aborted transactions of the response are taken in order of their
//     first offset;
//   - before each batch with a producer ID, every aborted transaction whose
//     first offset is at or below the batch's last offset puts its producer
//     ID into the aborted set;
//   - a control batch is consumed, never delivered; if its (first) record is
//     an ABORT marker, its producer ID leaves the aborted set;
//   - a transactional data batch whose producer ID is in the aborted set is
//     dropped (counted in Aborted);
//   - every other data batch is delivered.
//
// A batch that ends before start or before the end of the batch examined
// before it (a broker never sends one, but a response is not trusted) is
// skipped without effect; one that overlaps the batch before it is
// malformed. A batch that begins before start and ends after it is
// delivered whole: the fetcher never re-encodes. filterRecords never reads
// outside records.
func filterRecords(records []byte, aborted []abortedTxn, start int64, checkCRCs bool) filtered {
	out := filtered{End: start}
	raws, truncated, splitErr := transform.Split(records, nil)
	out.Truncated = truncated

	// Kafka keeps the aborted transactions in a priority queue by first
	// offset; a sorted copy consumed from the front is the same.
	queue := slices.Clone(aborted)
	slices.SortStableFunc(queue, func(a, b abortedTxn) int {
		switch {
		case a.FirstOffset < b.FirstOffset:
			return -1
		case a.FirstOffset > b.FirstOffset:
			return 1
		}
		return 0
	})
	var abortedPIDs map[int64]struct{}

	for _, raw := range raws {
		h, err := transform.ParseHeader(raw)
		if err != nil {
			out.Err = err
			return out
		}
		if h.BaseOffset < 0 || h.LastOffsetDelta < 0 || h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta)-1 {
			out.Err = &transform.CorruptError{Offset: h.BaseOffset, Pos: -1, Check: transform.CheckRecords,
				Detail: fmt.Sprintf("offsets %d + %d are not a valid range", h.BaseOffset, h.LastOffsetDelta)}
			return out
		}
		if h.NextOffset() <= out.End {
			continue // below the fetch offset or a batch seen already
		}
		if out.Examined > 0 && h.BaseOffset < out.End {
			out.Err = &transform.CorruptError{Offset: h.BaseOffset, Pos: -1, Check: transform.CheckRecords,
				Detail: fmt.Sprintf("batch overlaps the previous one, which ends before offset %d", out.End)}
			return out
		}
		if checkCRCs {
			if err := transform.Validate(raw); err != nil {
				out.Err = err
				return out
			}
		}
		if h.ProducerID != -1 {
			last := h.NextOffset() - 1
			for len(queue) > 0 && queue[0].FirstOffset <= last {
				if abortedPIDs == nil {
					abortedPIDs = make(map[int64]struct{})
				}
				abortedPIDs[queue[0].ProducerID] = struct{}{}
				queue = queue[1:]
			}
		}
		switch {
		case h.Control():
			typ, ok, err := controlType(raw, h)
			if err != nil {
				out.Err = err
				return out
			}
			if ok && typ == controlAbort {
				delete(abortedPIDs, h.ProducerID)
			}
		case h.Transactional() && inSet(abortedPIDs, h.ProducerID):
			out.Aborted++
		default:
			out.Batches = append(out.Batches, Batch{Raw: raw, Header: h})
		}
		out.Examined++
		out.End = h.NextOffset()
	}
	if splitErr != nil {
		out.Err = splitErr
	}
	return out
}

func inSet(set map[int64]struct{}, pid int64) bool {
	_, ok := set[pid]
	return ok
}

// controlType returns the type of the first record of a control batch (an
// uncompressed v2 batch as Split returns it, with header h): the int16 at
// bytes 2-3 of the record key (version int16, type int16). ok is false for a
// batch without records. A record that cannot be read is a
// *transform.CorruptError.
//
// A record is: length varint, attributes int8, timestampDelta varlong,
// offsetDelta varint, keyLength varint, key.
func controlType(batch []byte, h transform.Header) (typ int16, ok bool, err error) {
	if h.NumRecords == 0 {
		return 0, false, nil
	}
	bad := func(format string, args ...any) error {
		return &transform.CorruptError{
			Offset: h.BaseOffset,
			Pos:    -1,
			Check:  transform.CheckRecords,
			Detail: "control batch: " + fmt.Sprintf(format, args...),
		}
	}
	b := batch[transform.BatchHeaderSize:]
	length, n := binary.Varint(b)
	if n <= 0 || length < 1 || length > int64(len(b)-n) {
		return 0, false, bad("record length %d does not fit the %d bytes left", length, len(b)-max(n, 0))
	}
	rec := b[n+1 : n+int(length)] // past the attributes byte
	if _, n = binary.Varint(rec); n <= 0 {
		return 0, false, bad("unreadable timestamp delta")
	}
	rec = rec[n:]
	if _, n = binary.Varint(rec); n <= 0 {
		return 0, false, bad("unreadable offset delta")
	}
	rec = rec[n:]
	keyLen, n := binary.Varint(rec)
	if n <= 0 || keyLen < 4 || keyLen > int64(len(rec)-n) {
		return 0, false, bad("key of %d bytes, a control record key has 4", keyLen)
	}
	key := rec[n:]
	return int16(binary.BigEndian.Uint16(key[2:4])), true, nil
}
