package harness

import (
	"testing"
	"time"

	"github.com/seed83556561/mirrord/config"
)

// TestMirrordConfig guards the generated file against the real config
// loader: it must parse, and select exactly the benchmark's topics with the
// rename, state topic and buffer bound asked for.
func TestMirrordConfig(t *testing.T) {
	src := MirrordConfig(MirrordLink{
		Name:             "bench-r3",
		Source:           []string{"127.0.0.1:1001", "127.0.0.1:1002"},
		Dest:             []string{"127.0.0.1:2001"},
		Topics:           []string{"bench.lz4", "bench.zstd"},
		Rename:           "{topic}.r3",
		StateTopic:       "__mirror_state.r3",
		MaxBufferedBytes: 64 << 20,
		LogLevel:         "info",
		Delivery:         "transactional",
		Extra:            map[string]string{"checkpoint_interval": `"500ms"`, "coalesce_bytes": "65536"},
	})
	cfg, err := config.Parse("bench.hcl", []byte(src), nil)
	if err != nil {
		t.Fatalf("generated config does not parse: %v\n%s", err, src)
	}
	if len(cfg.Links) != 1 {
		t.Fatalf("%d links, want 1", len(cfg.Links))
	}
	l := cfg.Links[0]
	if l.Name != "bench-r3" || l.StateTopic != "__mirror_state.r3" || l.MaxBufferedBytes != 64<<20 || l.StartFrom != "earliest" {
		t.Errorf("link %+v: wrong name, state topic, buffer bound or start", l)
	}
	if l.CheckpointInterval != 500*time.Millisecond || l.CoalesceBytes != 65536 {
		t.Errorf("link %+v: the extra keys (-mirrord-link) were not taken", l)
	}
	if got := cfg.Clusters[l.Source].BootstrapServers; len(got) != 2 || got[1] != "127.0.0.1:1002" {
		t.Errorf("source bootstrap servers %v", got)
	}
	if got := cfg.Clusters[l.Destination].BootstrapServers; len(got) != 1 || got[0] != "127.0.0.1:2001" {
		t.Errorf("destination bootstrap servers %v", got)
	}
	for topic, want := range map[string]bool{"bench.lz4": true, "bench.zstd": true, "bench.none": false, "benchXlz4": false, "bench.lz4.r2": false} {
		if got := l.Selects(topic); got != want {
			t.Errorf("Selects(%q) = %v, want %v", topic, got, want)
		}
	}
	if got := l.DestinationTopic("bench.lz4", l.Source); got != "bench.lz4.r3" {
		t.Errorf("destination of bench.lz4 is %q, want bench.lz4.r3", got)
	}
}

// TestHCLString guards quoting: what HCL would read as an escape or a
// template stays literal text.
func TestHCLString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`a.b`, `"a.b"`},
		{`a\.b`, `"a\\.b"`},
		{`say "hi"`, `"say \"hi\""`},
		{`${x}`, `"$${x}"`},
		{`%{if}`, `"%%{if}"`},
	} {
		if got := hclString(tc.in); got != tc.want {
			t.Errorf("hclString(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
