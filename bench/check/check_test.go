package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// TestTopic guards the comparison: an exact copy passes, and each kind of
// damage a mirror could do is reported with its partition.
func TestTopic(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcOpts := []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)}
	dstOpts := []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	base := time.UnixMilli(1_700_000_000_000)
	var records []*kgo.Record
	for i := range 60 {
		records = append(records, &kgo.Record{
			Topic: "t", Partition: int32(i % 3),
			Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d", i),
			Headers:   []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		})
	}
	produce(ctx, t, srcOpts, "t", kgo.Lz4Compression(), records)

	for _, tc := range []struct {
		name  string
		codec kgo.CompressionCodec
		tweak func(i int, r *kgo.Record) *kgo.Record // nil drops the record
		extra bool
		want  string // "" for no difference
	}{
		{name: "exact copy", codec: kgo.Lz4Compression()},
		{name: "missing record", codec: kgo.Lz4Compression(), tweak: func(i int, r *kgo.Record) *kgo.Record {
			if i == 58 { // the last of partition 1
				return nil
			}
			return r
		}, want: "destination d[1] ends after 19 records"},
		{name: "changed value", codec: kgo.Lz4Compression(), tweak: func(i int, r *kgo.Record) *kgo.Record {
			if i == 31 {
				r.Value = []byte("value X")
			}
			return r
		}, want: "d[1] offset 10: value differs"},
		{name: "changed header", codec: kgo.Lz4Compression(), tweak: func(i int, r *kgo.Record) *kgo.Record {
			if i == 2 {
				r.Headers[0].Value = []byte("x")
			}
			return r
		}, want: `d[2] offset 0: header 0 is "h"="x"`},
		{name: "changed timestamp", codec: kgo.Lz4Compression(), tweak: func(i int, r *kgo.Record) *kgo.Record {
			if i == 0 {
				r.Timestamp = r.Timestamp.Add(time.Second)
			}
			return r
		}, want: "d[0] offset 0: timestamp"},
		{name: "other codec", codec: kgo.ZstdCompression(), want: "compression type 4, want 3"},
		{name: "extra record", codec: kgo.Lz4Compression(), extra: true, want: "has a record at offset 20 beyond the 20 records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "d." + strings.ReplaceAll(tc.name, " ", "-")
			var out []*kgo.Record
			for i, r := range records {
				c := &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value,
					Headers: []kgo.RecordHeader{{Key: r.Headers[0].Key, Value: r.Headers[0].Value}}, Timestamp: r.Timestamp}
				if tc.tweak != nil {
					c = tc.tweak(i, c)
				}
				if c != nil {
					out = append(out, c)
				}
			}
			if tc.extra {
				out = append(out, &kgo.Record{Topic: topic, Partition: 2, Value: []byte("extra"), Timestamp: base})
			}
			produce(ctx, t, dstOpts, topic, tc.codec, out)
			n, err := Topic(ctx, srcOpts, dstOpts, "t", topic, false)
			if tc.want == "" {
				if err != nil || n != int64(len(records)) {
					t.Fatalf("Topic = %d, %v; want %d records and no difference", n, err, len(records))
				}
				return
			}
			if !errors.Is(err, ErrDifferent) || !strings.Contains(err.Error(), strings.Replace(tc.want, "d[", topic+"[", 1)) {
				t.Fatalf("Topic error = %v; want ErrDifferent mentioning %q", err, tc.want)
			}
		})
	}
}

func produce(ctx context.Context, t *testing.T, opts []kgo.Opt, topic string, codec kgo.CompressionCodec, records []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// TestTopicUncompressedSource guards the codec rule's exceptions: a record
// the source left uncompressed may be compressed at the destination (a
// record-level mirror writes the topic's codec; producers skip compression
// where it does not pay), and, for a record-level mirror, a compressed
// source record may be uncompressed (its producer skipped compression);
// otherwise a compressed source record must keep its codec.
func TestTopicUncompressedSource(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcOpts := []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)}
	dstOpts := []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := time.UnixMilli(1_700_000_000_000)
	recs := func(topic string) []*kgo.Record {
		var out []*kgo.Record
		for i := range 9 {
			out = append(out, &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d %s", i, strings.Repeat("x", 2000)), Timestamp: base})
		}
		return out
	}
	produce(ctx, t, srcOpts, "plain", kgo.NoCompression(), recs("plain"))
	produce(ctx, t, dstOpts, "plain.lz4", kgo.Lz4Compression(), recs("plain.lz4"))
	if n, err := Topic(ctx, srcOpts, dstOpts, "plain", "plain.lz4", false); err != nil || n != 9 {
		t.Fatalf("uncompressed source, lz4 mirror: %d, %v; want 9 records and no difference", n, err)
	}
	produce(ctx, t, dstOpts, "plain.none", kgo.NoCompression(), recs("plain.none"))
	produce(ctx, t, srcOpts, "packed", kgo.Lz4Compression(), recs("packed"))
	if _, err := Topic(ctx, srcOpts, dstOpts, "packed", "plain.none", false); !errors.Is(err, ErrDifferent) || !strings.Contains(err.Error(), "compression type 0, want 3") {
		t.Fatalf("lz4 source, uncompressed mirror: %v; want ErrDifferent for the codec", err)
	}
	// A record-level mirror's producer may leave a batch uncompressed
	// where compressing does not pay; another codec is still a difference.
	if n, err := Topic(ctx, srcOpts, dstOpts, "packed", "plain.none", true); err != nil || n != 9 {
		t.Fatalf("lz4 source, uncompressed record-level mirror: %d, %v; want 9 records and no difference", n, err)
	}
	produce(ctx, t, dstOpts, "packed.zstd", kgo.ZstdCompression(), recs("packed.zstd"))
	if _, err := Topic(ctx, srcOpts, dstOpts, "packed", "packed.zstd", true); !errors.Is(err, ErrDifferent) || !strings.Contains(err.Error(), "compression type 4, want 3") {
		t.Fatalf("lz4 source, zstd record-level mirror: %v; want ErrDifferent for the codec", err)
	}
}
