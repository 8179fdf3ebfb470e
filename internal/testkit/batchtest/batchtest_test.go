package batchtest

import (
	"testing"

	"github.com/seed83556561/mirrord/transform"
)

// Guards that built batches are valid v2 batches with the header asked for,
// in every codec, so that tests built on them test the code and not the
// builder.
func TestBuildValid(t *testing.T) {
	for codec := range int8(5) {
		b := Build(Spec{BaseOffset: 7, PID: 3, Epoch: 2, BaseSequence: 9, Codec: codec, FirstTimestamp: 100, Transactional: true,
			Records: []Record{{Key: []byte("a"), Value: []byte("1"), OffsetDelta: -1}, {Key: []byte("b"), TimestampDelta: 5, OffsetDelta: 3}}})
		if err := transform.Validate(b); err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		h, err := transform.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset != 7 || h.ProducerID != 3 || h.ProducerEpoch != 2 || h.BaseSequence != 9 || h.NumRecords != 2 ||
			h.LastOffsetDelta != 3 || h.MaxTimestamp != 105 || h.Compression() != codec || !h.Transactional() || h.Dense() {
			t.Errorf("codec %d: header %+v", codec, h)
		}
	}
	if h, _ := transform.ParseHeader(Simple(0, 1, 0, 0, 3)); !h.Dense() || h.NumRecords != 3 {
		t.Errorf("Simple: %+v", h)
	}
}
