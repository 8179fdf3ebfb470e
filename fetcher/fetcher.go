package fetcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/mailbox"
	"github.com/seed83556561/mirrord/transform"
)

// Defaults and limits of Config.
const (
	DefaultPartitionMaxBytes = int32(1 << 20)
	DefaultMaxWait           = 500 * time.Millisecond
	DefaultMaxBufferedBytes  = int64(64 << 20)

	// MaxPartitionMaxBytes caps the per-partition fetch size that the
	// fetcher doubles when a response holds no complete batch for a
	// partition (the cap is also at most MaxBufferedBytes).
	MaxPartitionMaxBytes = int32(64 << 20)
	// MaxMaxWait is the longest accepted MaxWait.
	MaxMaxWait = time.Minute
)

// OutOfRange is what the fetcher does with a partition whose fetch offset is
// below the log start offset (the link's on_offset_out_of_range).
type OutOfRange string

// Values of Config.OnOutOfRange.
const (
	OutOfRangeFail     OutOfRange = "fail"
	OutOfRangeEarliest OutOfRange = "earliest"
)

// Config is one link's fetcher configuration. Zero values take the defaults.
type Config struct {
	Link              string        // for metric labels and logs
	PartitionMaxBytes int32         // per partition and request; default 1 MiB
	MaxWait           time.Duration // long poll when caught up; default 500ms
	MaxBufferedBytes  int64         // default 64 MiB: bytes of fetch responses pinned by Results not yet Released
	OnOutOfRange      OutOfRange    // OutOfRangeFail (default) or OutOfRangeEarliest
	CheckCRCs         bool          // validate every batch's CRC-32C (default false: destination brokers check)
}

// Deps are the fetcher's collaborators.
type Deps struct {
	Client  *kgo.Client    // source cluster
	Leaders *leaders.Cache // source cluster
	Logger  hclog.Logger   // nil: discard
	Metrics *Metrics       // nil: an unregistered set
	// Screen, when set, is called in the broker's fetch goroutine with
	// the headers of every committed data batch of a response before any
	// of its results is delivered (the link learns what it must know of
	// their producer IDs there, off its own goroutine). An error drops
	// the response's results: their partitions are fetched again after a
	// backoff, and the error is logged and counted as KindOther.
	Screen func(ctx context.Context, hs []transform.Header) error
}

// Batch is one committed data batch.
type Batch struct {
	// Raw is one v2 record batch, a sub-slice of the fetch response; the
	// consumer may rewrite it in place. Its capacity ends at its end.
	Raw []byte
	// Header is Raw's decoded header.
	Header transform.Header
}

// Pin stands for the memory of one fetch response. Every batch of a Result
// is a sub-slice of the response it came in, so the whole response (the
// batches of every partition in it, and the aborted, control and trimmed
// bytes between them) stays allocated while any of its results is held.
// The fetcher charges the whole response to MaxBufferedBytes until the last
// result that pins it is released (DESIGN §12 I7). The zero Pin pins
// nothing.
type Pin struct{ p *pinned }

type pinned struct {
	bytes int64 // the response's record bytes, all partitions
	refs  int   // results holding it, not yet released
}

// NewPin returns a pin of a response of the given size, for consumers'
// tests that feed results of their own; the fetcher makes its own pins.
func NewPin(bytes int64) Pin { return Pin{&pinned{bytes: bytes, refs: 1}} }

// Bytes is the size of the response the pin holds (0 for the zero Pin).
func (p Pin) Bytes() int64 {
	if p.p == nil {
		return 0
	}
	return p.p.bytes
}

// Result is what one fetch brought for one partition.
type Result struct {
	Partition tp.Partition // with the topic ID the source reports
	// Gen is the assignment generation the caller gave Assign; a consumer
	// ignores the results of other generations (and still releases their
	// Pin).
	Gen uint64
	// Batches are the committed data batches in offset order; control
	// batches and aborted batches are removed. The first batch may begin
	// before Start when Start is not a batch boundary (an Assign offset or
	// a log start offset inside a batch): the fetcher never splits a
	// batch. Batches may hold a batch without records (compaction keeps
	// one to preserve producer state).
	Batches []Batch
	// Start is the fetch offset the result starts at.
	Start int64
	// End is the offset after the last batch examined: the next fetch
	// offset. End >= Start; End > Start when anything was consumed,
	// including only control or aborted batches, or records skipped.
	End int64
	// HighWatermark, LastStableOffset and LogStartOffset are as the leader
	// reported them with this fetch.
	HighWatermark, LastStableOffset, LogStartOffset int64
	// AbortedBatches is the number of batches dropped as aborted.
	AbortedBatches int
	// SkippedRecords is the number of records skipped under
	// OnOutOfRange = "earliest" (records lost at the source), else 0.
	// With Unjudged, the offsets passed below the log start of a
	// partition assigned with AssignReconciling, which the fetcher neither
	// counted nor logged as lost.
	SkippedRecords int64
	Unjudged       bool
	// Bytes is the size of Batches (for metrics; the budget counts
	// Pin).
	Bytes int
	// Pin holds the response the batches are part of; the consumer calls
	// Release(Pin) once it is done with the batches, for every result it
	// receives. A result without batches has the zero Pin.
	Pin Pin
	// Err non-nil means the partition FAILED: it is no longer fetched
	// until it is assigned again. Start and End are then the offset it
	// failed at.
	Err error
}

// Errors of failed partitions (Result.Err). Each error names the topic,
// partition and offset and says what to do.
var (
	// ErrOffsetOutOfRange: the fetch offset is below the log start offset
	// (under OnOutOfRange = "fail") or above the high watermark (always).
	ErrOffsetOutOfRange = errors.New("fetch offset out of range")
	// ErrCorrupt: a batch failed its checks twice at the same offset (the
	// error also satisfies errors.Is(err, transform.ErrCorrupt)).
	ErrCorrupt = errors.New("corrupt record batch from the source")
	// ErrTopicRecreated: the source reports another topic ID than the
	// assigned one; the topic was deleted and created again.
	ErrTopicRecreated = errors.New("source topic was recreated")
	// ErrRefused: the source broker answered with a non-retriable error
	// (e.g. TOPIC_AUTHORIZATION_FAILED), which the error wraps.
	ErrRefused = errors.New("source broker refused the fetch")
	// ErrUnsupportedFormat: the source holds a legacy message set (magic 0
	// or 1); the error also satisfies errors.Is(err,
	// transform.ErrUnsupportedMagic).
	ErrUnsupportedFormat = errors.New("unsupported message format at the source")
)

// ErrRunning is returned by a second call of Run.
var ErrRunning = errors.New("fetcher is already running or has run")

// Fetcher is one link's reader of the source cluster. See the package doc.
type Fetcher struct {
	cfg     Config
	cl      *kgo.Client
	adm     *kadm.Client
	leaders *leaders.Cache
	log     hclog.Logger
	m       linkMetrics
	screen  func(ctx context.Context, hs []transform.Header) error

	results chan Result
	// cmds carries Assign, Unassign and Release to the coordinator. It
	// holds at most one assignment per Assign call not yet applied and
	// one release per delivered result, so it is bounded by the
	// partitions and results in play.
	cmds *mailbox.Box[command]
	ran  atomic.Bool

	// Fields for tests; set by New.
	collect    func()        // a full garbage collection (runtime.GC)
	gcCycles   func() uint64 // collections completed (runtime/metrics)
	now        func() time.Time
	backoffMin time.Duration
	backoffMax time.Duration
}

type cmdKind int

const (
	cmdAssign cmdKind = iota
	cmdUnassign
	cmdRelease
)

type command struct {
	kind        cmdKind
	p           tp.Partition
	offset      int64
	gen         uint64
	pin         Pin
	reconciling bool
}

// New returns a fetcher with cfg's defaults filled in. It does no I/O and
// starts no goroutines; Run does the work.
func New(cfg Config, deps Deps) (*Fetcher, error) {
	errs := []error{cfg.validate()}
	if deps.Client == nil {
		errs = append(errs, errors.New("fetcher: Deps.Client is nil"))
	}
	if deps.Leaders == nil {
		errs = append(errs, errors.New("fetcher: Deps.Leaders is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	return &Fetcher{
		cfg:        cfg,
		cl:         deps.Client,
		adm:        kadm.NewClient(deps.Client),
		leaders:    deps.Leaders,
		log:        deps.Logger.Named("fetcher").With("link", cfg.Link),
		m:          deps.Metrics.forLink(cfg.Link),
		screen:     deps.Screen,
		results:    make(chan Result),
		cmds:       mailbox.New[command](),
		collect:    runtime.GC,
		gcCycles:   gcCycles,
		now:        time.Now,
		backoffMin: 100 * time.Millisecond,
		backoffMax: MaxRetryBackoff,
	}, nil
}

// gcCycles returns the number of garbage collections the process completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// validate fills in defaults and returns every problem at once.
func (c *Config) validate() error {
	if c.PartitionMaxBytes == 0 {
		c.PartitionMaxBytes = DefaultPartitionMaxBytes
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.OnOutOfRange == "" {
		c.OnOutOfRange = OutOfRangeFail
	}
	var errs []error
	if c.PartitionMaxBytes < 0 || c.PartitionMaxBytes > MaxPartitionMaxBytes {
		errs = append(errs, fmt.Errorf("fetcher: PartitionMaxBytes is %d, want 1 to %d (0: %d)",
			c.PartitionMaxBytes, MaxPartitionMaxBytes, DefaultPartitionMaxBytes))
	}
	if c.MaxWait < 0 || c.MaxWait > MaxMaxWait || (c.MaxWait > 0 && c.MaxWait < time.Millisecond) {
		errs = append(errs, fmt.Errorf("fetcher: MaxWait is %s, want 1ms to %s (0: %s)", c.MaxWait, MaxMaxWait, DefaultMaxWait))
	}
	if c.MaxBufferedBytes < 0 || c.MaxBufferedBytes > math.MaxInt64/4 {
		errs = append(errs, fmt.Errorf("fetcher: MaxBufferedBytes is %d, want a positive number of bytes (0: %d)",
			c.MaxBufferedBytes, DefaultMaxBufferedBytes))
	} else if c.PartitionMaxBytes > 0 && c.MaxBufferedBytes < int64(c.PartitionMaxBytes) {
		errs = append(errs, fmt.Errorf("fetcher: MaxBufferedBytes (%d) is less than PartitionMaxBytes (%d); one partition's fetch must fit the buffer",
			c.MaxBufferedBytes, c.PartitionMaxBytes))
	}
	if c.OnOutOfRange != OutOfRangeFail && c.OnOutOfRange != OutOfRangeEarliest {
		errs = append(errs, fmt.Errorf("fetcher: OnOutOfRange is %q, want %q or %q", c.OnOutOfRange, OutOfRangeFail, OutOfRangeEarliest))
	}
	return errors.Join(errs...)
}

// Assign starts fetching p at offset, or restarts it there if it is
// assigned already (also after it failed), under the caller's generation
// gen: results of earlier generations that the fetcher still holds are
// dropped (their pins released), and the consumer ignores any it already
// received (Result.Gen). The caller gives each assignment of a partition a
// generation it never gave that partition before. p.ID may be zero, in
// which case the fetcher takes the ID the source reports; a non-zero ID
// that the source contradicts fails the partition (ErrTopicRecreated). Safe
// from any goroutine; it does not wait for Run.
func (f *Fetcher) Assign(p tp.Partition, offset int64, gen uint64) {
	f.cmds.Put(command{kind: cmdAssign, p: p, offset: offset, gen: gen})
}

// AssignReconciling is Assign for a partition whose destination tail is
// being reconciled: an offset below the source's log start is not lost
// for sure (the link may have mirrored those records before the source
// deleted them), so whatever OnOutOfRange says the fetcher moves to the
// log start and reports the records it passed (Result.SkippedRecords, with
// Result.Unjudged set), without counting or logging them as lost: the
// caller judges.
func (f *Fetcher) AssignReconciling(p tp.Partition, offset int64, gen uint64) {
	f.cmds.Put(command{kind: cmdAssign, p: p, offset: offset, gen: gen, reconciling: true})
}

// Unassign stops fetching p and drops the results of p that the fetcher
// still holds (their pins released). Safe from any goroutine.
func (f *Fetcher) Unassign(p tp.Partition) {
	f.cmds.Put(command{kind: cmdUnassign, p: p})
}

// Results returns the channel of results. It is unbuffered (the fetcher
// queues at most two undelivered results per partition) and closed when Run
// returns. Every result received must have its Pin Released.
func (f *Fetcher) Results() <-chan Result { return f.results }

// Release gives back one result's hold on its response; the response's
// bytes return to the buffer budget when its last result is released.
// Releasing the zero Pin does nothing. Safe from any goroutine.
func (f *Fetcher) Release(p Pin) {
	if p.p == nil {
		return
	}
	f.cmds.Put(command{kind: cmdRelease, pin: p})
}

// MaxRetryBackoff bounds the wait between two tries of a failing
// partition. A source broker that dies takes Kafka its broker session
// timeout (broker.session.timeout.ms, 9 s by default) and an election to
// replace as leader; with waits doubling to 10 s, the retries fell at
// 6.3 s, 12.7 s and 22.7 s, so a partition often waited ten seconds more
// than Kafka needed (the soak measured 27 s fetch-side stalls for a 4 s
// broker kill). At 2 s a retry comes at most 2 s after the new leader is
// known, at the cost of one request per partition every 2 s to a broker
// that is down. (kgo's own retries back off from 250 ms to 5 s.)
const MaxRetryBackoff = 2 * time.Second

// backoff returns the wait before retry number attempts (1, 2, ...).
func (f *Fetcher) backoff(attempts int) time.Duration {
	return backoff.Policy{First: f.backoffMin, Max: f.backoffMax}.Wait(attempts)
}
