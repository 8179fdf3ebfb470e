package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producedRecord is what a producer was told was committed or aborted.
type producedRecord struct {
	topic, value string
	committed    bool
}

// TestDemoMirrorsExactlyTheCommittedRecords runs the demo with a record
// budget and checks its verdict against an oracle that does not read the
// source: what the producers had acknowledged or aborted. Guards against a
// demo that verifies the wrong thing (its own bookkeeping, a partial copy)
// or prints numbers that do not match the data.
func TestDemoMirrorsExactlyTheCommittedRecords(t *testing.T) {
	const records = 600
	cls, err := StartClusters()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cls.Close)

	var (
		mu       sync.Mutex
		produced = map[string]producedRecord{} // by key
		dupKeys  []string
	)
	var out bytes.Buffer
	d, err := New(Config{
		Duration: 5 * time.Minute, // the budget ends the load, not the clock
		Records:  records,
		Listen:   "127.0.0.1:0",
	}, Deps{
		Out:       &out,
		LogOutput: testWriter{t},
		Clusters:  cls,
		OnProduced: func(committed bool, recs []*kgo.Record) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				if _, dup := produced[string(r.Key)]; dup {
					dupKeys = append(dupKeys, string(r.Key))
				}
				produced[string(r.Key)] = producedRecord{topic: r.Topic, value: string(r.Value), committed: committed}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := d.Run(ctx)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(dupKeys) > 0 {
		t.Fatalf("the load produced keys twice: %v", dupKeys)
	}

	var committed, aborted int64
	for _, p := range produced {
		if p.committed {
			committed++
		} else {
			aborted++
		}
	}
	if committed+aborted != records {
		t.Errorf("producers reported %d committed + %d aborted records, want %d in all", committed, aborted, records)
	}
	if aborted == 0 {
		t.Errorf("no transaction was aborted; the load must abort one in %d", AbortEvery)
	}
	if res.Counts.Committed != committed || res.Counts.Aborted != aborted {
		t.Errorf("Result.Counts = %+v, producers reported %d committed and %d aborted", res.Counts, committed, aborted)
	}
	if !res.Verified {
		t.Fatalf("not verified; report first difference %v, behind %d", res.Report.First, res.Report.Behind)
	}
	want := fmt.Sprintf("verified: destination holds exactly the committed source records (%d partitions, %d records)\n", TotalPartitions(), committed)
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q", want)
	}
	if want := fmt.Sprintf("source:      %d records committed, %d aborted\n", committed, aborted); !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q", want)
	}
	if res.Mirrored.Records != committed {
		t.Errorf("mirrord_records_mirrored_total = %d, want %d", res.Mirrored.Records, committed)
	}

	// The destination, record by record: every committed record once,
	// in its topic, with its value; no aborted record; nothing else.
	got := consumeDestination(t, cls.Destination, committed)
	for key, p := range produced {
		n := len(got[key])
		switch {
		case !p.committed && n > 0:
			t.Errorf("aborted record %s is at the destination", key)
		case p.committed && n != 1:
			t.Errorf("committed record %s is at the destination %d times", key, n)
		case p.committed && (got[key][0].Topic != p.topic || string(got[key][0].Value) != p.value):
			t.Errorf("record %s: destination has topic %s value %q, want topic %s value %q", key, got[key][0].Topic, got[key][0].Value, p.topic, p.value)
		}
	}
	for key := range got {
		if _, ok := produced[key]; !ok {
			t.Errorf("destination holds record %s that no producer wrote", key)
		}
	}
}

// TestStopStillVerifies: Stop (the command's first Ctrl-C) ends an
// unbounded load early, and the run still waits for the destination and
// verifies it. Guards against an interrupted demo that skips its proof or
// verifies before the destination caught up.
func TestStopStillVerifies(t *testing.T) {
	var (
		d    *Demo
		once sync.Once
		mu   sync.Mutex
		seen int
	)
	var out bytes.Buffer
	d, err := New(Config{Duration: 5 * time.Minute, Listen: "127.0.0.1:0"}, Deps{
		Out:       &out,
		LogOutput: testWriter{t},
		OnProduced: func(committed bool, recs []*kgo.Record) {
			mu.Lock()
			seen += len(recs)
			enough := seen >= 1000
			mu.Unlock()
			if enough {
				once.Do(d.Stop)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := d.Run(ctx)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(out.String(), "(interrupted)") {
		t.Error("output does not say the load was interrupted")
	}
	if !res.Verified || res.Counts.Committed == 0 {
		t.Fatalf("verified %t with %d records committed; first difference %v, behind %d", res.Verified, res.Counts.Committed, res.Report.First, res.Report.Behind)
	}
	want := fmt.Sprintf("verified: destination holds exactly the committed source records (%d partitions, %d records)\n", TotalPartitions(), res.Counts.Committed)
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q", want)
	}
}

// consumeDestination reads every demo topic of c from the start until it
// has seen as many records as the destination's end offsets hold, and
// fails unless that is want.
func consumeDestination(t *testing.T, c *Cluster, want int64) map[string][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topicNames()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topicNames()...)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != want {
		t.Fatalf("destination topics hold %d records, want %d", total, want)
	}
	got := map[string][]*kgo.Record{}
	for n := int64(0); n < total; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d destination records: %v", n, total, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("consume %s[%d]: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], r)
			n++
		})
	}
	return got
}

// TestConfigProblems: New rejects every bad value at once and names each.
func TestConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		deps Deps
		want []string
	}{
		{"negatives", Config{Duration: -1, Records: -2, Rate: -3}, Deps{Out: &bytes.Buffer{}},
			[]string{"duration -1ns is negative", "records -2 is negative", "rate -3 is negative"}},
		{"no output", Config{}, Deps{}, []string{"Deps.Out is nil"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, tc.deps)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestBudget: the load never produces more records than --records, however
// the producers' chunks interleave, and every producer gets its part.
func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		takes []int
		want  [][]int // per producer, what each take gets
	}{
		{"even", 16, []int{8, 8}, [][]int{{2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}}},
		{"remainder to the first", 43, []int{4, 4}, [][]int{{4, 2}, {4, 2}, {4, 2}, {4, 1}, {4, 1}, {4, 1}, {4, 1}, {4, 1}}},
		{"fewer than producers", 3, []int{8, 8}, [][]int{{1, 0}, {1, 0}, {1, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}},
		{"unlimited", 0, []int{64, 64}, [][]int{{64, 64}, {64, 64}, {64, 64}, {64, 64}, {64, 64}, {64, 64}, {64, 64}, {64, 64}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(Producers) != len(tc.want) {
				t.Fatalf("test written for %d producers, there are %d", len(tc.want), len(Producers))
			}
			l := newLoad(nil, 0, tc.limit, nil)
			for p := range l.shares {
				for i, n := range tc.takes {
					if got := l.shares[p].take(n); got != tc.want[p][i] {
						t.Errorf("producer %d take %d: got %d, want %d", p, i, got, tc.want[p][i])
					}
				}
			}
		})
	}
}

// TestProgressLines: one line per tick when not on a terminal, the line
// rewritten in place on one; the rate is records mirrored since the last
// line.
func TestProgressLines(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := sample{elapsed: time.Second, phase: "load", counts: Counts{Committed: 90, Aborted: 10}, mirrored: 80, lag: 20, state: "MIRRORING"}
	var buf bytes.Buffer
	p := &progress{w: &buf, lastAt: t0}
	p.line(t0.Add(time.Second), s)
	s.elapsed, s.mirrored = 2*time.Second, 280
	p.line(t0.Add(3*time.Second), s)
	p.end()
	want := "   1.0s load     produced 100 (committed 90, aborted 10)  mirrored 80 (80 records/s)  lag 20  link MIRRORING\n" +
		"   2.0s load     produced 100 (committed 90, aborted 10)  mirrored 280 (100 records/s)  lag 20  link MIRRORING\n"
	if buf.String() != want {
		t.Errorf("plain output:\n%q\nwant\n%q", buf.String(), want)
	}

	buf.Reset()
	p = &progress{w: &buf, interactive: true, lastAt: t0}
	p.line(t0.Add(time.Second), s)
	p.line(t0.Add(2*time.Second), s)
	p.end()
	line := "   2.0s load     produced 100 (committed 90, aborted 10)  mirrored 280 (%d records/s)  lag 20  link MIRRORING"
	want = "\r\x1b[K" + fmt.Sprintf(line, 280) + "\r\x1b[K" + fmt.Sprintf(line, 0) + "\n"
	if buf.String() != want {
		t.Errorf("terminal output:\n%q\nwant\n%q", buf.String(), want)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
