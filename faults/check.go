package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/verify"
)

// CheckResult is the end-of-run judgement of a mirror.
type CheckResult struct {
	// Verified is how many committed source records verify compared with
	// their mirrors, record by record (key, value, headers, timestamp,
	// producer ID mapping, batch boundaries, order); Behind how many the
	// destination had not caught up on; First the first difference.
	Verified, Behind int64
	First            *verify.Difference
	// SourceRecords and DestRecords are what read_committed consumers of
	// each side read. Missing and Duplicated count records (by key) the
	// destination holds fewer or more times than the source.
	SourceRecords, DestRecords int
	Missing, Duplicated        int
	// AbortedAtDest counts records of aborted transactions at the
	// destination; AckedNotAtSource acknowledged records the source does
	// not hold (a load or broker fault, not mirrord's); Uncertain records
	// whose producer did not learn their fate.
	AbortedAtDest, AckedNotAtSource, Uncertain int
}

// OK reports whether the mirror is exact.
func (r CheckResult) OK() bool {
	return r.First == nil && r.Behind == 0 && r.Missing == 0 && r.Duplicated == 0 && r.AbortedAtDest == 0 && r.AckedNotAtSource == 0
}

func (r CheckResult) String() string {
	s := fmt.Sprintf("verified %d records record by record (behind %d); source %d, destination %d; missing %d, duplicated %d, aborted at destination %d, acknowledged but not at the source %d, uncertain %d",
		r.Verified, r.Behind, r.SourceRecords, r.DestRecords, r.Missing, r.Duplicated, r.AbortedAtDest, r.AckedNotAtSource, r.Uncertain)
	if r.First != nil {
		s += "; first difference: " + r.First.Error()
	}
	return s
}

// WaitCaughtUp waits until verify finds the destination a complete mirror
// of the topics (nothing behind, no difference) or within passes, and
// returns the last report.
// transactional: the link runs in transactional delivery
// (verify.Config.Transactional).
func WaitCaughtUp(ctx context.Context, env *Env, stateTopic string, topics []string, within time.Duration, transactional bool) (verify.Report, error) {
	deadline := time.Now().Add(within)
	for {
		rep, err := verifyRun(ctx, env, stateTopic, topics, transactional)
		if err == nil && (rep.First != nil || rep.Behind == 0) {
			return rep, nil //nolint:nilerr // rep.First (a *verify.Difference, an error type) is a difference found and reported in rep, not a failure to verify
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("the destination is still %d records behind after %s", rep.Behind, within)
			}
			return rep, err
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func verifyRun(ctx context.Context, env *Env, stateTopic string, topics []string, transactional bool) (verify.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dst := env.Client(Destination)
	salts, err := verify.StateSalts(ctx, dst, []kgo.Opt{kgo.SeedBrokers(env.Addrs(Destination)...)}, stateTopic)
	if err != nil {
		return verify.Report{}, err
	}
	same := map[string]string{}
	for _, t := range topics {
		same[t] = t
	}
	return verify.Run(ctx, verify.Config{
		Source: env.Client(Source), Destination: dst, Topics: same,
		SourceClusterID: SourceClusterID, Salt: salts, Transactional: transactional,
	})
}

// Check judges the mirror of the topics once the load has stopped and the
// destination has caught up: verify record by record, then every key
// counted on both sides and against the ledger.
func Check(ctx context.Context, env *Env, stateTopic string, topics []string, led *Ledger, transactional bool) (CheckResult, error) {
	var res CheckResult
	rep, err := WaitCaughtUp(ctx, env, stateTopic, topics, 5*time.Minute, transactional)
	res.Verified, res.Behind, res.First = rep.Records, rep.Behind, rep.First
	if err != nil && rep.Records == 0 {
		return res, err
	}
	// The source holds at least what its producers had acknowledged
	// (committed), the destination what the source holds.
	led.mu.Lock()
	acked := len(led.acked)
	led.mu.Unlock()
	src, err := readAll(ctx, env.Addrs(Source), topics, acked)
	if err != nil {
		return res, fmt.Errorf("read the source: %w", err)
	}
	n := 0
	for _, c := range src {
		n += c
	}
	dst, err := readAll(ctx, env.Addrs(Destination), topics, n)
	if err != nil {
		return res, fmt.Errorf("read the destination: %w", err)
	}
	for _, n := range src {
		res.SourceRecords += n
	}
	for _, n := range dst {
		res.DestRecords += n
	}
	for k, n := range src {
		if d := dst[k]; d < n {
			res.Missing += n - d
		}
	}
	for k, d := range dst {
		if n := src[k]; d > n {
			res.Duplicated += d - n
		}
	}
	led.mu.Lock()
	for k := range led.aborted {
		res.AbortedAtDest += dst[k]
	}
	for k := range led.acked {
		if src[k] == 0 {
			res.AckedNotAtSource++
		}
	}
	res.Uncertain = len(led.uncertain)
	led.mu.Unlock()
	return res, nil
}

// readAll counts every committed record of the topics by "topic/key". A
// read_committed consumer never returns the transaction markers that may
// end a partition, so the read ends when polls found nothing new for five
// seconds once it counted at least want records, or for a minute before
// that (a side that holds fewer records than want: the caller reports
// them missing). The first polls of a loaded machine (the kfake tier runs
// under the race detector beside other packages) can find nothing for
// seconds while the client looks up metadata and offsets: a read that
// ended after five idle seconds there counted 0 records of a complete
// mirror.
func readAll(ctx context.Context, addrs, topics []string, want int) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
		// kgo v1.22.3's Close races with a fetch in flight over the
		// fetch session's ID; without sessions it is never written
		// (internal/testkit/mirrortest, Cluster.Opts).
		kgo.DisableFetchSessions())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string]int{}
	total, last := 0, time.Now()
	for {
		idle := time.Since(last)
		if total >= want && idle >= 5*time.Second || idle >= time.Minute {
			return out, nil
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", t, p, err))
			}
		})
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Topic+"/"+string(r.Key)]++
			total++
			last = time.Now()
		})
	}
}
