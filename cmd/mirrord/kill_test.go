package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// killHCL is a configuration for a link l from src to dst over the given
// topics (full names), with short intervals and the given state topic.
func killHCL(src, dst *mirrortest.Cluster, stateTopic, include string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`
agent {
  listen    = "127.0.0.1:0"
  log_level  = "info"
  log_format = "json"
  shutdown_timeout = "10s"
}
cluster "src" {
  bootstrap_servers = %s
}
cluster "dst" {
  bootstrap_servers = %s
}
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = [%q] }
  state_topic                    = %q
  state_topic_replication_factor = 1
  checkpoint_interval            = "200ms"
  session_timeout                = "3s"
  produce_timeout                = "2s"
  settle_delay                   = "200ms"
  discovery_interval             = "300ms"
  destination_replication_factor = 1
}
`, list(src.Addrs()), list(dst.Addrs()), include, stateTopic)
}

// The agent, as a real process, SIGKILLed five times under load and
// started again each time (issue 9: no drain, no final checkpoint, its
// connections cut by the kernel, Produce requests it had written still
// inside the broker): every committed record reaches the destination once,
// nothing aborted does.
func TestAgentSIGKILLUnderLoad(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		n := mirrortest.NamesFor(t, b)
		src := mirrortest.NewCluster(t, b, "src", kafkatest.SourceClusterID)
		dst := mirrortest.NewCluster(t, b, "dst", kafkatest.DestClusterID)
		topic := n.Of("killed")
		src.CreateTopic(t, topic, 4, nil)
		cfg := writeFile(t, "mirrord.hcl", killHCL(src, dst, n.StateTopic(), n.Include("killed")))
		p := mirrortest.NewProduced()

		stopLoad := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				mirrortest.Load(t, src, p, mirrortest.Kind(i%3), i%len(mirrortest.Codecs), n.Of(fmt.Sprintf("r%03d", i)), 80, []string{topic})
			}
		})
		rng := rand.New(rand.NewPCG(9, 9))
		const kills = 5
		for i := range kills {
			proc := startMirrord(t, "run", "--config", cfg)
			proc.waitLog(t, "link state", func(l map[string]any) bool { return l["to"] == "MIRRORING" })
			time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
			proc.signal(t, syscall.SIGKILL)
			if code := proc.wait(t); code != -1 {
				t.Logf("kill %d: exit code %d", i+1, code)
			}
		}
		close(stopLoad)
		wg.Wait()

		last := startMirrord(t, "run", "--config", cfg)
		rep := mirrortest.WaitMirrored(t, src, dst, n.StateTopic(), map[string]string{topic: topic}, 3*time.Minute)
		got := mirrortest.ExactlyOnce(t, dst, p, nil, topic)
		last.signal(t, syscall.SIGTERM)
		if code := last.wait(t); code != 0 {
			t.Errorf("the last agent exited with %d after SIGTERM, want 0", code)
		}
		t.Logf("%s: SIGKILLed the agent %d times under load; %d committed records at the destination exactly once (verify: %d records)", b, kills, got, rep.Records)
	})
}
