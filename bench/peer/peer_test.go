package peer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/bench/check"
	"github.com/seed83556561/mirrord/bench/load"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// TestMirror guards the peer end to end: every record of every codec topic
// reaches the same partition of its destination topic, in order, with its
// key, value, headers, timestamp and codec; and Run returns nil when
// stopped.
func TestMirror(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcOpts := []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)}
	dstOpts := []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topics, err := load.Run(ctx, load.Config{BytesPerTopic: 300 << 10, Partitions: 4}, srcOpts)
	if err != nil {
		t.Fatal(err)
	}
	var routes []Route
	for _, top := range topics {
		codec, _ := load.Codec(top.Codec)
		routes = append(routes, Route{Source: top.Name, Destination: top.Name + ".peer", Codec: codec})
	}
	m, err := New(Config{Routes: routes, Tasks: 3, MaxBufferedBytes: 4 << 20}, Deps{SourceOpts: srcOpts, DestinationOpts: dstOpts})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()

	var want int64
	for _, top := range topics {
		want += top.Records
	}
	dcl := kafkatest.Client(t, dst)
	adm := kadm.NewClient(dcl)
	for m.Records() < want {
		select {
		case err := <-done:
			t.Fatalf("Run ended early after %d of %d records: %v", m.Records(), want, err)
		case <-ctx.Done():
			t.Fatalf("mirrored %d of %d records before the deadline", m.Records(), want)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
	for _, r := range routes {
		n, err := check.Topic(ctx, srcOpts, dstOpts, r.Source, r.Destination, true)
		if err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(ctx, r.Destination)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if total != n || n != 300 {
			t.Fatalf("%s: %d records compared, %d in the destination; want 300 in both", r.Destination, n, total)
		}
	}
}

// TestConfigErrors guards validation: every problem at once.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no routes", Config{}, []string{"no routes"}},
		{"bad routes", Config{Routes: []Route{{Source: "a", Destination: "b"}, {Source: "a"}}, Tasks: -1},
			[]string{"route 1: source and destination", "route 1: source topic a is routed twice", "tasks is -1"}},
		{"small buffer", Config{Routes: []Route{{Source: "a", Destination: "b"}}, Tasks: 4, MaxBufferedBytes: 1 << 20},
			[]string{"max buffered bytes (1048576) is below one batch (1048576) per task (4)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, Deps{})
			if err == nil {
				t.Fatal("New accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestMissingSourceTopic guards setup: a route to a topic the source lacks
// fails Run with the topic's name instead of mirroring nothing forever.
func TestMissingSourceTopic(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	m, err := New(Config{Routes: []Route{{Source: "absent", Destination: "x"}}},
		Deps{SourceOpts: []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)}, DestinationOpts: []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = m.Run(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "source topic absent") {
		t.Fatalf("Run = %v; want an error naming source topic absent", err)
	}
}
