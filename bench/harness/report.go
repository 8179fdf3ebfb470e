package harness

import (
	"fmt"
	"io"
	"slices"
)

// Targets of mirrord against the peer (issue 6), reported, not asserted.
const (
	TargetCPURatio        = 0.2 // mirrord's CPU per GB at most a fifth of the peer's, on lz4 and zstd
	TargetThroughputRatio = 1.5 // mirrord's MB/s at least 1.5 times the peer's
)

// stat is the minimum, median and maximum of some values.
type stat struct{ min, med, max float64 }

func stats(vs []float64) stat {
	if len(vs) == 0 {
		return stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{s[0], med, s[len(s)-1]}
}

// sideStats is the statistics of one side on one codec.
type sideStats struct {
	n                    int
	wall, mbps, cpu, rss stat // seconds, MB/s, CPU s per GB, MiB
	srcCPU, dstCPU       stat // the brokers' CPU seconds during the run
	busy                 stat // cores busy: mirror, source and destination CPU over wall time
	machine              stat // cores busy on the whole machine
}

func (r *Report) sideStats(side, codec string) (sideStats, bool) {
	var wall, mbps, cpu, rss, src, dst, busy, machine []float64
	for _, s := range r.Samples {
		if s.Side != side || s.Codec != codec {
			continue
		}
		wall = append(wall, s.Wall.Seconds())
		mbps = append(mbps, s.MBps())
		cpu = append(cpu, s.CPUPerGB())
		rss = append(rss, float64(s.MaxRSS)/(1<<20))
		src = append(src, s.SourceBrokerCPU.Seconds())
		dst = append(dst, s.DestBrokerCPU.Seconds())
		busy = append(busy, s.Busy())
		machine = append(machine, s.MachineBusy())
	}
	if len(wall) == 0 {
		return sideStats{}, false
	}
	return sideStats{n: len(wall), wall: stats(wall), mbps: stats(mbps), cpu: stats(cpu), rss: stats(rss),
		srcCPU: stats(src), dstCPU: stats(dst), busy: stats(busy), machine: stats(machine)}, true
}

// Ratios are mirrord's medians over the peer's for one codec.
type Ratios struct {
	Codec      string
	CPUPerGB   float64 // mirrord ÷ peer; target ≤ TargetCPURatio on compressed codecs
	Throughput float64 // mirrord ÷ peer MB/s; target ≥ TargetThroughputRatio
	Wall       float64 // mirrord ÷ peer
	PeakRSS    float64 // mirrord ÷ peer
	// MirrordRSSOverBuffer is mirrord's largest peak RSS minus
	// max_buffered_bytes, in bytes: the constant of "peak RSS bounded by
	// max_buffered_bytes plus a constant".
	MirrordRSSOverBuffer int64
}

// Ratios compares the sides per codec, on medians.
func (r *Report) Ratios() []Ratios {
	var out []Ratios
	for _, t := range r.Topics {
		m, ok1 := r.sideStats(Mirrord, t.Codec)
		p, ok2 := r.sideStats(Peer, t.Codec)
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, Ratios{
			Codec:                t.Codec,
			CPUPerGB:             m.cpu.med / p.cpu.med,
			Throughput:           m.mbps.med / p.mbps.med,
			Wall:                 m.wall.med / p.wall.med,
			PeakRSS:              m.rss.med / p.rss.med,
			MirrordRSSOverBuffer: int64(m.rss.max*(1<<20)) - r.Config.MaxBufferedBytes,
		})
	}
	return out
}

func compressed(codec string) bool { return codec != "none" }

// Write prints the report as Markdown tables.
func (r *Report) Write(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "## mirrord against a record-level mirror\n\n")
	fmt.Fprintf(w, "Source: %d MiB of 1 KiB values, keys and two headers per record, in %d topics of %d partitions, loaded in %s by idempotent kgo producers (1 MiB batches).  \n",
		c.Size>>20, len(r.Topics), c.Partitions, r.LoadTime.Round(1e6))
	for _, t := range r.Topics {
		fmt.Fprintf(w, "`%s`: %d records, %.1f MB payload, %.1f MB stored (%.2fx).  \n", t.Name, t.Records, float64(t.PayloadBytes)/1e6, float64(t.Bytes)/1e6, float64(t.PayloadBytes)/float64(t.Bytes))
	}
	fmt.Fprintf(w, "Runs: %d per side and codec, interleaved (mirrord, peer, mirrord, ...), each in its own process into fresh destination topics; both clusters are kfake in their own processes.  \n", c.Runs)
	peerTasks := "GOMAXPROCS"
	if c.PeerTasks > 0 {
		peerTasks = fmt.Sprint(c.PeerTasks)
	}
	fmt.Fprintf(w, "mirrord: `mirrord run`, one link per run, max_buffered_bytes = %d MiB. Peer: kgo consumer (read_committed) → idempotent acks=all kgo producer, same partition and codec, %s tasks, %d MiB producer buffer, 5 ms linger, 1 MiB batches.  \n",
		c.MaxBufferedBytes>>20, peerTasks, c.MaxBufferedBytes>>20)
	h := r.Host
	fmt.Fprintf(w, "Host: %s, %d CPUs, %s %s/%s; load average %s before the runs, %s after.\n\n", h.CPU, h.NumCPU, h.GoVersion, h.OS, h.Arch, r.LoadBefore, r.LoadAfter)

	fmt.Fprintln(w, "| codec | side | wall s (min / med) | MB/s (best / med) | CPU s per GB (min / med) | peak RSS MiB (min / med / max) | brokers' CPU s, src / dst (med) | cores busy, bench / machine (med) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	ratios := map[string]Ratios{}
	for _, x := range r.Ratios() {
		ratios[x.Codec] = x
	}
	for _, t := range r.Topics {
		for _, side := range []string{Mirrord, Peer} {
			s, ok := r.sideStats(side, t.Codec)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.2f / %.2f | %.1f / %.1f | %.2f / %.2f | %.0f / %.0f / %.0f | %.2f / %.2f | %.2f / %.2f |\n",
				t.Codec, side, s.wall.min, s.wall.med, s.mbps.max, s.mbps.med, s.cpu.min, s.cpu.med, s.rss.min, s.rss.med, s.rss.max,
				s.srcCPU.med, s.dstCPU.med, s.busy.med, s.machine.med)
		}
		if x, ok := ratios[t.Codec]; ok {
			fmt.Fprintf(w, "| %s | mirrord/peer | %.2f | %.2fx | %.3f | %.2f | | |\n", t.Codec, x.Wall, x.Throughput, x.CPUPerGB, x.PeakRSS)
		}
	}
	fmt.Fprintf(w, "\nMB and GB are 10^6 and 10^9 bytes of the source topic as stored (compressed batches). Wall time runs from the mirror's start until the destination's end offsets reach the source's; CPU time (user + system) is the mirror process's own, from its rusage after a clean SIGTERM stop; peak RSS is its VmHWM (/proc/PID/status, read every 10 ms until it exits), not ru_maxrss, which for a child also counts the parent's memory at exec. The brokers' CPU is that of the two kfake processes during the run (/proc/PID/stat); cores busy is the mirror's, the source's and the destination's CPU time over the wall time, and that of every process on the machine (/proc/stat), out of %d: where the machine's figure is higher, other load competed with the run. Ratios are of medians.\n", h.NumCPU)

	if len(ratios) > 0 {
		fmt.Fprintf(w, "\n| codec | CPU per GB, mirrord ÷ peer (target ≤ %.2f on lz4, zstd) | throughput, mirrord ÷ peer (target ≥ %.1f) | mirrord peak RSS − max_buffered_bytes (%d MiB) |\n", TargetCPURatio, TargetThroughputRatio, c.MaxBufferedBytes>>20)
		fmt.Fprintln(w, "|---|---:|---:|---:|")
		for _, t := range r.Topics {
			x, ok := ratios[t.Codec]
			if !ok {
				continue
			}
			cpu := "n/a"
			if compressed(t.Codec) {
				cpu = verdict(x.CPUPerGB <= TargetCPURatio)
			}
			fmt.Fprintf(w, "| %s | %.3f (%s) | %.2fx (%s) | %+d MiB |\n", t.Codec, x.CPUPerGB, cpu, x.Throughput, verdict(x.Throughput >= TargetThroughputRatio), x.MirrordRSSOverBuffer>>20)
		}
	}

	if len(r.Transform) > 0 {
		fmt.Fprintf(w, "\nTransform (`go test -run='^$' -bench='^Benchmark(Rewrite|Memmove)$' -benchtime=%s ./transform`): rewriting a batch's PID and CRC in place against copying it once.\n\n", c.TransformBenchtime)
		fmt.Fprintln(w, "| batch | Rewrite ns/op | Memmove ns/op | Rewrite ÷ Memmove |")
		fmt.Fprintln(w, "|---|---:|---:|---:|")
		for _, t := range r.Transform {
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %.4f |\n", t.Size, t.RewriteNs, t.MemmoveNs, t.Ratio())
		}
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// WriteSamples prints every run, for the record.
func (r *Report) WriteSamples(w io.Writer) {
	fmt.Fprintln(w, "| codec | side | run | wall s | MB/s | user s | sys s | CPU s per GB | peak RSS MiB | src broker CPU s | dst broker CPU s | machine CPU s |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range r.Samples {
		fmt.Fprintf(w, "| %s | %s | %d | %.2f | %.1f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.2f |\n",
			s.Codec, s.Side, s.Run, s.Wall.Seconds(), s.MBps(), s.User.Seconds(), s.Sys.Seconds(), s.CPUPerGB(), s.MaxRSS>>20,
			s.SourceBrokerCPU.Seconds(), s.DestBrokerCPU.Seconds(), s.MachineCPU.Seconds())
	}
}
