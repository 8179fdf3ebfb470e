package link

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// The pipeline's inputs (In*) and actions (Do*). The driver turns what the
// fetcher, the appender, the committer and the workers report into inputs,
// and carries out the actions; the pipeline does no I/O (DESIGN §12).

// Input is an event the pipeline takes.
type Input interface{ input() }

// Pair is one mirrored partition: a source partition and the destination
// partition with the same number in the renamed topic.
type Pair = tp.Pair

// Placement is what the state topic and the clusters say about a partition
// that joins the session: its latest checkpoint, if any, where start_from
// puts it at the source, where the destination log starts and ends, and its
// collision salts. The pipeline decides from it where the partition resumes
// (Pipeline.join).
type Placement struct {
	Pair
	// Checkpoint is the partition's latest checkpoint in the state topic,
	// or nil; CheckpointOf names the session of the link that wrote it
	// (this session's, or, when the partition moved between the link's
	// sessions, the one that mirrored it last: Link.checkpoint).
	Checkpoint   *statestore.CheckpointValue
	CheckpointOf string
	// StartOffset is the source offset start_from gives (the log start
	// for earliest, the last stable offset for latest).
	StartOffset int64
	// DstStart and DstEnd are the destination's log start and end offsets
	// (the end as ListOffsets reports it: the high watermark).
	DstStart, DstEnd int64
	// Salts are the partition's collision salts from the state topic.
	Salts []Salt
	// Compacted: the source topic or the destination topic is compacted
	// (or the source's settings could not be read), so a session joins
	// none of its batches (coalesce.go), and reconciliation looks for no
	// runs in its destination; MaxMessageBytes is the destination topic's
	// max.message.bytes, which a joined batch must not exceed (0: not
	// looked up). Both are looked up only where coalescing is on.
	Compacted       bool
	MaxMessageBytes int64
}

// Salt is one replayed collision salt of a destination partition.
type Salt = barrier.Salt

// InAdd adds partitions to the session. Initial marks the partitions
// PREPARING found: the pipeline commits their barriers in one state
// transaction once every one of them is reconciled, and only then reports
// DoEnterMirroring.
type InAdd struct {
	Parts   []Placement
	Initial bool
}

// InFetched is a fetcher result.
type InFetched struct{ Result fetcher.Result }

// InTailRead is a chunk of a destination partition's tail read for
// reconciliation (DoReadTail): its batches in order from the offset asked
// for, none when the tail is exhausted up to the end asked for.
type InTailRead struct {
	Dst     tp.Key
	Batches [][]byte
	Err     error
}

// InSourceEnd is the last stable offset of a source partition (DoLookupSourceEnd).
type InSourceEnd struct {
	Src tp.Key
	LSO int64
	Err error
}

// InAppended is an appender result.
type InAppended struct{ Result appender.Result }

// InSettled is the outcome of settling an append of unknown outcome
// (DoSettle): Offset is where the batch was found at the destination, or -1
// if it is not there.
type InSettled struct {
	Dst    tp.Key
	Tag    uint64
	Offset int64
	Err    error
}

// InCommitted is the outcome of a state transaction (DoCommit).
type InCommitted struct {
	ID  uint64
	Err error
}

// InDiscovered is a topic listing (DoDiscover): every selected source
// partition and its destination, and the source partitions the source
// confirmed are gone (their topic is deleted, or was recreated under a new
// ID). A partition merely missing from a listing is not gone (I6).
type InDiscovered struct {
	Pairs []Pair
	Gone  []tp.Key // source partitions
	// Created are the state records of the destination topics the
	// discovery created (also when it failed afterwards): they go with
	// the next state transaction.
	Created []statestore.Record
	Err     error
}

// InPlaced answers DoPlace.
type InPlaced struct {
	Parts []Placement
	Err   error
	// Later: partitions of topics the session created were not served by
	// the destination yet and are not in Parts; the driver asks for
	// another discovery (session.placeLater).
	Later bool
}

// InJoined is the batch a DoJoin asked for, or why it could not be made
// (transform.Reencoder.Join).
type InJoined struct {
	Dst tp.Key
	Tag uint64
	Out []byte
	Err error
}

// InCheckpointDue says checkpoint_interval elapsed.
type InCheckpointDue struct{}

// InDiscoveryDue says discovery_interval elapsed.
type InDiscoveryDue struct{}

// InTick lets the pipeline look at waits measured in time (a reconciling
// partition whose source shows nothing more). The driver sends it every
// second or so.
type InTick struct{}

// InStop asks the session to stop: State is STOPPED or PAUSED. Nothing new
// is submitted; appends in flight and being settled, and a commit in
// flight, are waited for; then the final checkpoint commits (DoCommit with
// Final set) and DoFinish follows.
type InStop struct{ State State }

// InDrainTimeout says the drain after InStop took too long: the final
// commit goes out with whatever is unresolved counted.
type InDrainTimeout struct{}

func (InAdd) input()           {}
func (InFetched) input()       {}
func (InTailRead) input()      {}
func (InSourceEnd) input()     {}
func (InAppended) input()      {}
func (InSettled) input()       {}
func (InCommitted) input()     {}
func (InDiscovered) input()    {}
func (InPlaced) input()        {}
func (InJoined) input()        {}
func (InCheckpointDue) input() {}
func (InDiscoveryDue) input()  {}
func (InTick) input()          {}
func (InStop) input()          {}
func (InDrainTimeout) input()  {}

// Action is an output of the pipeline, carried out by the driver.
type Action interface{ action() }

// DoAssign (re)starts fetching a source partition at Offset under
// generation Gen.
type DoAssign struct {
	Src    tp.Partition
	Offset int64
	Gen    uint64
	// Reconciling: the partition reconciles: offsets below the source's
	// log start are passed and reported, not judged
	// (fetcher.AssignReconciling).
	Reconciling bool
}

// DoUnassign stops fetching a source partition.
type DoUnassign struct{ Src tp.Partition }

// DoJoin asks for Batches, a run of one producer's batches of Dst's source
// (coalesce.go), joined into one batch with Header
// (transform.Reencoder.Join into a new buffer), answered with an InJoined
// of the same Tag. The batches are the pipeline's and must only be read.
type DoJoin struct {
	Dst     tp.Partition
	Tag     uint64
	Batches [][]byte
	Header  transform.MergeHeader
}

// DoRelease gives a fetch result's pin back to the fetcher.
type DoRelease struct{ Pin fetcher.Pin }

// DoSubmit hands a batch to the appender. The pipeline submits at most
// one batch per destination partition until its result (I2).
type DoSubmit struct{ Request appender.Request }

// DoSettle finds out whether an append of unknown outcome landed: after
// Delay, read the destination partition from From to its end and look for
// Want's twin; answer InSettled.
type DoSettle struct {
	Dst   tp.Partition
	From  int64
	Want  []byte
	Tag   uint64
	Delay time.Duration
	// SentTo is the leader the append went to. After EarlyAfter (at most
	// Delay), the settle need not wait out the rest of Delay once another
	// broker leads the partition under a newer epoch (leaderMoved).
	SentTo     *leaders.Leader // nil: not known
	EarlyAfter time.Duration
}

// DoReadTail reads the next chunk of a destination partition's tail from
// From, up to End (exclusive); answer InTailRead.
type DoReadTail struct {
	Dst       tp.Partition
	From, End int64
}

// DoLookupSourceEnd looks up a source partition's last stable offset; answer
// InSourceEnd.
type DoLookupSourceEnd struct{ Src tp.Partition }

// DoCommit runs one state transaction; answer InCommitted with its ID.
// Final marks the session's last commit: it goes out with CommitStop and
// State (STOPPED or PAUSED) and Unresolved counted, after which the session
// appends nothing. Otherwise State is PREPARING or MIRRORING.
type DoCommit struct {
	ID         uint64
	State      State
	Final      bool
	Unresolved int
	Records    []statestore.Record
}

// DoDiscover lists the source topics the link selects (creating or growing
// their destination topics), and asks the source directly about each of
// Known that the listing leaves out; answer InDiscovered.
type DoDiscover struct{ Known []tp.Partition }

// DoPlace looks up where new partitions start; answer InPlaced.
type DoPlace struct{ Pairs []Pair }

// DoEnterMirroring says every initial partition is reconciled and its
// barrier is committed: the link is MIRRORING.
type DoEnterMirroring struct{}

// DoFail says the session cannot go on: the link fails with Err.
type DoFail struct{ Err error }

// DoFinish says the stop asked for with InStop is done (the final commit
// succeeded, failed or could not be sent; Clean says whether it recorded a
// clean stop).
type DoFinish struct {
	State State
	Clean bool
}

// DoLog is a log line for the link's logger.
type DoLog struct {
	Level hclog.Level
	Msg   string
	Args  []any
}

func (DoAssign) action()          {}
func (DoUnassign) action()        {}
func (DoRelease) action()         {}
func (DoJoin) action()            {}
func (DoSubmit) action()          {}
func (DoSettle) action()          {}
func (DoReadTail) action()        {}
func (DoLookupSourceEnd) action() {}
func (DoCommit) action()          {}
func (DoDiscover) action()        {}
func (DoPlace) action()           {}
func (DoEnterMirroring) action()  {}
func (DoFail) action()            {}
func (DoFinish) action()          {}
func (DoLog) action()             {}
