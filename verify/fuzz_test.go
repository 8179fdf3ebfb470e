package verify

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/seed83556561/mirrord/transform"
)

// batchSpans reads headers from whatever a broker (or damage) hands it:
// it never panics, never reads past the buffer, and every span it returns
// is a complete v2 batch laid end to end from the start of the buffer.
func FuzzBatchSpans(f *testing.F) {
	f.Add(testBatch(0, 0, 0))
	f.Add(append(testBatch(5, 3, 9), testBatch(9, 0, -1)...))
	f.Add(testBatch(1, 2, 3)[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, err := batchSpans(b, nil)
		if err != nil && !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("unexpected error %v", err)
		}
		pos := 0
		for i, s := range spans {
			if len(b)-pos < transform.BatchHeaderSize {
				t.Fatalf("span %d starts %d bytes before the end, inside a header", i, len(b)-pos)
			}
			at := b[pos:]
			if at[transform.PosMagic] != 2 {
				t.Fatalf("span %d has magic %d", i, at[transform.PosMagic])
			}
			if base := int64(binary.BigEndian.Uint64(at)); s.base != base {
				t.Fatalf("span %d base %d, header says %d", i, s.base, base)
			}
			pos += transform.LengthOverhead + int(binary.BigEndian.Uint32(at[transform.PosLength:]))
			if pos > len(b) {
				t.Fatalf("span %d ends at byte %d, past the %d-byte buffer", i, pos, len(b))
			}
		}
	})
}
