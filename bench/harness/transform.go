package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// TransformRatio is one batch size of the transform's benchmarks: the
// in-place PID and CRC rewrite against copying the batch once.
type TransformRatio struct {
	Size      string // "16KiB", ...
	RewriteNs float64
	MemmoveNs float64
}

// Ratio is Rewrite's time over Memmove's.
func (r TransformRatio) Ratio() float64 { return r.RewriteNs / r.MemmoveNs }

// TransformBench runs BenchmarkRewrite and BenchmarkMemmove of ./transform
// with the given -benchtime and pairs their results by batch size.
func TransformBench(ctx context.Context, moduleDir, benchtime string) ([]TransformRatio, error) {
	cmd := exec.CommandContext(ctx, goTool(), "test", "-run=^$", "-bench=^Benchmark(Rewrite|Memmove)$", "-benchtime="+benchtime, "./transform")
	cmd.Dir = moduleDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench ./transform: %w\n%s", err, out)
	}
	rs, err := ParseTransformBench(strings.NewReader(string(out)))
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	return rs, nil
}

var benchLine = regexp.MustCompile(`^Benchmark(Rewrite|Memmove)/([^\s]+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)

// ParseTransformBench reads `go test -bench` output and pairs Rewrite and
// Memmove results by sub-benchmark name. A size with only one of the two is
// an error.
func ParseTransformBench(r io.Reader) ([]TransformRatio, error) {
	type pair struct{ rw, mm float64 }
	got := map[string]*pair{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("transform benchmark line %q: %w", sc.Text(), err)
		}
		p := got[m[2]]
		if p == nil {
			p = &pair{}
			got[m[2]] = p
			order = append(order, m[2])
		}
		if m[1] == "Rewrite" {
			p.rw = ns
		} else {
			p.mm = ns
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("no BenchmarkRewrite or BenchmarkMemmove results in the output")
	}
	var out []TransformRatio
	for _, size := range order {
		p := got[size]
		if p.rw == 0 || p.mm == 0 {
			return nil, fmt.Errorf("transform benchmark %s: Rewrite %g ns/op, Memmove %g ns/op; want both", size, p.rw, p.mm)
		}
		out = append(out, TransformRatio{Size: size, RewriteNs: p.rw, MemmoveNs: p.mm})
	}
	return out, nil
}
