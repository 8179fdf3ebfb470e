package link

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// New refuses a configuration the link cannot run with, naming the link
// and the key; config.Validate refuses these in a file first, so this is
// the guard for configurations built in code (tests, the bench).
func TestNewRefusesBadConfig(t *testing.T) {
	valid := func() Config {
		l := settingsOf(config.Default().Links[0])
		l.Name, l.StateTopic = "l", "__mirror_state"
		return Config{
			Link:            l,
			Source:          Cluster{Name: "a", BootstrapServers: []string{"127.0.0.1:1"}},
			Destination:     Cluster{Name: "b", BootstrapServers: []string{"127.0.0.1:2"}},
			ShutdownTimeout: time.Second,
		}
	}
	if _, err := New(valid(), Deps{}); err != nil {
		t.Fatalf("the valid configuration is refused: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		says string
	}{
		{func(c *Config) { c.Link.Name = "" }, "name is empty"},
		{func(c *Config) { c.Source.BootstrapServers = nil }, `source cluster "a" has no bootstrap servers`},
		{func(c *Config) { c.Destination.BootstrapServers = nil }, `destination cluster "b" has no bootstrap servers`},
		{func(c *Config) { c.Link.CheckpointInterval = c.Link.SessionTimeout }, "checkpoint_interval"},
		{func(c *Config) { c.Link.CheckpointInterval = 0 }, "checkpoint_interval"},
		{func(c *Config) { c.Link.MaxBufferedBytes = 0 }, "max_buffered_bytes"},
		{func(c *Config) { c.Link.StateTopic = "" }, "state_topic is empty"},
		{func(c *Config) { c.Link.SettleDelay = 0 }, "settle_delay"},
		{func(c *Config) { c.Link.ProduceTimeout = -time.Second }, "produce_timeout"},
		{func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown timeout"},
		{func(c *Config) { c.Link.StartFrom = "middle" }, `start_from "middle"`},
		{func(c *Config) { c.Link.OnOffsetOutOfRange = "ignore" }, `on_offset_out_of_range "ignore"`},
	} {
		c := valid()
		tc.edit(&c)
		_, err := New(c, Deps{})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("error %v, want one that says %q", err, tc.says)
		}
	}
	c := valid()
	c.Link.StateTopic, c.ShutdownTimeout = "", 0
	if _, err := New(c, Deps{}); err == nil || !strings.Contains(err.Error(), "state_topic") || !strings.Contains(err.Error(), "shutdown timeout") {
		t.Errorf("error %v, want every problem named at once", err)
	}
}

// Every error that fails a link is counted under the kind an operator's
// alert can tell apart, also when wrapped.
func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{statestore.ErrFenced, "fenced"},
		{appender.ErrLeaseExpired, "lease_expired"},
		{fetcher.ErrOffsetOutOfRange, "offset_out_of_range"},
		{transform.ErrCorrupt, "corrupt"},
		{fetcher.ErrCorrupt, "corrupt"},
		{appender.ErrCorrupt, "corrupt"},
		{appender.ErrTooLarge, "too_large"},
		{context.DeadlineExceeded, "timeout"},
		{kerr.TopicAuthorizationFailed, "authorization"},
		{kerr.TransactionalIDAuthorizationFailed, "authorization"},
		{errors.New("anything else"), "other"},
	} {
		wrapped := fmt.Errorf("session: %w", tc.err)
		if got := errorKind(wrapped); got != tc.kind {
			t.Errorf("errorKind(%v) = %q, want %q", wrapped, got, tc.kind)
		}
	}
}

// A preserve session whose state session was fenced fails as fenced, also
// when an append found the lease ended first (the fencing ends the lease at
// once): counted as lease_expired, the agent would begin again at once and
// fence back the session that fenced it. A lease that lapsed by itself, or a
// failure of another kind, stays what it was.
func TestFencedFirst(t *testing.T) {
	lapse := fmt.Errorf("append to t[0]: %w: the produce request to broker 1 was not sent (lease left: 0s)", appender.ErrLeaseExpired)
	fencing := fmt.Errorf("state session of link \"x\" (epoch 1): produce: %w: %w", statestore.ErrFenced, kerr.ProducerFenced)
	other := errors.New("state session of link \"x\": commit: the lease ran out")
	for _, tc := range []struct {
		name          string
		err, stateErr error
		kind          string
	}{
		{"lapse after a fencing", lapse, fencing, "fenced"},
		{"lapse alone", lapse, nil, "lease_expired"},
		{"lapse after another failure", lapse, other, "lease_expired"},
		{"corrupt while fenced", fmt.Errorf("t[0]: %w", appender.ErrCorrupt), fencing, "corrupt"},
		{"clean end", nil, fencing, ""},
	} {
		got := fencedFirst(tc.err, tc.stateErr)
		if tc.kind == "" {
			if got != nil {
				t.Errorf("%s: %v, want nil", tc.name, got)
			}
			continue
		}
		if k := errorKind(got); k != tc.kind {
			t.Errorf("%s: %v is %q, want %q", tc.name, got, k, tc.kind)
		}
		if !errors.Is(got, tc.err) && !strings.Contains(got.Error(), tc.err.Error()) {
			t.Errorf("%s: %v lost the append's error %v", tc.name, got, tc.err)
		}
	}
}

// Guards the names the log and the scripts show for pairs and decisions.
func TestNames(t *testing.T) {
	pr := Pair{Src: tp.Partition{Topic: "orders", Partition: 3}, Dst: tp.Partition{Topic: "dc1.orders", Partition: 3}}
	if got := pr.String(); got != "orders[3]→dc1.orders[3]" {
		t.Errorf("pair %q", got)
	}
}
