package harness

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// Targets of mirrord against the kgo peer on the kfake backend (issue 6),
// reported, not asserted.
const (
	TargetCPURatio        = 0.2 // mirrord's CPU per GB at most a fifth of the peer's, on lz4 and zstd
	TargetThroughputRatio = 1.5 // mirrord's MB/s at least 1.5 times the peer's
)

// Targets of mirrord against MirrorMaker 2 on the kafka backend (issue 13),
// on every codec and against both MirrorMaker runs, on the steady-state
// figures; reported, not asserted.
const (
	TargetMM2CPURatio        = 0.1 // mirrord's CPU per GB at most a tenth of MirrorMaker's
	TargetMM2ThroughputRatio = 2.0 // mirrord's MB/s at least twice MirrorMaker's
)

// Targets of issue 23 on small batches (kafka backend, small-batches
// profile, both delivery modes, every codec, the steady parts; the
// destination broker's CPU over the whole run): reported, not asserted.
const (
	TargetSmallPeerThroughput = 1.0 // at least the kgo peer's MB/s
	TargetSmallMM2Throughput  = 2.0 // at least twice MirrorMaker's
	TargetSmallPeerCPU        = 1.0 // CPU per GB at most the peer's
	TargetSmallPeerDestCPU    = 1.5 // destination broker CPU per GB at most 1.5 times the peer's
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
	n                     int
	wall, mbps, cpu, rss  stat // seconds, MB/s, CPU s per GB, MiB
	steadyMBps, steadyCPU stat // of the steady part; runs without one are left out
	srcCPU, dstCPU        stat // the brokers' CPU seconds during the run
	dstPerGB              stat // the destination broker's CPU seconds per GB mirrored
	busy                  stat // cores busy: mirror, source and destination CPU over wall time
	machine               stat // cores busy on the whole machine
}

func (r *Report) sideStats(side, codec string) (sideStats, bool) {
	var wall, mbps, cpu, rss, smbps, scpu, src, dst, dstGB, busy, machine []float64
	for _, s := range r.Samples {
		if s.Side != side || s.Codec != codec {
			continue
		}
		wall = append(wall, s.Wall.Seconds())
		mbps = append(mbps, s.MBps())
		cpu = append(cpu, s.CPUPerGB())
		rss = append(rss, float64(s.MaxRSS)/(1<<20))
		if s.Steady > 0 {
			smbps = append(smbps, s.SteadyMBps())
			scpu = append(scpu, s.SteadyCPUPerGB())
		}
		src = append(src, s.SourceBrokerCPU.Seconds())
		dst = append(dst, s.DestBrokerCPU.Seconds())
		dstGB = append(dstGB, s.DestBrokerCPUPerGB())
		busy = append(busy, s.Busy())
		machine = append(machine, s.MachineBusy())
	}
	if len(wall) == 0 {
		return sideStats{}, false
	}
	return sideStats{n: len(wall), wall: stats(wall), mbps: stats(mbps), cpu: stats(cpu), rss: stats(rss),
		steadyMBps: stats(smbps), steadyCPU: stats(scpu),
		srcCPU: stats(src), dstCPU: stats(dst), dstPerGB: stats(dstGB), busy: stats(busy), machine: stats(machine)}, true
}

// Ratios are mirrord's medians over another side's for one codec.
type Ratios struct {
	Codec string
	Other string // the side mirrord is compared with
	// CPUPerGB and Throughput are of the whole runs (start to stop);
	// SteadyCPUPerGB and SteadyThroughput of their steady parts (0 when a
	// side had none).
	CPUPerGB, Throughput             float64
	SteadyCPUPerGB, SteadyThroughput float64
	Wall                             float64 // mirrord ÷ other
	PeakRSS                          float64 // mirrord ÷ other
	// DestBrokerCPUPerGB is the destination broker's CPU per GB while
	// mirrord mirrored over that while the other side did (whole runs):
	// what each mirror costs the cluster it writes to.
	DestBrokerCPUPerGB float64
	// MirrordRSSOverBuffer is mirrord's largest peak RSS minus
	// max_buffered_bytes, in bytes: the constant of "peak RSS bounded by
	// max_buffered_bytes plus a constant".
	MirrordRSSOverBuffer int64
}

// Ratios compares mirrord with every other side per codec, on medians.
func (r *Report) Ratios() []Ratios {
	var out []Ratios
	for _, t := range r.Topics {
		m, ok := r.sideStats(Mirrord, t.Codec)
		if !ok {
			continue
		}
		for _, side := range r.Config.Sides {
			if side == Mirrord {
				continue
			}
			p, ok := r.sideStats(side, t.Codec)
			if !ok {
				continue
			}
			x := Ratios{
				Codec:                t.Codec,
				Other:                side,
				CPUPerGB:             m.cpu.med / p.cpu.med,
				Throughput:           m.mbps.med / p.mbps.med,
				Wall:                 m.wall.med / p.wall.med,
				PeakRSS:              m.rss.med / p.rss.med,
				DestBrokerCPUPerGB:   m.dstPerGB.med / p.dstPerGB.med,
				MirrordRSSOverBuffer: int64(m.rss.max*(1<<20)) - r.Config.MaxBufferedBytes,
			}
			if m.steadyMBps.med > 0 && p.steadyMBps.med > 0 {
				x.SteadyCPUPerGB = m.steadyCPU.med / p.steadyCPU.med
				x.SteadyThroughput = m.steadyMBps.med / p.steadyMBps.med
			}
			out = append(out, x)
		}
	}
	return out
}

func compressed(codec string) bool { return codec != "none" }

// sideName is how a side is described in the report.
func sideName(side string) string {
	switch side {
	case MM2EOS:
		return "mm2-eos (MirrorMaker 2, exactly-once)"
	case MM2:
		return "mm2 (MirrorMaker 2)"
	case Peer:
		return "peer (kgo, record level)"
	case MirrordTxn:
		return "mirrord-txn (transactional delivery)"
	}
	return side
}

// Verdict is one target's outcome for one codec and reference side.
type Verdict struct {
	Codec, Other string
	What         string  // "CPU per GB" or "throughput"
	Ratio        float64 // mirrord ÷ other
	Target       float64
	Met          bool
}

// Verdicts are the targets of the report's backend, each met or missed:
// on kfake against the peer on the whole runs (CPU on compressed codecs
// only), on kafka against both MirrorMaker runs on the steady parts.
func (r *Report) Verdicts() []Verdict {
	var out []Verdict
	for _, x := range r.Ratios() {
		switch {
		case r.Config.Backend == BackendKafka && (x.Other == MM2 || x.Other == MM2EOS):
			if x.SteadyThroughput == 0 {
				continue
			}
			out = append(out,
				Verdict{x.Codec, x.Other, "CPU per GB", x.SteadyCPUPerGB, TargetMM2CPURatio, x.SteadyCPUPerGB <= TargetMM2CPURatio},
				Verdict{x.Codec, x.Other, "throughput", x.SteadyThroughput, TargetMM2ThroughputRatio, x.SteadyThroughput >= TargetMM2ThroughputRatio})
		case r.Config.Backend == BackendKfake && x.Other == Peer:
			if compressed(x.Codec) {
				out = append(out, Verdict{x.Codec, x.Other, "CPU per GB", x.CPUPerGB, TargetCPURatio, x.CPUPerGB <= TargetCPURatio})
			}
			out = append(out, Verdict{x.Codec, x.Other, "throughput", x.Throughput, TargetThroughputRatio, x.Throughput >= TargetThroughputRatio})
		}
	}
	return out
}

// SmallBatchVerdicts are issue 23's targets, for each delivery mode
// (mirrord, mirrord-txn) run, on the kafka backend's small-batches
// profile; Verdict.Codec names the mode too ("lz4, mirrord-txn").
func (r *Report) SmallBatchVerdicts() []Verdict {
	if r.Config.Backend != BackendKafka || r.Config.Profile != ProfileSmallBatches {
		return nil
	}
	var out []Verdict
	for _, t := range r.Topics {
		peer, hasPeer := r.sideStats(Peer, t.Codec)
		mm2, hasMM2 := r.sideStats(MM2, t.Codec)
		for _, side := range []string{Mirrord, MirrordTxn} {
			m, ok := r.sideStats(side, t.Codec)
			if !ok || m.steadyMBps.med == 0 {
				continue
			}
			codec := t.Codec + ", " + side
			if hasPeer && peer.steadyMBps.med > 0 {
				tp, cpu, dst := m.steadyMBps.med/peer.steadyMBps.med, m.steadyCPU.med/peer.steadyCPU.med, m.dstPerGB.med/peer.dstPerGB.med
				out = append(out,
					Verdict{codec, Peer, "throughput", tp, TargetSmallPeerThroughput, tp >= TargetSmallPeerThroughput},
					Verdict{codec, Peer, "CPU per GB", cpu, TargetSmallPeerCPU, cpu <= TargetSmallPeerCPU},
					Verdict{codec, Peer, "dst broker CPU per GB", dst, TargetSmallPeerDestCPU, dst <= TargetSmallPeerDestCPU})
			}
			if hasMM2 && mm2.steadyMBps.med > 0 {
				tp := m.steadyMBps.med / mm2.steadyMBps.med
				out = append(out, Verdict{codec, MM2, "throughput", tp, TargetSmallMM2Throughput, tp >= TargetSmallMM2Throughput})
			}
		}
	}
	return out
}

// Write prints the report as Markdown tables.
func (r *Report) Write(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "## mirrord against other mirrors (%s backend, %s profile)\n\n", c.Backend, c.Profile)
	batch, linger := "1 MiB batches, 10 ms linger", ""
	if c.LoadBatchBytes > 0 {
		batch = fmt.Sprintf("%d KiB batches", c.LoadBatchBytes>>10)
	}
	if c.LoadLinger < 0 {
		linger = ", linger 0"
	} else if c.LoadLinger > 0 {
		linger = fmt.Sprintf(", linger %s", c.LoadLinger)
	}
	if c.Profile == ProfileLatency {
		// The latency profile loads nothing beforehand: its source is the
		// steady producer of each run (the "Latency:" line below).
		fmt.Fprintf(w, "Source: per run, a fresh topic of %d partitions written at a steady rate (below); 1 KiB values, keys and two headers per record.  \n", c.Partitions)
	} else {
		fmt.Fprintf(w, "Source: %d MiB of 1 KiB values, keys and two headers per record, in %d topics of %d partitions, loaded in %s by idempotent kgo producers (%s%s).  \n",
			c.Size>>20, len(r.Topics), c.Partitions, r.LoadTime.Round(1e6), batch, linger)
	}
	for _, t := range r.Topics {
		fmt.Fprintf(w, "`%s`: %d records, %.1f MB payload, %.1f MB stored (%.2fx).  \n", t.Name, t.Records, float64(t.PayloadBytes)/1e6, float64(t.Bytes)/1e6, float64(t.PayloadBytes)/float64(t.Bytes))
	}
	clusters := "both clusters are kfake, each in its own process"
	if c.Backend == BackendKafka {
		clusters = fmt.Sprintf("both clusters are Apache Kafka %s, one broker (one JVM, heap %s) each", c.KafkaVersion, orDefault(c.BrokerHeap, DefaultBrokerHeap))
	}
	fmt.Fprintf(w, "Runs: %d per side and codec, interleaved (%v, then again), each in its own process into fresh destination topics; %s.  \n", c.Runs, c.Sides, clusters)
	peerTasks := "GOMAXPROCS"
	if c.PeerTasks > 0 {
		peerTasks = fmt.Sprint(c.PeerTasks)
	}
	fmt.Fprintf(w, "mirrord: `mirrord run`, one link per run, max_buffered_bytes = %d MiB. Peer: kgo consumer (read_committed) → idempotent acks=all kgo producer, same partition and codec, %s tasks, %d MiB producer buffer, 5 ms linger, 1 MiB batches.  \n",
		c.MaxBufferedBytes>>20, peerTasks, c.MaxBufferedBytes>>20)
	writeSettings(w, "mirrord's link also set:", c.MirrordLink)
	if slices.Contains(c.Sides, MM2) || slices.Contains(c.Sides, MM2EOS) {
		fmt.Fprintf(w, "MirrorMaker 2 %s in dedicated mode (`%s`), its own JVM with heap %s, tasks.max %d, IdentityReplicationPolicy, source consumer read_committed, producer compression.type = the source topic's codec, heartbeats and checkpoints off, every other setting at its default; mm2-eos adds exactly.once.source.support = enabled and dedicated.mode.enable.internal.rest = true.  \n",
			c.MM2Version, MM2MainClass, c.MM2Heap, c.MM2Tasks)
		writeSettings(w, "MirrorMaker 2 tuned with:", c.MM2Props)
	}
	h := r.Host
	fmt.Fprintf(w, "Host: %s, %d CPUs, %s %s/%s; load average %s before the runs, %s after.\n\n", h.CPU, h.NumCPU, h.GoVersion, h.OS, h.Arch, r.LoadBefore, r.LoadAfter)

	if c.Profile == ProfileLatency {
		fmt.Fprintf(w, "Latency: per run a fresh source topic of %d partitions that the mirror follows from its start; a kgo producer (linger 0, acks=all) writes %d records/s (1 KiB values) from the mirror's start; measured are the records produced from %s after the first record showed at the destination, for %s; a read_committed kgo consumer at the destination notes each record's visibility.  \n",
			c.Partitions, c.LatencyRate, c.LatencyWarmup, c.LatencyDuration)
	}
	if len(r.Samples) > 0 {
		fmt.Fprintln(w, "| codec | side | wall s (min / med) | MB/s whole run (med) | MB/s steady (best / med) | CPU s per GB whole run (med) | CPU s per GB steady (min / med) | peak RSS MiB (min / med / max) | brokers' CPU s, src / dst (med) | dst broker CPU s per GB (med) | cores busy, bench / machine (med) |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, t := range r.Topics {
			for _, side := range c.Sides {
				s, ok := r.sideStats(side, t.Codec)
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %s | %.2f / %.2f | %.1f | %.1f / %.1f | %.2f | %.2f / %.2f | %.0f / %.0f / %.0f | %.2f / %.2f | %.2f | %.2f / %.2f |\n",
					t.Codec, side, s.wall.min, s.wall.med, s.mbps.med, s.steadyMBps.max, s.steadyMBps.med, s.cpu.med, s.steadyCPU.min, s.steadyCPU.med,
					s.rss.min, s.rss.med, s.rss.max, s.srcCPU.med, s.dstCPU.med, s.dstPerGB.med, s.busy.med, s.machine.med)
			}
		}
		fmt.Fprintf(w, "\nMB and GB are 10^6 and 10^9 bytes of the source topic as stored (compressed batches). A whole run goes from the mirror's start until the destination holds every record (its end offsets reach the source's; for mm2-eos, whose destination also holds transaction markers, until the offsets MirrorMaker committed with its transactions cover every record); its CPU time (user + system) is the mirror process's own from its rusage after a clean SIGTERM stop, so it includes the start and the stop. The steady part goes from the first poll (every %s) that found mirrored data at the destination to the end of the run, its bytes are the source bytes not yet mirrored at its start, and its CPU time is the process's from /proc/PID/stat: it leaves out the start (JVM class loading and JIT, Connect's group join and internal topics; mirrord's PREPARING). Peak RSS is the process's VmHWM (/proc/PID/status, read every 10 ms until it exits), not ru_maxrss, which for a child also counts the parent's memory at exec. The brokers' CPU is that of the two cluster processes during the run (/proc/PID/stat), and the destination broker's per GB what the mirror cost the cluster it writes to (its CPU during the whole run over the source bytes); cores busy is the mirror's, the source's and the destination's CPU time over the wall time, and that of every process on the machine (/proc/stat), out of %d: where the machine's figure is higher, other load competed with the run. Ratios are of medians.\n",
			DefaultPollInterval, h.NumCPU)
	}

	ratios := r.Ratios()
	if len(ratios) > 0 {
		fmt.Fprintf(w, "\n| codec | mirrord ÷ | throughput, steady (whole run) | CPU per GB, steady (whole run) | dst broker CPU per GB | peak RSS | mirrord peak RSS − max_buffered_bytes (%d MiB) |\n", c.MaxBufferedBytes>>20)
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
		for _, x := range ratios {
			fmt.Fprintf(w, "| %s | %s | %.2fx (%.2fx) | %.3f (%.3f) | %.3f | %.2f | %+d MiB |\n", x.Codec, sideName(x.Other), x.SteadyThroughput, x.Throughput, x.SteadyCPUPerGB, x.CPUPerGB, x.DestBrokerCPUPerGB, x.PeakRSS, x.MirrordRSSOverBuffer>>20)
		}
	}
	if vs := r.Verdicts(); len(vs) > 0 {
		basis := "whole runs"
		if c.Backend == BackendKafka {
			basis = "steady parts"
		}
		fmt.Fprintf(w, "\nTargets (%s backend, on the %s):\n\n| codec | mirrord ÷ | figure | ratio | target | verdict |\n|---|---|---|---:|---:|---|\n", c.Backend, basis)
		for _, v := range vs {
			op := "≥"
			if v.What == "CPU per GB" {
				op = "≤"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.3f | %s %.2f | %s |\n", v.Codec, v.Other, v.What, v.Ratio, op, v.Target, verdict(v.Met))
		}
	}

	if vs := r.SmallBatchVerdicts(); len(vs) > 0 {
		fmt.Fprintf(w, "\nTargets on small batches (issue 23: each delivery mode, steady parts; the destination broker's CPU over the whole runs):\n\n| codec, mode | ÷ | figure | ratio | target | verdict |\n|---|---|---|---:|---:|---|\n")
		for _, v := range vs {
			op := "≥"
			if v.What != "throughput" {
				op = "≤"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.3f | %s %.2f | %s |\n", v.Codec, v.Other, v.What, v.Ratio, op, v.Target, verdict(v.Met))
		}
	}

	if len(r.Latency) > 0 {
		r.writeLatency(w)
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

// WriteSamples prints every run, for the record (nothing without runs of
// the throughput profiles).
func (r *Report) WriteSamples(w io.Writer) {
	if len(r.Samples) == 0 {
		return
	}
	fmt.Fprintln(w, "| codec | side | run | wall s | MB/s | steady s | steady MB/s | user s | sys s | CPU s per GB | steady CPU s per GB | peak RSS MiB | src broker CPU s | dst broker CPU s | machine CPU s |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range r.Samples {
		fmt.Fprintf(w, "| %s | %s | %d | %.2f | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.2f |\n",
			s.Codec, s.Side, s.Run, s.Wall.Seconds(), s.MBps(), s.Steady.Seconds(), s.SteadyMBps(), s.User.Seconds(), s.Sys.Seconds(), s.CPUPerGB(), s.SteadyCPUPerGB(), s.MaxRSS>>20,
			s.SourceBrokerCPU.Seconds(), s.DestBrokerCPU.Seconds(), s.MachineCPU.Seconds())
	}
}

// writeLatency prints the latency runs: per side and codec the median over
// the runs of each quantile.
func (r *Report) writeLatency(w io.Writer) {
	fmt.Fprintln(w, "\n| codec | side | runs | records measured (med) | p50 ms (med) | p99 ms (med / max) | max ms (max) | source append p50 / p99 ms (med) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, codec := range r.Config.Codecs {
		for _, side := range r.Config.Sides {
			var n, p50, p99, mx, s50, s99 []float64
			for _, l := range r.Latency {
				if l.Side == side && l.Codec == codec {
					n = append(n, float64(l.Records))
					p50, p99, mx = append(p50, ms(l.P50)), append(p99, ms(l.P99)), append(mx, ms(l.Max))
					s50, s99 = append(s50, ms(l.SourceP50)), append(s99, ms(l.SourceP99))
				}
			}
			if len(n) == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f | %.1f / %.1f | %.1f | %.1f / %.1f |\n", codec, side, len(n), stats(n).med,
				stats(p50).med, stats(p99).med, stats(p99).max, stats(mx).max, stats(s50).med, stats(s99).med)
		}
	}
	fmt.Fprintln(w, "\nLatency is from a record's timestamp, taken just before the source producer sent it, to the poll at the destination that returned it; it includes the source append (its own column) and the destination consumer's fetch. Records are compared record by record afterwards with -verify.")
}

// writeSettings writes a line of the report's header: intro and the
// settings of m in key order, `key = value` each; nothing when m is empty.
func writeSettings(w io.Writer, intro string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	fmt.Fprint(w, intro)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, " `%s = %s`", k, m[k])
	}
	fmt.Fprintf(w, ".  \n")
}
