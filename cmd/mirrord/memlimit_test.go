package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/seed83556561/mirrord/config"
)

// mirrord run bounds its heap by the links' buffers (issue 13): without a
// limit Go lets the heap grow to twice the live heap, which put the
// resident memory of a 1,000-partition link at 258 MiB with a 64 MiB
// buffer. GOMEMLIMIT in the environment wins.
func TestApplyMemoryLimit(t *testing.T) {
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	cfg := &config.Config{Links: []*config.Link{{MaxBufferedBytes: 64 << 20}, {MaxBufferedBytes: 16 << 20}}}
	noEnv := func(string) string { return "" }

	limit, from := applyMemoryLimit(cfg, noEnv)
	if want := int64(64+16+48) << 20; limit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("automatic limit %d (runtime %d), want %d", limit, debug.SetMemoryLimit(-1), want)
	}
	t.Logf("from %s", from)

	// A link that joins batches (either delivery) holds a joined copy of
	// buffered batches in flight: its buffer counts twice.
	joining := &config.Config{Links: []*config.Link{
		{MaxBufferedBytes: 64 << 20, Delivery: config.DeliveryTransactional, CoalesceBytes: 1000000},
		{MaxBufferedBytes: 16 << 20, Delivery: config.DeliveryTransactional},
		{MaxBufferedBytes: 8 << 20, CoalesceBytes: 1000000},
		{MaxBufferedBytes: 4 << 20},
	}}
	want := int64(2*64+16+2*8+4+48) << 20
	if limit, _ := applyMemoryLimit(joining, noEnv); limit != want {
		t.Errorf("automatic limit with joining links %d, want %d", limit, want)
	}

	cfg.Agent.MemoryLimit = 300 << 20
	if limit, from := applyMemoryLimit(cfg, noEnv); limit != 300<<20 || from != "agent.memory_limit" || debug.SetMemoryLimit(-1) != 300<<20 {
		t.Errorf("agent.memory_limit: %d from %s (runtime %d), want 300MiB from agent.memory_limit", limit, from, debug.SetMemoryLimit(-1))
	}

	debug.SetMemoryLimit(math.MaxInt64)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "off"
		}
		return ""
	}
	if limit, _ := applyMemoryLimit(cfg, env); limit != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: set %d (runtime %d), want nothing set", limit, debug.SetMemoryLimit(-1))
	}
}
