package load

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// TestGeneratorShape guards the data's promises: exact value size, two
// headers, keys, and the same records for the same seed.
func TestGeneratorShape(t *testing.T) {
	for _, size := range []int{256, 1024, 4000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, b := NewGenerator(3, size), NewGenerator(3, size)
			other := NewGenerator(4, size)
			for i := range int64(200) {
				ra, rb, ro := a.Record(i), b.Record(i), other.Record(i)
				if len(ra.Value) != size {
					t.Fatalf("record %d: value is %d bytes, want %d", i, len(ra.Value), size)
				}
				if len(ra.Headers) != 2 || len(ra.Key) == 0 {
					t.Fatalf("record %d: %d headers and key %q, want 2 headers and a key", i, len(ra.Headers), ra.Key)
				}
				if !bytes.Equal(ra.Value, rb.Value) || !bytes.Equal(ra.Key, rb.Key) || !bytes.Equal(ra.Headers[0].Value, rb.Headers[0].Value) {
					t.Fatalf("record %d differs between two generators of the same seed", i)
				}
				if bytes.Equal(ra.Value, ro.Value) {
					t.Fatalf("record %d is the same for seeds 3 and 4", i)
				}
			}
		})
	}
}

// TestCompressionRatio guards the "compressible about 2-4x, not all zeros"
// promise on a batch-sized run of values, for each codec.
func TestCompressionRatio(t *testing.T) {
	g := NewGenerator(1, DefaultValueSize)
	var raw []byte
	for i := int64(0); len(raw) < 1<<20; i++ {
		raw = append(raw, g.Record(i).Value...)
	}
	for _, tc := range []struct {
		codec    string
		min, max float64
	}{
		{LZ4, 1.8, 4},
		{ZSTD, 2.2, 5},
	} {
		t.Run(tc.codec, func(t *testing.T) {
			codec, err := Codec(tc.codec)
			if err != nil {
				t.Fatal(err)
			}
			c, err := kgo.DefaultCompressor(codec)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := c.Compress(new(bytes.Buffer), raw)
			ratio := float64(len(raw)) / float64(len(out))
			t.Logf("%s: %d -> %d bytes, %.2fx", tc.codec, len(raw), len(out), ratio)
			if ratio < tc.min || ratio > tc.max {
				t.Errorf("%s compresses the values %.2fx, want %.1f to %.1fx", tc.codec, ratio, tc.min, tc.max)
			}
		})
	}
}

// TestConfigErrors guards validation: every problem reported at once.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"unknown codec", Config{Codecs: []string{"brotli"}, BytesPerTopic: 1 << 20}, []string{`codec "brotli"`}},
		{"too small", Config{BytesPerTopic: 10, ValueSize: 100, Partitions: -1}, []string{"value size is 100", "bytes per topic is 10", "partitions is -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg, nil)
			if err == nil {
				t.Fatal("Run accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// codecIDs are the batch attribute codec numbers of the protocol.
var codecIDs = map[string]uint8{None: 0, LZ4: 3, ZSTD: 4}

// TestRunLoads guards the loader end to end: each topic holds exactly the
// generator's records, each codec's batches carry that codec.
func TestRunLoads(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics, err := Run(ctx, Config{BytesPerTopic: 200 << 10, Partitions: 3}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != len(Codecs) {
		t.Fatalf("loaded %d topics, want %d", len(topics), len(Codecs))
	}
	for i, top := range topics {
		if top.Records != 200 || top.Name != TopicName(Codecs[i]) {
			t.Fatalf("topic %d: %+v, want %s with 200 records", i, top, TopicName(Codecs[i]))
		}
		want := map[string][]byte{} // order-independent across partitions: value by order number
		gen := NewGenerator(DefaultSeed+uint64(i), DefaultValueSize)
		for j := range top.Records {
			r := gen.Record(j)
			want[string(r.Value)] = r.Key
		}
		cl := kafkatest.Client(t, c, kgo.ConsumeTopics(top.Name), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		seen := 0
		for seen < int(top.Records) {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("consume %s: %v", top.Name, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				key, ok := want[string(r.Value)]
				if !ok || !bytes.Equal(key, r.Key) {
					t.Fatalf("%s[%d] offset %d: record not produced by the generator (key %q)", r.Topic, r.Partition, r.Offset, r.Key)
				}
				if got, want := r.Attrs.CompressionType(), codecIDs[top.Codec]; got != want {
					t.Fatalf("%s[%d] offset %d: compression type %d, want %d", r.Topic, r.Partition, r.Offset, got, want)
				}
				if len(r.Headers) != 2 {
					t.Fatalf("%s[%d] offset %d: %d headers, want 2", r.Topic, r.Partition, r.Offset, len(r.Headers))
				}
				delete(want, string(r.Value))
				seen++
			})
		}
		if len(want) != 0 {
			t.Fatalf("%s: %d records missing", top.Name, len(want))
		}
	}
}
