package realkafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
)

// SkipMessage is the one line a test of the real tier skips with when the
// tier is off.
var SkipMessage = fmt.Sprintf("real-Kafka tier off: set %s=all (or a list such as %s) to run this against Apache Kafka brokers", EnvVersions, Kafka4)

// TestVersions returns the versions MIRRORD_TEST_KAFKA selects, skipping t
// with SkipMessage when it selects none (and failing it when the variable
// cannot be read). A test of the real tier runs one subtest per version.
func TestVersions(t testing.TB) []string {
	t.Helper()
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Skip(SkipMessage)
	}
	return vs
}

// SkipMissingTool ends t when err says java or mvn is missing (or java is
// too old): a failure under CI=true (the tier was asked for and cannot
// run), a skip with the one-line reason elsewhere. Other errors are left to
// the caller.
func SkipMissingTool(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrNoJava) && !errors.Is(err, ErrNoMaven) && !errors.Is(err, ErrJavaTooOld) {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// RequireTools skips t (fails it under CI=true) with one line when java or
// mvn is missing.
func RequireTools(t testing.TB) {
	t.Helper()
	if _, err := Java(context.Background()); err != nil {
		SkipMissingTool(t, err)
		t.Fatal(err)
	}
	if _, err := Maven(); err != nil {
		SkipMissingTool(t, err)
	}
}

// ForTest starts a cluster for t (skipping t when the real tier is off or,
// outside CI, when java or mvn is missing) and closes it when t ends. An
// empty cfg.Version is the first version MIRRORD_TEST_KAFKA selects. When t
// failed, the cluster's directory with every node's log stays and t's log
// says where; otherwise it is removed.
func ForTest(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	vs := TestVersions(t)
	if cfg.Version == "" {
		cfg.Version = vs[0]
	}
	cfg.ShortLived = true
	c, err := Start(context.Background(), cfg)
	if err != nil {
		SkipMissingTool(t, err)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.Keep()
			t.Logf("realkafka: Kafka %s cluster %s kept for its logs: %s (node-<id>/server.log)", c.Version(), c.ID(), c.Dir())
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// shared holds the clusters of Shared, started on first use and stopped by
// Main.
var shared struct {
	mu     sync.Mutex
	active bool // Main runs
	m      map[string]*sharedEntry
}

type sharedEntry struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns the cluster of the test package known by key, starting it
// with cfg on first use (later calls ignore cfg: the key names the
// configuration). It skips like ForTest. The package's TestMain must run
// Main, which stops the shared clusters after the tests:
//
//	func TestMain(m *testing.M) { os.Exit(realkafka.Main(m)) }
//
// Tests that share a cluster give themselves their own topics, and a test
// that kills or stops nodes uses ForTest instead.
func Shared(t testing.TB, key string, cfg Config) *Cluster {
	t.Helper()
	vs := TestVersions(t)
	if cfg.Version == "" {
		cfg.Version = vs[0]
	}
	shared.mu.Lock()
	if !shared.active {
		shared.mu.Unlock()
		t.Fatal("realkafka.Shared needs realkafka.Main: func TestMain(m *testing.M) { os.Exit(realkafka.Main(m)) }")
	}
	if shared.m == nil {
		shared.m = map[string]*sharedEntry{}
	}
	e := shared.m[key]
	if e == nil {
		e = &sharedEntry{}
		shared.m[key] = e
	}
	shared.mu.Unlock()
	cfg.ShortLived = true
	e.once.Do(func() { e.c, e.err = Start(context.Background(), cfg) })
	if e.err != nil {
		SkipMissingTool(t, e.err)
		t.Fatalf("shared cluster %q: %v", key, e.err)
	}
	return e.c
}

// Main runs m and then stops every cluster Shared started. When the run
// failed their directories stay, and Main prints where on stderr.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.active = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	keys := make([]string, 0, len(shared.m))
	for k := range shared.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := shared.m
	shared.m = nil
	shared.active = false
	shared.mu.Unlock()
	for _, k := range keys {
		c := entries[k].c
		if c == nil {
			continue
		}
		if code != 0 {
			c.Keep()
			fmt.Fprintf(os.Stderr, "realkafka: shared cluster %q (Kafka %s, %s) kept for its logs: %s\n", k, c.Version(), c.ID(), c.Dir())
		}
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "realkafka: shared cluster %q: %v\n", k, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}
