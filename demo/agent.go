package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/config"
)

// The demo's status page samples every second and keeps ten minutes: a
// demo lasts seconds to minutes, and the agent's default (every 10s, one
// hour) would draw its charts from a handful of points.
const (
	HistoryInterval = time.Second
	HistorySamples  = 600 // 600 × agent.SampleBytes = 24,000 B
)

// newAgent builds the agent of cfg with its logs on logOut and its metrics
// on reg. The links run with the configuration's values: kfake, like
// Kafka, gives a replication factor of -1 min(3, brokers) replicas.
func newAgent(cfg *config.Config, logOut io.Writer, reg *prometheus.Registry) (*agent.Agent, error) {
	ag, err := agent.New(cfg, agent.Deps{
		Logger:   agent.NewLogger(cfg.Agent, logOut),
		Registry: reg,
		History:  agent.HistoryConfig{Interval: HistoryInterval, Samples: HistorySamples},
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return ag, nil
}
