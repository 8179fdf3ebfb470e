package link

import (
	"github.com/seed83556561/mirrord/transform"
)

// forward returns the bytes the destination gets for a fetched source batch
// under the mapped PID: the batch itself, rewritten (in place, or in a copy
// in scratch when copy is set), when it is dense and starts at or after
// from; otherwise a dense re-encoding of its records at or after from, built
// in scratch, which is the one slow path (DESIGN §5). A batch is validated
// before it is re-encoded, so that damaged bytes never get a fresh CRC.
// The pipeline and reconciliation both use it, so that reconciliation
// expects exactly what the pipeline appends.
func forward(r *transform.Reencoder, scratch, raw []byte, h transform.Header, mapped, from int64, copy bool) (out []byte, reencoded bool, err error) {
	if h.Dense() && h.BaseOffset >= from {
		if copy {
			raw = append(scratch[:0], raw...)
		}
		transform.Rewrite(raw, mapped)
		return raw, false, nil
	}
	if err := transform.Validate(raw); err != nil {
		return nil, false, err
	}
	out, _, err = r.ReencodeFrom(scratch, raw, mapped, from)
	return out, true, err
}
