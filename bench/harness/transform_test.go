package harness

import (
	"strings"
	"testing"
)

// TestParseTransformBench guards the parser against go test's output
// format: sizes paired across the two benchmarks, the GOMAXPROCS suffix
// dropped, and a size with one result refused.
func TestParseTransformBench(t *testing.T) {
	const out = `goos: linux
goarch: amd64
pkg: github.com/seed83556561/mirrord/transform
cpu: Intel(R) Xeon(R) Processor
BenchmarkRewrite/16KiB-2         	10000000	       112.5 ns/op	145634.01 MB/s	       0 B/op	       0 allocs/op
BenchmarkRewrite/1MiB-2          	10000000	       118.0 ns/op	8886090.12 MB/s	       0 B/op	       0 allocs/op
BenchmarkMemmove/16KiB-2         	 1000000	      1031 ns/op	15890.70 MB/s	       0 B/op	       0 allocs/op
BenchmarkMemmove/1MiB-2          	   10000	    102345 ns/op	10245.38 MB/s	       0 B/op	       0 allocs/op
PASS
ok  	github.com/seed83556561/mirrord/transform	5.012s
`
	rs, err := ParseTransformBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []TransformRatio{{"16KiB", 112.5, 1031}, {"1MiB", 118, 102345}}
	if len(rs) != len(want) {
		t.Fatalf("got %+v, want %+v", rs, want)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("size %d: %+v, want %+v", i, rs[i], want[i])
		}
	}
	if r := rs[0].Ratio(); r < 0.109 || r > 0.110 {
		t.Errorf("ratio %g, want 112.5/1031", r)
	}

	for name, bad := range map[string]string{
		"no results":   "PASS\n",
		"rewrite only": "BenchmarkRewrite/16KiB-2  100  5 ns/op\n",
	} {
		if _, err := ParseTransformBench(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}
