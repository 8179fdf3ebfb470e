package transform

import (
	"math/rand/v2"
	"testing"
)

var benchSizes = []struct {
	name string
	size int
}{
	{"16KiB", 16 << 10},
	{"256KiB", 256 << 10},
	{"1MiB", 1 << 20},
}

// BenchmarkRewrite measures the hot path: a new PID each time, so that the
// CRC difference is never zero and the shift past the batch always runs.
func BenchmarkRewrite(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			batch := randomBatch(rand.New(rand.NewPCG(1, 1)), bs.size, AttrTransactional|3)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			pid := int64(-2)
			for b.Loop() {
				pid--
				Rewrite(batch, pid)
			}
			if err := Validate(batch); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkMemmove is the yardstick for Rewrite: copying the same bytes once.
func BenchmarkMemmove(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			src := randomBatch(rand.New(rand.NewPCG(1, 1)), bs.size, 0)
			dst := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkValidate is the full hardware CRC-32C: what Rewrite avoids.
func BenchmarkValidate(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			batch := randomBatch(rand.New(rand.NewPCG(1, 1)), bs.size, 0)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Validate(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReencode is the slow path for reference: an lz4 batch of 200
// records (about 16 KiB uncompressed) that lost every third record.
func BenchmarkReencode(b *testing.B) {
	b.Run("lz4", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(2, 2))
		dense, _ := denseTestBatch(b, rng, 200, 3, Header{BaseOffset: 1000, ProducerID: 5, BaseSequence: 0, FirstTimestamp: 1_700_000_000_000})
		gappy, _ := gappyTestBatch(b, dense, func(i int) bool { return i%3 != 0 })
		r := NewReencoder()
		var out []byte
		b.SetBytes(int64(len(gappy)))
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if out, _, err = r.Reencode(out, gappy, -9); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStamp measures transactional delivery's header rewrite: a new
// sequence each time, so that the CRC difference is never zero.
func BenchmarkStamp(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			batch := randomBatch(rand.New(rand.NewPCG(1, 1)), bs.size, 3)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			seq := int32(0)
			for b.Loop() {
				seq++
				Stamp(batch, 4242, 3, seq)
			}
			if err := Validate(batch); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkMerge measures coalescing's join (issue 23): 64 batches of 3
// records each (small batches, as a linger-0 producer sends) into one, per
// codec, with the Reencoder kept between joins (reused: Join, as the
// link's append workers keep it and call it), and made anew for each join
// (fresh: Merge with its offset map), which builds the codec's compressor
// again every time.
func BenchmarkMerge(b *testing.B) {
	for _, codec := range []int8{0, 1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(3, uint64(codec)))
		var bs [][]byte
		size := 0
		for i := range 64 {
			raw, _ := denseTestBatch(b, rng, 3, codec, Header{BaseOffset: int64(1000 + 3*i), ProducerID: 5, BaseSequence: int32(3 * i), FirstTimestamp: 1_700_000_000_000 + int64(i)})
			bs = append(bs, raw)
			size += len(raw)
		}
		m := MergeHeader{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Transactional: true}
		b.Run(codecNames[codec]+"/reused", func(b *testing.B) {
			r := NewReencoder()
			var out []byte
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if out, err = r.Join(out, bs, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(codecNames[codec]+"/fresh", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := NewReencoder().Merge(nil, bs, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
