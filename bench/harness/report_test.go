package harness

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestQuantile guards the latency quantiles: nearest rank, whatever the
// order of the samples.
func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := quantile(ds, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %s, want %s", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %s, want 0", got)
	}
}

// TestReportVerdicts guards the targets of each backend: on kafka against
// both MirrorMaker runs on the steady parts, every codec, and a latency
// report without throughput runs prints only its latency table.
func TestReportVerdicts(t *testing.T) {
	top := SourceTopic{}
	top.Name, top.Codec = "bench.none", "none"
	sample := func(side string, mbps, cpuPerGB float64) Sample {
		const bytes = 1e9
		wall := time.Duration(bytes / 1e6 / mbps * float64(time.Second))
		cpu := time.Duration(cpuPerGB * float64(time.Second))
		return Sample{Side: side, Codec: "none", Wall: wall, SourceBytes: bytes, User: cpu,
			Steady: wall, SteadyBytes: bytes, SteadyCPU: cpu}
	}
	rep := &Report{Config: Config{Backend: BackendKafka, Sides: []string{Mirrord, MM2EOS, MM2}}, Topics: []SourceTopic{top},
		Samples: []Sample{sample(Mirrord, 200, 2), sample(MM2EOS, 20, 50), sample(MM2, 150, 10)}}
	got := map[string]bool{}
	for _, v := range rep.Verdicts() {
		got[v.Other+" "+v.What] = v.Met
	}
	want := map[string]bool{"mm2-eos CPU per GB": true, "mm2-eos throughput": true, "mm2 CPU per GB": false, "mm2 throughput": false}
	for k, w := range want {
		if m, ok := got[k]; !ok || m != w {
			t.Errorf("verdict %q = %v (present %v), want %v", k, m, ok, w)
		}
	}

	lat := &Report{Config: Config{Backend: BackendKafka, Profile: ProfileLatency, Codecs: []string{"none"}, Sides: []string{Mirrord}},
		Latency: []LatencySample{{Side: Mirrord, Codec: "none", Run: 1, Records: 10, P50: 3 * time.Millisecond, P99: 9 * time.Millisecond, Max: 12 * time.Millisecond}}}
	var out bytes.Buffer
	lat.Write(&out)
	if !strings.Contains(out.String(), "| none | mirrord | 1 | 10 | 3.0 | 9.0 / 9.0 | 12.0 |") {
		t.Errorf("latency table missing:\n%s", out.String())
	}
	if strings.Contains(out.String(), "loaded in") {
		t.Errorf("latency report describes a load it did not do:\n%s", out.String())
	}
	if strings.Contains(out.String(), "MB/s steady") {
		t.Errorf("latency report prints an empty throughput table:\n%s", out.String())
	}
}

// Guards the destination broker's CPU per GB (issue 23): in the side table
// for each side, and as mirrord's ratio over each other side.
func TestReportDestBrokerCPU(t *testing.T) {
	top := SourceTopic{}
	top.Name, top.Codec = "bench.lz4", "lz4"
	sample := func(side string, dstCPU float64) Sample {
		return Sample{Side: side, Codec: "lz4", Wall: 10 * time.Second, SourceBytes: 2e9, User: time.Second,
			DestBrokerCPU: time.Duration(dstCPU * float64(time.Second))}
	}
	rep := &Report{Config: Config{Backend: BackendKafka, Sides: []string{Mirrord, Peer}}, Topics: []SourceTopic{top},
		Samples: []Sample{sample(Mirrord, 3), sample(Peer, 2)}}
	var ratio float64
	for _, x := range rep.Ratios() {
		if x.Other == Peer {
			ratio = x.DestBrokerCPUPerGB
		}
	}
	if ratio != 1.5 {
		t.Errorf("dst broker CPU per GB ratio %v, want 1.5 (1.5 s/GB over 1.0 s/GB)", ratio)
	}
	var out bytes.Buffer
	rep.Write(&out)
	for _, want := range []string{"| dst broker CPU s per GB (med) |", "| 0.00 / 3.00 | 1.50 |", "| 1.500 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// Guards issue 23's targets on small batches: for each delivery mode
// against the peer (throughput, CPU per GB, the destination broker's CPU
// per GB) and MirrorMaker (throughput), only on the kafka backend's
// small-batches profile.
func TestReportSmallBatchVerdicts(t *testing.T) {
	top := SourceTopic{}
	top.Name, top.Codec = "bench.lz4", "lz4"
	sample := func(side string, mbps, cpuPerGB, dstCPU float64) Sample {
		const bytes = 1e9
		wall := time.Duration(bytes / 1e6 / mbps * float64(time.Second))
		cpu := time.Duration(cpuPerGB * float64(time.Second))
		return Sample{Side: side, Codec: "lz4", Wall: wall, SourceBytes: bytes, User: cpu,
			Steady: wall, SteadyBytes: bytes, SteadyCPU: cpu, DestBrokerCPU: time.Duration(dstCPU * float64(time.Second))}
	}
	rep := &Report{Config: Config{Backend: BackendKafka, Profile: ProfileSmallBatches, Sides: []string{Mirrord, MirrordTxn, Peer, MM2}}, Topics: []SourceTopic{top},
		Samples: []Sample{sample(Mirrord, 10, 30, 16), sample(MirrordTxn, 60, 10, 1.5), sample(Peer, 50, 12, 1.2), sample(MM2, 9, 100, 8)}}
	got := map[string]bool{}
	for _, v := range rep.SmallBatchVerdicts() {
		got[v.Codec+" "+v.Other+" "+v.What] = v.Met
	}
	want := map[string]bool{
		"lz4, mirrord peer throughput": false, "lz4, mirrord peer CPU per GB": false, "lz4, mirrord peer dst broker CPU per GB": false, "lz4, mirrord mm2 throughput": false,
		"lz4, mirrord-txn peer throughput": true, "lz4, mirrord-txn peer CPU per GB": true, "lz4, mirrord-txn peer dst broker CPU per GB": true, "lz4, mirrord-txn mm2 throughput": true,
	}
	if len(got) != len(want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	for k, w := range want {
		if m, ok := got[k]; !ok || m != w {
			t.Errorf("verdict %q = %v (present %v), want %v", k, m, ok, w)
		}
	}
	var out bytes.Buffer
	rep.Write(&out)
	if !strings.Contains(out.String(), "| lz4, mirrord-txn | peer | dst broker CPU per GB | 1.250 | ≤ 1.50 | met |") {
		t.Errorf("report lacks the small-batch targets:\n%s", out.String())
	}
	rep.Config.Profile = ProfileDefault
	if vs := rep.SmallBatchVerdicts(); vs != nil {
		t.Errorf("small-batch targets on the default profile: %v", vs)
	}
}

// Guards the report's header lines for -mirrord-link and -mm2-props: every
// setting, in key order; no line when there are none.
func TestReportSettings(t *testing.T) {
	top := SourceTopic{}
	top.Name, top.Codec = "bench.lz4", "lz4"
	write := func(c Config) string {
		var out bytes.Buffer
		(&Report{Config: c, Topics: []SourceTopic{top}}).Write(&out)
		return out.String()
	}
	got := write(Config{Backend: BackendKafka, Sides: []string{Mirrord, MM2},
		MirrordLink: map[string]string{"coalesce_bytes": "65536", "checkpoint_interval": `"500ms"`},
		MM2Props:    map[string]string{"producer.linger.ms": "5", "producer.batch.size": "1048576"}})
	for _, want := range []string{
		"mirrord's link also set: `checkpoint_interval = \"500ms\"` `coalesce_bytes = 65536`.  \n",
		"MirrorMaker 2 tuned with: `producer.batch.size = 1048576` `producer.linger.ms = 5`.  \n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if got := write(Config{Backend: BackendKafka, Sides: []string{Mirrord, MM2}}); strings.Contains(got, "also set") || strings.Contains(got, "tuned with") {
		t.Errorf("a settings line without settings:\n%s", got)
	}
}
