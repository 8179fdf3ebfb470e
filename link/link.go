package link

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Defaults of the tunables that the configuration file does not expose.
const (
	DefaultDiscoveryInterval = 30 * time.Second
	DefaultBackoffBase       = time.Second
	DefaultBackoffMax        = 2 * time.Minute
	DefaultLeaseSkew         = 5 * time.Second
	DefaultSettleDelay       = 30 * time.Second
	DefaultShutdownTimeout   = 15 * time.Second
	DefaultRequestTimeout    = 30 * time.Second
)

// Config configures one link. Link is the validated link block; Source and
// Destination are its clusters.
type Config struct {
	Link        config.Link
	Source      config.Cluster
	Destination config.Cluster

	// DiscoveryInterval is how often new source topics and partitions
	// are looked for while MIRRORING.
	DiscoveryInterval time.Duration
	// BackoffBase and BackoffMax bound the wait in FAILED.
	BackoffBase, BackoffMax time.Duration
	// LeaseSkew is the clock-skew margin added to a previous session's
	// lease before a new session reconciles (DESIGN §7).
	LeaseSkew time.Duration
	// SettleDelay is how long an append whose outcome is unknown is left
	// to land before the destination is read to settle it: long enough
	// for a request the broker already read to complete or time out, and
	// for the ISR to shrink so that the high watermark covers an append
	// that was waiting for a lost follower (replica.lag.time.max.ms,
	// 30s by default).
	SettleDelay time.Duration
	// ShutdownTimeout bounds the drain of in-flight appends and the final
	// checkpoint when the link stops.
	ShutdownTimeout time.Duration
	// RequestTimeout is the Produce timeout.
	RequestTimeout time.Duration
	// FetchMaxWait is the long-poll time of source fetches (0: fetcher
	// default).
	FetchMaxWait time.Duration
	// DestinationReplicationFactor for destination topics the link
	// creates (-1 or 0: the broker's default).
	DestinationReplicationFactor int16
	// CheckCRCs validates every fetched batch's CRC before forwarding it.
	CheckCRCs bool
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.DiscoveryInterval, DefaultDiscoveryInterval)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	set(&c.SettleDelay, DefaultSettleDelay)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.RequestTimeout, DefaultRequestTimeout)
	if c.LeaseSkew < 0 {
		c.LeaseSkew = DefaultLeaseSkew
	}
	if c.DestinationReplicationFactor == 0 {
		c.DestinationReplicationFactor = -1
	}
}

func (c *Config) validate() error {
	var errs []error
	l := &c.Link
	if l.Name == "" {
		errs = append(errs, errors.New("link: name is empty"))
	}
	if len(c.Source.BootstrapServers) == 0 {
		errs = append(errs, fmt.Errorf("link %s: source cluster %q has no bootstrap servers", l.Name, c.Source.Name))
	}
	if len(c.Destination.BootstrapServers) == 0 {
		errs = append(errs, fmt.Errorf("link %s: destination cluster %q has no bootstrap servers", l.Name, c.Destination.Name))
	}
	if l.CheckpointInterval <= 0 || l.SessionTimeout <= 0 || l.CheckpointInterval > l.SessionTimeout/3 {
		errs = append(errs, fmt.Errorf("link %s: checkpoint_interval (%s) must be positive and at most a third of session_timeout (%s), so that a checkpoint renews the lease in time",
			l.Name, l.CheckpointInterval, l.SessionTimeout))
	}
	if l.MaxBufferedBytes <= 0 {
		errs = append(errs, fmt.Errorf("link %s: max_buffered_bytes must be positive", l.Name))
	}
	if l.StateTopic == "" {
		errs = append(errs, fmt.Errorf("link %s: state_topic is empty", l.Name))
	}
	return errors.Join(errs...)
}

// Deps are the link's collaborators.
type Deps struct {
	Logger          hclog.Logger
	Metrics         *Metrics          // nil: an unregistered set
	FetcherMetrics  *fetcher.Metrics  // nil: an unregistered set
	AppenderMetrics *appender.Metrics // nil: an unregistered set
	// SourceOpts and DestinationOpts are the kgo options that reach each
	// cluster (seed brokers, TLS, SASL); see internal/dial.
	SourceOpts, DestinationOpts []kgo.Opt
	Now                         func() time.Time
	Rand                        func() int64 // collision salts
}

// Link runs one link until its context ends. Its lifecycle goroutine (Run)
// owns all of its state; Pause, Resume and Status talk to it.
type Link struct {
	cfg  Config
	deps Deps
	log  hclog.Logger
	met  *linkMetrics

	ctl chan control // operator commands to the Run goroutine

	mu     sync.Mutex // guards status
	status Status

	// crash, set by tests, makes the next stop abrupt: no drain, no
	// final checkpoint, as if the process died.
	crash func() bool
	// prepared counts PREPARING → MIRRORING transitions (tests: each one
	// leaves a barrier per partition).
	prepared atomic.Int64
}

type control uint8

const (
	ctlPause control = iota + 1
	ctlResume
)

// New builds a link. It does no I/O and starts no goroutine.
func New(cfg Config, deps Deps) (*Link, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Rand == nil {
		deps.Rand = rand.Int64
	}
	l := &Link{
		cfg:  cfg,
		deps: deps,
		log:  deps.Logger.Named("link").With("link", cfg.Link.Name),
		met:  deps.Metrics.forLink(cfg.Link.Name),
		ctl:  make(chan control, 4),
	}
	l.status = Status{Name: cfg.Link.Name, State: Stopped, Source: cfg.Source.Name, Destination: cfg.Destination.Name}
	return l, nil
}

// Name is the link's name.
func (l *Link) Name() string { return l.cfg.Link.Name }

// Pause asks the link to stop mirroring after a final checkpoint; it keeps
// its place until Resume. Pausing a paused link does nothing.
func (l *Link) Pause() { l.send(ctlPause) }

// Resume asks a paused link to prepare and mirror again.
func (l *Link) Resume() { l.send(ctlResume) }

func (l *Link) send(c control) {
	select {
	case l.ctl <- c:
	default: // a burst of commands: the latest ones are already queued
	}
}

// Run drives the lifecycle until ctx ends, then stops the link (drain, final
// checkpoint) and returns nil. It returns an error only for a broken
// internal invariant.
func (l *Link) Run(ctx context.Context) error {
	state := Stopped
	move := func(e Event, cause error) error {
		next, err := Next(state, e)
		if err != nil {
			return err
		}
		if next != state {
			l.log.Info("link state", "from", state, "to", next, "event", e)
		}
		state = next
		l.met.setState(state)
		l.setStatus(func(s *Status) {
			s.State = state
			s.Since = l.deps.Now()
			if cause != nil {
				s.LastError = cause.Error()
				s.LastErrorAt = l.deps.Now()
			}
			if state != Mirroring && state != Preparing {
				s.Partitions = nil
			}
		})
		return nil
	}
	if err := move(EvStart, nil); err != nil {
		return err
	}

	var (
		attempts int  // consecutive failures, for the backoff
		fenced   bool // the last session was fenced: stand by before taking over
		r        *run
	)
	defer func() {
		if r != nil {
			r.close()
		}
		_ = move(EvStop, nil)
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		switch state {
		case Preparing:
			var err error
			r, err = l.prepare(ctx, fenced)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errPaused):
				r = nil
				if err := move(EvPause, nil); err != nil {
					return err
				}
			case err != nil:
				r = nil
				fenced = errors.Is(err, statestore.ErrFenced)
				l.fail(err)
				if err := move(EvFail, err); err != nil {
					return err
				}
			default:
				fenced = false
				l.prepared.Add(1)
				if err := move(EvPrepared, nil); err != nil {
					return err
				}
			}
		case Mirroring:
			since := time.Now()
			ev, err := r.mirror(ctx)
			r.close()
			r = nil
			if ctx.Err() != nil {
				return nil
			}
			switch ev {
			case EvFail:
				fenced = errors.Is(err, statestore.ErrFenced)
				l.fail(err)
				// A link that mirrored for longer than the longest
				// backoff has recovered: its next failure starts
				// the backoff afresh. One that fails again soon
				// keeps doubling it.
				if time.Since(since) > l.cfg.BackoffMax {
					attempts = 0
				}
			case EvReprepare:
				l.log.Info("new partitions need reconciling; preparing again")
				attempts = 0
			default:
				attempts = 0
			}
			if err := move(ev, err); err != nil {
				return err
			}
		case Paused:
			if !l.waitResume(ctx) {
				return nil
			}
			attempts = 0
			if err := move(EvResume, nil); err != nil {
				return err
			}
		case Failed:
			attempts++
			wait := Backoff(attempts, l.cfg.BackoffBase, l.cfg.BackoffMax)
			l.log.Info("retrying after backoff", "wait", wait, "attempt", attempts)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case c := <-l.ctl:
				t.Stop()
				if c == ctlPause {
					if err := move(EvPause, nil); err != nil {
						return err
					}
				}
				// A resume while failed retries at once.
				if c == ctlResume {
					if err := move(EvRetry, nil); err != nil {
						return err
					}
				}
			case <-t.C:
				if err := move(EvRetry, nil); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("link %s: lifecycle reached state %s", l.Name(), state)
		}
	}
}

// fail logs an error that failed the link and counts it.
func (l *Link) fail(err error) {
	kind := errorKind(err)
	l.met.error(kind)
	if errors.Is(err, statestore.ErrFenced) {
		l.met.fenced.Inc()
		l.log.Warn("link session fenced: another mirrord runs this link; standing by until its lease lapses", "error", err)
		return
	}
	l.log.Error("link failed", "kind", kind, "error", err)
}

// waitResume blocks in PAUSED until a resume (true) or ctx ends (false).
func (l *Link) waitResume(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case c := <-l.ctl:
			if c == ctlResume {
				return true
			}
		}
	}
}

// errPaused ends a PREPARING that an operator paused.
var errPaused = errors.New("link paused")

// errorKind labels an error for mirrord_errors_total.
func errorKind(err error) string {
	switch {
	case errors.Is(err, statestore.ErrFenced):
		return "fenced"
	case errors.Is(err, appender.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(err, fetcher.ErrOffsetOutOfRange):
		return "offset_out_of_range"
	case errors.Is(err, transform.ErrCorrupt), errors.Is(err, fetcher.ErrCorrupt), errors.Is(err, appender.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, appender.ErrTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}
