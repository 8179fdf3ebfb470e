package transform

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// BatchHeaderSize is the size of a record batch header (format v2, magic 2):
// everything before the first record.
const BatchHeaderSize = 61

// Attribute bits of a v2 record batch.
const (
	AttrCompressionMask    = 0x07 // 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
	AttrTimestampLogAppend = 0x08
	AttrTransactional      = 0x10
	AttrControl            = 0x20
)

// MaxBatchLength is the largest length field (bytes after the length field)
// that NextBatch and Split accept. Kafka bounds a batch by message.max.bytes
// and a Produce request by socket.request.max.bytes (100 MiB by default); a
// length beyond 1 GiB can only be damage, and taking it for a batch cut at the
// fetch limit would make a fetcher ask for ever larger responses.
const MaxBatchLength = 1 << 30

// Byte positions of the v2 header fields (DESIGN §5), the one definition
// every package reads batch headers by.
const (
	PosBaseOffset      = 0
	PosLength          = 8
	PosLeaderEpoch     = 12
	PosMagic           = 16
	PosCRC             = 17
	PosAttributes      = 21 // the CRC covers this byte to the end
	PosLastOffsetDelta = 23
	PosFirstTimestamp  = 27
	PosMaxTimestamp    = 35
	PosProducerID      = 43
	PosProducerEpoch   = 51
	PosBaseSequence    = 53
	PosNumRecords      = 57

	// LengthOverhead is what precedes the bytes the length field counts
	// (base offset and length).
	LengthOverhead = PosLeaderEpoch
	// minBatchLength is the length field of a batch without records.
	minBatchLength = BatchHeaderSize - LengthOverhead
)

// Errors for the decisions a caller of the batch codec makes. Errors carry
// the batch's base offset and, where known, its byte position in the fetched
// buffer; the caller adds topic and partition.
var (
	// ErrCorrupt: the bytes are not a well-formed v2 batch (bad magic,
	// length or CRC, undecodable records). The concrete error is a
	// *CorruptError. A fetcher refetches; persistent damage stops the
	// partition.
	ErrCorrupt = errors.New("corrupt record batch")
	// ErrTruncated: the buffer ends inside a batch. NextBatch returns it
	// for the partial batch that brokers leave at the end of a fetch
	// response cut at the size limit; Split reports that tail as a byte
	// count instead. ParseHeader returns it (wrapped) for fewer than 61
	// bytes.
	ErrTruncated = errors.New("truncated record batch")
	// ErrUnsupportedMagic: a legacy message set (magic 0 or 1). mirrord
	// needs record batch format v2 (Kafka 0.11+ message format).
	ErrUnsupportedMagic = errors.New("unsupported message format")
	// ErrControlBatch: a control batch (transaction marker) was given to
	// Reencode. Control batches are consumed, never forwarded.
	ErrControlBatch = errors.New("control batch cannot be forwarded")
	// ErrEmptyBatch: a batch without records (compaction can leave one to
	// keep producer state). Brokers refuse such a batch from a client, so
	// it is not forwarded; Reencode returns this error for it.
	ErrEmptyBatch = errors.New("record batch has no records")
)

// Names of the checks a CorruptError reports.
const (
	CheckMagic   = "magic"
	CheckLength  = "length"
	CheckCRC     = "crc"
	CheckCodec   = "compression"
	CheckRecords = "records"
)

// CorruptError says which check a batch failed and where. errors.Is(err,
// ErrCorrupt) holds for it.
type CorruptError struct {
	// Offset is the batch's base offset as its header states it, or -1 if
	// the buffer is too short to hold one.
	Offset int64
	// Pos is the byte position of the batch in the fetched buffer, or -1
	// if not known (Validate and ParseHeader see a single batch; a caller
	// that knows the position may set it before wrapping the error).
	Pos int
	// Check is the failed check: CheckMagic, CheckLength, CheckCRC,
	// CheckCodec or CheckRecords.
	Check string
	// Detail says what was found.
	Detail string
}

func (e *CorruptError) Error() string {
	if e.Pos >= 0 {
		return fmt.Sprintf("corrupt record batch at offset %d (byte %d): %s check failed: %s", e.Offset, e.Pos, e.Check, e.Detail)
	}
	return fmt.Sprintf("corrupt record batch at offset %d: %s check failed: %s", e.Offset, e.Check, e.Detail)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corrupt(b []byte, pos int, check, format string, args ...any) error {
	return &CorruptError{Offset: baseOffsetOf(b), Pos: pos, Check: check, Detail: fmt.Sprintf(format, args...)}
}

func unsupportedMagic(b []byte, pos int) error {
	where := ""
	if pos >= 0 {
		where = fmt.Sprintf(" (byte %d)", pos)
	}
	return fmt.Errorf("%w: magic %d in batch at offset %d%s; mirrord needs record batch format v2 (magic 2)",
		ErrUnsupportedMagic, int8(b[PosMagic]), baseOffsetOf(b), where)
}

func baseOffsetOf(b []byte) int64 {
	if len(b) < PosLength {
		return -1
	}
	return int64(binary.BigEndian.Uint64(b[PosBaseOffset:]))
}

// Header is the decoded header of a v2 record batch.
type Header struct {
	BaseOffset           int64
	Length               int32 // bytes after the Length field
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32 // CRC-32C of the bytes from Attributes to the end
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Transactional reports the transactional attribute bit.
func (h Header) Transactional() bool { return h.Attributes&AttrTransactional != 0 }

// Control reports the control attribute bit (a transaction marker batch).
func (h Header) Control() bool { return h.Attributes&AttrControl != 0 }

// Compression returns the codec in attribute bits 0-2: 0 none, 1 gzip,
// 2 snappy, 3 lz4, 4 zstd (kgo.CompressionCodecType uses the same numbers).
func (h Header) Compression() int8 { return int8(h.Attributes & AttrCompressionMask) }

// NextOffset is the offset after the batch's last offset.
func (h Header) NextOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) + 1 }

// Dense reports whether the batch's offsets have no gaps: NumRecords ==
// LastOffsetDelta+1, which brokers require of a batch produced by a client
// ("Inconsistent batch offset range"). Compaction leaves batches that are not
// dense; those take the Reencode path.
func (h Header) Dense() bool { return int64(h.NumRecords) == int64(h.LastOffsetDelta)+1 }

// LastSequence is the sequence number of the batch's last offset:
// BaseSequence + LastOffsetDelta, wrapping from MaxInt32 to 0 as Kafka does;
// -1 if the batch carries no sequence (BaseSequence == -1).
func (h Header) LastSequence() int32 {
	if h.BaseSequence == -1 {
		return -1
	}
	if h.BaseSequence > math.MaxInt32-h.LastOffsetDelta {
		return h.LastOffsetDelta - (math.MaxInt32 - h.BaseSequence) - 1
	}
	return h.BaseSequence + h.LastOffsetDelta
}

// ParseHeader decodes the header fields of the batch at the start of b. It
// does not check the length or the CRC (Validate does). It fails if b is
// shorter than BatchHeaderSize (ErrTruncated) or the magic is not 2
// (ErrUnsupportedMagic for 0 and 1, a CorruptError otherwise).
func ParseHeader(b []byte) (Header, error) {
	if len(b) < BatchHeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, a v2 batch header has %d", ErrTruncated, len(b), BatchHeaderSize)
	}
	if err := checkMagic(b, -1); err != nil {
		return Header{}, err
	}
	return parseHeader(b), nil
}

// parseHeader decodes a header from at least BatchHeaderSize bytes.
func parseHeader(b []byte) Header {
	be := binary.BigEndian
	_ = b[BatchHeaderSize-1]
	return Header{
		BaseOffset:           int64(be.Uint64(b[PosBaseOffset:])),
		Length:               int32(be.Uint32(b[PosLength:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[PosLeaderEpoch:])),
		Magic:                int8(b[PosMagic]),
		CRC:                  be.Uint32(b[PosCRC:]),
		Attributes:           int16(be.Uint16(b[PosAttributes:])),
		LastOffsetDelta:      int32(be.Uint32(b[PosLastOffsetDelta:])),
		FirstTimestamp:       int64(be.Uint64(b[PosFirstTimestamp:])),
		MaxTimestamp:         int64(be.Uint64(b[PosMaxTimestamp:])),
		ProducerID:           int64(be.Uint64(b[PosProducerID:])),
		ProducerEpoch:        int16(be.Uint16(b[PosProducerEpoch:])),
		BaseSequence:         int32(be.Uint32(b[PosBaseSequence:])),
		NumRecords:           int32(be.Uint32(b[PosNumRecords:])),
	}
}

// putHeader writes h into the first BatchHeaderSize bytes of b.
func putHeader(b []byte, h Header) {
	be := binary.BigEndian
	_ = b[BatchHeaderSize-1]
	be.PutUint64(b[PosBaseOffset:], uint64(h.BaseOffset))
	be.PutUint32(b[PosLength:], uint32(h.Length))
	be.PutUint32(b[PosLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[PosMagic] = byte(h.Magic)
	be.PutUint32(b[PosCRC:], h.CRC)
	be.PutUint16(b[PosAttributes:], uint16(h.Attributes))
	be.PutUint32(b[PosLastOffsetDelta:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[PosFirstTimestamp:], uint64(h.FirstTimestamp))
	be.PutUint64(b[PosMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[PosProducerID:], uint64(h.ProducerID))
	be.PutUint16(b[PosProducerEpoch:], uint16(h.ProducerEpoch))
	be.PutUint32(b[PosBaseSequence:], uint32(h.BaseSequence))
	be.PutUint32(b[PosNumRecords:], uint32(h.NumRecords))
}

// checkMagic checks the magic byte of b (len(b) > PosMagic).
func checkMagic(b []byte, pos int) error {
	switch m := int8(b[PosMagic]); m {
	case 2:
		return nil
	case 0, 1:
		return unsupportedMagic(b, pos)
	default:
		return corrupt(b, pos, CheckMagic, "magic byte is %d, want 2", m)
	}
}

// NextBatch cuts the first record batch off a fetched buffer (the Records of
// a fetch response partition): batch is its bytes, rest what follows. It
// checks the magic and that the length field is sane, not the CRC. It does
// not allocate unless it returns an error other than ErrTruncated.
//
// On an empty buf it returns nil, nil, nil. If buf ends inside a batch (the
// broker cut the response at its size limit), it returns nil, buf and
// ErrTruncated itself (not wrapped). Errors name the batch's base offset and
// its byte position relative to buf.
func NextBatch(buf []byte) (batch, rest []byte, err error) {
	return nextBatch(buf, 0)
}

func nextBatch(buf []byte, pos int) (batch, rest []byte, err error) {
	if len(buf) == 0 {
		return nil, nil, nil
	}
	if len(buf) < LengthOverhead {
		return nil, buf, ErrTruncated
	}
	length := int32(binary.BigEndian.Uint32(buf[PosLength:]))
	if length < 0 {
		return nil, nil, corrupt(buf, pos, CheckLength, "length field is %d", length)
	}
	if len(buf) <= PosMagic {
		return nil, buf, ErrTruncated
	}
	if err := checkMagic(buf, pos); err != nil {
		return nil, nil, err
	}
	if length < minBatchLength {
		return nil, nil, corrupt(buf, pos, CheckLength, "length field is %d, a v2 batch has at least %d", length, minBatchLength)
	}
	if length > MaxBatchLength {
		return nil, nil, corrupt(buf, pos, CheckLength, "length field is %d, more than the %d a batch may have", length, MaxBatchLength)
	}
	end := LengthOverhead + int(length)
	if end > len(buf) {
		return nil, buf, ErrTruncated
	}
	return buf[:end:end], buf[end:], nil
}

// Split appends the record batches of a fetched buffer to dst, in order; each
// is a subslice of buf (capacity capped at its end). truncated is the size of
// a partial batch at the end of buf, which is not an error: brokers cut the
// last batch at the fetch size limit, and the caller fetches again from that
// batch's offset. On an error Split returns the batches before the bad one;
// the error names the bad batch's base offset and byte position in buf.
// Split never reads outside buf and never panics.
func Split(buf []byte, dst [][]byte) (batches [][]byte, truncated int, err error) {
	pos := 0
	for len(buf) > 0 {
		b, rest, err := nextBatch(buf, pos)
		if errors.Is(err, ErrTruncated) {
			return dst, len(buf), nil
		}
		if err != nil {
			return dst, 0, err
		}
		dst = append(dst, b)
		pos += len(b)
		buf = rest
	}
	return dst, 0, nil
}

// crcTable is the table hash/crc32 uses for its hardware accelerated
// CRC-32C (SSE 4.2 on amd64, CRC32 instructions on arm64).
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Validate checks one batch (as NextBatch or Split returns it) completely:
// the magic, that the length field equals len(b)-12 and is at least 49, and
// the CRC-32C of everything from the attributes to the end. The error is a
// *CorruptError naming the check and the base offset, or ErrUnsupportedMagic.
//
// Validate is mandatory before Reencode, which would otherwise give damaged
// bytes a fresh CRC. The fast path (Rewrite) does not need it: a damaged batch
// keeps a wrong CRC and the destination broker refuses it.
func Validate(b []byte) error {
	if len(b) > PosMagic {
		if err := checkMagic(b, -1); err != nil {
			return err
		}
	}
	if len(b) < BatchHeaderSize {
		return corrupt(b, -1, CheckLength, "batch is %d bytes, shorter than the %d-byte header", len(b), BatchHeaderSize)
	}
	length := int32(binary.BigEndian.Uint32(b[PosLength:]))
	if length < minBatchLength {
		return corrupt(b, -1, CheckLength, "length field is %d, a v2 batch has at least %d", length, minBatchLength)
	}
	if int64(length) != int64(len(b))-LengthOverhead {
		return corrupt(b, -1, CheckLength, "length field is %d, but %d bytes follow it", length, len(b)-LengthOverhead)
	}
	stored := binary.BigEndian.Uint32(b[PosCRC:])
	if sum := crc32.Checksum(b[PosAttributes:], crcTable); sum != stored {
		return corrupt(b, -1, CheckCRC, "stored crc 0x%08x, computed 0x%08x", stored, sum)
	}
	return nil
}
