package link

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
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

// Guards the names the log and the scripts show for pairs and decisions.
func TestNames(t *testing.T) {
	pr := Pair{Src: tp.Partition{Topic: "orders", Partition: 3}, Dst: tp.Partition{Topic: "dc1.orders", Partition: 3}}
	if got := pr.String(); got != "orders[3]→dc1.orders[3]" {
		t.Errorf("pair %q", got)
	}
	for v, want := range map[verdict]string{skipEmpty: "skip", skipDuplicate: "duplicate", needSalt: "salt", forward: "forward"} {
		if got := v.String(); got != want {
			t.Errorf("verdict %d named %q, want %q", v, got, want)
		}
	}
}

// twin is the one relation by which settling, reconciliation and offset
// translation recognise the link's own batch at the destination: equal
// but for what the destination broker assigns or rewrites (base offset,
// partition leader epoch, CRC, the timestamp-type bit and max timestamp
// of a LogAppendTime batch reaching a CreateTime topic), different for
// anything a producer wrote.
func TestTwin(t *testing.T) {
	want := batchtest.Simple(0, -12345, 3, 40, 4)
	rewritten := func(edit func(b []byte)) []byte {
		b := slices.Clone(want)
		edit(b)
		return b
	}
	for _, tc := range []struct {
		name string
		got  []byte
		twin bool
	}{
		{"identical", slices.Clone(want), true},
		{"base offset and leader epoch assigned", rewritten(func(b []byte) {
			binary.BigEndian.PutUint64(b, 977)
			binary.BigEndian.PutUint32(b[12:], 8)
		}), true},
		{"stamped, max timestamp and CRC rewritten", rewritten(func(b []byte) {
			b[offAttributes+1] |= timestampTypeBit
			binary.BigEndian.PutUint64(b[offMaxTimestamp:], 1_800_000_000_000)
			binary.BigEndian.PutUint32(b[17:], 0xdeadbeef)
		}), true},
		{"another producer ID", rewritten(func(b []byte) { b[offProducerID+7]++ }), false},
		{"another base sequence", rewritten(func(b []byte) { b[offProducerID+8+2+3]++ }), false},
		{"another record byte", rewritten(func(b []byte) { b[len(b)-1]++ }), false},
		{"another codec", rewritten(func(b []byte) { b[offAttributes+1] |= 0x01 }), false},
		{"transactional", rewritten(func(b []byte) { b[offAttributes+1] |= 0x10 }), false},
		{"another first timestamp", rewritten(func(b []byte) { b[offMaxTimestamp-1]++ }), false},
		{"another last offset delta", rewritten(func(b []byte) { b[offLastOffsetDelt+3]++ }), false},
		{"shorter", want[:len(want)-1], false},
		{"a header only", want[:transform.BatchHeaderSize-1], false},
	} {
		if got := twin(want, tc.got); got != tc.twin {
			t.Errorf("%s: twin = %v, want %v", tc.name, got, tc.twin)
		}
	}
}
