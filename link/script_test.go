package link

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
	"github.com/seed83556561/mirrord/twin"
)

// TestScripts replays the scenario scripts under testdata/ against the
// pure pipeline, the way etcd raft replays its testdata: each directive of
// a script is an input (or a look at the pipeline) and the text under its
// ---- is everything the pipeline did in answer, compared exactly, so an
// action a script does not list fails it as much as one it lists and does
// not get. The format is described in testdata/README.md; after a change
// of behaviour, `go test ./link -run TestScripts -rewrite` writes the
// actual output back into the scripts, for review in the diff.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newScript(t)
			datadriven.RunTest(t, f, s.run)
			s.checkPinsAtEnd(f)
		})
	}
}

// handler runs one directive and returns its output.
type handler func(s *script, td *datadriven.TestData) string

// handlers has one handler per command a script may give.
var handlers = map[string]handler{
	// Setup and time.
	"config": (*script).config,
	"at":     (*script).at,
	"def":    (*script).def,
	// Inputs: the output is every action of the step.
	"add":           (*script).add,
	"placed":        (*script).placed,
	"fetch":         (*script).fetch,
	"appended":      (*script).appended,
	"settled":       (*script).settled,
	"joined":        (*script).joined,
	"committed":     (*script).committed,
	"tailread":      (*script).tailRead,
	"sourceend":     (*script).sourceEnd,
	"discovered":    (*script).discovered,
	"checkpointdue": (*script).checkpointDue,
	"discoverydue":  (*script).discoveryDue,
	"tick":          (*script).tick,
	"stop":          (*script).stop,
	"draintimeout":  (*script).drainTimeout,
	// Looks at the pipeline.
	"state": (*script).state,
	"stats": (*script).stats,
	"pins":  (*script).pinsHeld,
}

// script is the state of one script's run.
type script struct {
	t      *testing.T
	td     *datadriven.TestData // the directive being run
	pl     *Pipeline
	base   time.Time
	now    time.Time
	src    twin.Source
	cfg    PipelineConfig
	batch  map[string][]byte // named source batches, as the source holds them
	seq    map[int64]int32   // next base sequence per PID, for batches that do not say
	pins   []fetcher.Pin     // every pin given, by number
	freed  map[fetcher.Pin]int
	held   []int // pins the last pins directive found held; nil: none
	saltsN int64
	tags   map[tp.Key]uint64 // the last submit tag per destination partition
	sent   map[uint64][]byte // the batch submitted under each tag
	joins  map[uint64]DoJoin // the joins asked for, by tag
	commit uint64            // the last commit ID
	ids    map[[16]byte]string
}

func newScript(t *testing.T) *script {
	s := &script{
		t:     t,
		base:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		batch: map[string][]byte{},
		seq:   map[int64]int32{},
		freed: map[fetcher.Pin]int{},
		tags:  map[tp.Key]uint64{},
		sent:  map[uint64][]byte{},
		joins: map[uint64]DoJoin{},
		ids:   map[[16]byte]string{},
	}
	s.now = s.base
	region, _ := transform.RegionOf(kafkatest.SourceClusterID)
	s.src = twin.Source{Cluster: kafkatest.SourceClusterID, Region: region}
	s.cfg = PipelineConfig{Link: "l", SourceCluster: s.src.Cluster, Region: region, SettleDelay: 30 * time.Second,
		Rand: func() int64 { s.saltsN++; return s.saltsN * 1000 }}
	return s
}

// run dispatches one directive to its command's handler.
func (s *script) run(t *testing.T, td *datadriven.TestData) string {
	s.t, s.td = t, td
	h, ok := handlers[td.Cmd]
	if !ok {
		s.fatalf("unknown command %q", td.Cmd)
	}
	if td.Input != "" {
		s.fatalf("%s takes no input lines before ----", td.Cmd)
	}
	return h(s, td)
}

func (s *script) fatalf(format string, args ...any) {
	s.t.Helper()
	if s.td != nil {
		s.td.Fatalf(s.t, format, args...)
	}
	s.t.Fatalf(format, args...)
}

func (s *script) pipeline() *Pipeline {
	if s.pl == nil {
		s.pl = NewPipeline(s.cfg)
	}
	return s.pl
}

// step feeds one input and returns its actions, one per line.
func (s *script) step(in Input) string {
	acts := s.pipeline().Step(s.now, in)
	s.track(acts)
	return s.render(acts)
}

// track keeps what later inputs refer to (tags, the last commit) and checks
// what holds of every step: a pin is released once, and only a pin the
// script gave (I7); a settle looks for the very batch submitted under its
// tag.
func (s *script) track(acts []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case DoRelease:
			if s.pinNumber(a.Pin) == 0 {
				s.fatalf("released a pin the script never gave (I7)")
			}
			s.freed[a.Pin]++
			if s.freed[a.Pin] > 1 {
				s.fatalf("pin#%d released twice (I7)", s.pinNumber(a.Pin))
			}
		case DoSubmit:
			s.tags[a.Request.Partition.Key()] = a.Request.Tag
			s.sent[a.Request.Tag] = a.Request.Batch
		case DoJoin:
			s.tags[a.Dst.Key()] = a.Tag
			s.joins[a.Tag] = a
		case DoSettle:
			if !slices.Equal(a.Want, s.sent[a.Tag]) {
				s.fatalf("settle of tag %d looks for another batch than the one submitted under it", a.Tag)
			}
		case DoCommit:
			s.commit = a.ID
		}
	}
}

// ---- setup and time ----

// config settle_delay= produce_timeout= exhaust_grace= max_reconciling= expiry= coalesce=
func (s *script) config(td *datadriven.TestData) string {
	if s.pl != nil {
		s.fatalf("config after the pipeline started")
	}
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "settle_delay":
			s.cfg.SettleDelay = s.dur(a)
		case "produce_timeout":
			s.cfg.ProduceTimeout = s.dur(a)
		case "exhaust_grace":
			s.cfg.ExhaustGrace = s.dur(a)
		case "max_reconciling":
			s.cfg.MaxReconciling = int(s.int(a))
		case "expiry":
			s.cfg.ProducerStateExpiry = s.dur(a)
		case "on_offset_out_of_range":
			s.cfg.OnOutOfRange = fetcher.OutOfRange(s.str(a))
		case "coalesce":
			s.cfg.CoalesceBytes = s.int(a)
		default:
			s.fatalf("config: unknown key %q", a.Key)
		}
	}
	return "ok"
}

// at DURATION: the clock, from 2026-01-01T00:00:00Z.
func (s *script) at(td *datadriven.TestData) string {
	if len(td.CmdArgs) != 1 || len(td.CmdArgs[0].Vals) != 0 {
		s.fatalf("at: want one duration")
	}
	d, err := time.ParseDuration(td.CmdArgs[0].Key)
	if err != nil {
		s.fatalf("at: %v", err)
	}
	s.now = s.base.Add(d)
	return "ok"
}

// def NAME=SPEC ...: names source batches.
func (s *script) def(td *datadriven.TestData) string {
	if len(td.CmdArgs) == 0 {
		s.fatalf("def: want NAME=BASE:N[:opts]")
	}
	for _, a := range td.CmdArgs {
		s.batch[a.Key] = s.buildBatch(s.str(a))
	}
	return "ok"
}

// ---- inputs ----

// add [initial] PART opts [| PART opts ...]
func (s *script) add(td *datadriven.TestData) string {
	args := td.CmdArgs
	initial := len(args) > 0 && args[0].Key == "initial" && len(args[0].Vals) == 0
	if initial {
		args = args[1:]
	}
	return s.step(InAdd{Parts: s.placements(args), Initial: initial})
}

// placed PART opts [| PART opts ...] | placed err=MSG
func (s *script) placed(td *datadriven.TestData) string {
	if a, ok := td.Arg("err"); ok {
		if len(td.CmdArgs) != 1 {
			s.fatalf("placed: err= stands alone")
		}
		return s.step(InPlaced{Err: errors.New(s.str(a))})
	}
	return s.step(InPlaced{Parts: s.placements(td.CmdArgs)})
}

// fetch PART gen=N start=S [end=E] [hw=H] [lso=L] [skipped=N] [unjudged=N]
// [err=recreated|oor|refused] [b=NAME|SPEC ...]
func (s *script) fetch(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	r := fetcher.Result{Partition: pr.Src, HighWatermark: -1, LastStableOffset: -1}
	end := int64(-1)
	for _, a := range args {
		switch a.Key {
		case "gen":
			r.Gen = uint64(s.int(a))
		case "start":
			r.Start = s.int(a)
		case "end":
			end = s.int(a)
		case "hw":
			r.HighWatermark = s.int(a)
		case "lso":
			r.LastStableOffset = s.int(a)
		case "skipped":
			r.SkippedRecords = s.int(a)
		case "unjudged":
			r.SkippedRecords, r.Unjudged = s.int(a), true
		case "err":
			switch s.str(a) {
			case "recreated":
				r.Err = fmt.Errorf("%w: test", fetcher.ErrTopicRecreated)
			case "oor":
				r.Err = fmt.Errorf("%w: test", fetcher.ErrOffsetOutOfRange)
			case "refused":
				r.Err = fmt.Errorf("%w: test", fetcher.ErrRefused)
			default:
				s.fatalf("fetch: err=recreated|oor|refused")
			}
		case "b":
			raw := slices.Clone(s.sourceBatch(s.str(a)))
			h, err := transform.ParseHeader(raw)
			if err != nil {
				s.fatalf("batch %s: %v", s.str(a), err)
			}
			r.Batches = append(r.Batches, fetcher.Batch{Raw: raw, Header: h})
			r.Bytes += len(raw)
		default:
			s.fatalf("fetch: unknown key %q", a.Key)
		}
	}
	r.End = r.Start
	if n := len(r.Batches); n > 0 {
		r.End = r.Batches[n-1].Header.NextOffset()
	}
	if end >= 0 {
		r.End = end
	}
	if r.Err == nil && len(r.Batches) > 0 {
		r.Pin = fetcher.NewPin(int64(r.Bytes) + 100)
		s.pins = append(s.pins, r.Pin)
	}
	return s.step(InFetched{Result: r})
}

// appended PART [tag=N] base=B | err=unknown [answered] [sent=D] [timeout=D]
// | err=corrupt|stopped|lease|toolarge|fatal
func (s *script) appended(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	res := appender.Result{Partition: pr.Dst, Tag: s.tags[pr.Dst.Key()]}
	var kind string
	var answered bool
	var sent, timeout time.Duration
	for _, a := range args {
		switch a.Key {
		case "tag":
			res.Tag = uint64(s.int(a))
		case "base":
			res.BaseOffset = s.int(a)
		case "err":
			kind = s.str(a)
		case "answered":
			answered = true
		case "sent":
			sent = s.dur(a)
		case "timeout":
			timeout = s.dur(a)
		default:
			s.fatalf("appended: unknown key %q", a.Key)
		}
	}
	switch kind {
	case "":
	case "unknown":
		// answered: a broker answered with an error code that leaves the
		// append possible; otherwise no answer came, sent=DURATION ago
		// (default now) with the produce timeout timeout=.
		res.Err = fmt.Errorf("%w: test", appender.ErrUnknownOutcome)
		res.Answered = answered
		res.Sent = s.now.Add(-sent)
		res.ProduceTimeout = timeout
	case "corrupt":
		res.Err = fmt.Errorf("%w: test", appender.ErrCorrupt)
	case "stopped":
		res.Err = fmt.Errorf("%w: test", appender.ErrStopped)
	case "lease":
		res.Err = fmt.Errorf("%w: test", appender.ErrLeaseExpired)
	case "toolarge":
		res.Err = fmt.Errorf("%w: test", appender.ErrTooLarge)
	case "fatal":
		res.Err = fmt.Errorf("%w: test", appender.ErrFatal)
	default:
		s.fatalf("appended: err=unknown|corrupt|stopped|lease|toolarge|fatal")
	}
	return s.step(InAppended{Result: res})
}

// settled PART [tag=N] offset=O | missing | err=MSG
func (s *script) settled(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	in := InSettled{Dst: pr.Dst.Key(), Tag: s.tags[pr.Dst.Key()], Offset: -1}
	for _, a := range args {
		switch a.Key {
		case "tag":
			in.Tag = uint64(s.int(a))
		case "offset":
			in.Offset = s.int(a)
		case "missing":
		case "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("settled: unknown key %q", a.Key)
		}
	}
	return s.step(in)
}

// joined PART [tag=N] [err=MSG]: the answer to a DoJoin, by default the
// batches joined as the driver joins them (transform.Reencoder.Join).
func (s *script) joined(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	in := InJoined{Dst: pr.Dst.Key(), Tag: s.tags[pr.Dst.Key()]}
	for _, a := range args {
		switch a.Key {
		case "tag":
			in.Tag = uint64(s.int(a))
		case "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("joined: unknown key %q", a.Key)
		}
	}
	if in.Err == nil {
		j, ok := s.joins[in.Tag]
		if !ok {
			s.fatalf("joined: no join asked for under tag %d", in.Tag)
		}
		var err error
		if in.Out, err = transform.NewReencoder().Join(nil, j.Batches, j.Header); err != nil {
			in.Err = err
		}
	}
	return s.step(in)
}

// committed [#N] [err=MSG]; default: the last commit.
func (s *script) committed(td *datadriven.TestData) string {
	in := InCommitted{ID: s.commit}
	for _, a := range td.CmdArgs {
		switch {
		case strings.HasPrefix(a.Key, "#") && len(a.Vals) == 0:
			n, err := strconv.ParseUint(a.Key[1:], 10, 64)
			if err != nil {
				s.fatalf("committed: bad ID %q", a.Key)
			}
			in.ID = n
		case a.Key == "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("committed: unknown key %q", a.Key)
		}
	}
	return s.step(in)
}

// tailread PART [d=DSTBASE@SRC[~salt=N][~broker]] [d=DSTBASE@SRC+SRC...[~seq=S]] [f=DSTBASE:N] [empty] [err=MSG]
func (s *script) tailRead(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	in := InTailRead{Dst: pr.Dst.Key()}
	for _, a := range args {
		switch a.Key {
		case "d":
			in.Batches = append(in.Batches, s.twinOf(s.str(a)))
		case "f":
			at, n, _ := strings.Cut(s.str(a), ":")
			foreign := batchtest.Simple(0, -77, 0, 0, int(s.parseInt(n)))
			binary.BigEndian.PutUint64(foreign, uint64(s.parseInt(at)))
			in.Batches = append(in.Batches, foreign)
		case "empty":
		case "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("tailread: unknown key %q", a.Key)
		}
	}
	return s.step(in)
}

// sourceend PART lso=L [err=MSG]
func (s *script) sourceEnd(td *datadriven.TestData) string {
	pr, args := s.partArg(td.CmdArgs)
	in := InSourceEnd{Src: pr.Src.Key()}
	for _, a := range args {
		switch a.Key {
		case "lso":
			in.LSO = s.int(a)
		case "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("sourceend: unknown key %q", a.Key)
		}
	}
	return s.step(in)
}

// discovered [pairs=PART,PART] [gone=PART,PART] [err=MSG]
func (s *script) discovered(td *datadriven.TestData) string {
	in := InDiscovered{}
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "pairs":
			for p := range strings.SplitSeq(s.str(a), ",") {
				in.Pairs = append(in.Pairs, s.part(p))
			}
		case "gone":
			for p := range strings.SplitSeq(s.str(a), ",") {
				in.Gone = append(in.Gone, s.part(p).Src.Key())
			}
		case "err":
			in.Err = errors.New(s.str(a))
		default:
			s.fatalf("discovered: unknown key %q", a.Key)
		}
	}
	return s.step(in)
}

func (s *script) checkpointDue(td *datadriven.TestData) string {
	s.noArgs(td)
	return s.step(InCheckpointDue{})
}

func (s *script) discoveryDue(td *datadriven.TestData) string {
	s.noArgs(td)
	return s.step(InDiscoveryDue{})
}

func (s *script) tick(td *datadriven.TestData) string {
	s.noArgs(td)
	return s.step(InTick{})
}

// stop [paused]
func (s *script) stop(td *datadriven.TestData) string {
	st := Stopped
	for _, a := range td.CmdArgs {
		if a.Key != "paused" || len(a.Vals) != 0 {
			s.fatalf("stop: unknown key %q", a.Key)
		}
		st = Paused
	}
	return s.step(InStop{State: st})
}

func (s *script) drainTimeout(td *datadriven.TestData) string {
	s.noArgs(td)
	return s.step(InDrainTimeout{})
}

// ---- looks at the pipeline ----

// state [PART]: a partition's phase, positions, queue, generation and
// offset-translation window; every partition, one a line, without PART.
func (s *script) state(td *datadriven.TestData) string {
	pl := s.pipeline()
	if len(td.CmdArgs) == 0 {
		if len(pl.parts) == 0 {
			return "no partitions"
		}
		lines := make([]string, len(pl.parts))
		for i, p := range pl.parts {
			lines[i] = s.pairName(p.Pair) + " " + partitionState(p)
		}
		return strings.Join(lines, "\n")
	}
	pr, rest := s.partArg(td.CmdArgs)
	if len(rest) > 0 {
		s.fatalf("state: unknown key %q", rest[0].Key)
	}
	p := pl.byDst[pr.Dst.Key()]
	if p == nil {
		return "absent"
	}
	return partitionState(p)
}

func partitionState(p *partition) string {
	return fmt.Sprintf("phase=%s src=%d dst=%d ck=%d/%d pending=%d gen=%d window=%s",
		p.phase, p.srcNext, p.dstNext, p.ckSrc, p.ckDst, p.pending(), p.gen, windowString(p.win.list()))
}

// windowString writes spans as a script states them: FROM..END>DSTBASE,
// with BASE: before FROM when the batch began before it; "none" for none.
func windowString(spans []translate.Span) string {
	if len(spans) == 0 {
		return "none"
	}
	parts := make([]string, len(spans))
	for i, sp := range spans {
		if sp.Base != sp.From {
			parts[i] = fmt.Sprintf("%d:", sp.Base)
		}
		parts[i] += fmt.Sprintf("%d..%d>%d", sp.From, sp.End, sp.DstBase)
	}
	return strings.Join(parts, ",")
}

// stats: every counter that is not zero, by its name in the counter table,
// one a line (and discovery_failures, the failed topic discoveries).
func (s *script) stats(td *datadriven.TestData) string {
	s.noArgs(td)
	pl := s.pipeline()
	var lines []string
	for i, c := range CounterTable() {
		if n := pl.Count(Counter(i)); n != 0 {
			lines = append(lines, fmt.Sprintf("%s=%d", c.Name, n))
		}
	}
	if n := pl.DiscoveryFailures(); n != 0 {
		lines = append(lines, fmt.Sprintf("discovery_failures=%d", n))
	}
	if len(lines) == 0 {
		return "all zero"
	}
	return strings.Join(lines, "\n")
}

// pins: the pins given and not yet released. The script must end with the
// pins the last pins directive found held (none without one): every pin
// is released once its batches are done (I7).
func (s *script) pinsHeld(td *datadriven.TestData) string {
	s.noArgs(td)
	s.held = s.heldPins()
	return heldString(s.held)
}

func (s *script) heldPins() []int {
	var held []int
	for i, p := range s.pins {
		if s.freed[p] == 0 {
			held = append(held, i+1)
		}
	}
	return held
}

func heldString(held []int) string {
	out := fmt.Sprintf("held=%d", len(held))
	for _, n := range held {
		out += fmt.Sprintf(" pin#%d", n)
	}
	return out
}

func (s *script) checkPinsAtEnd(file string) {
	s.t.Helper()
	if got := s.heldPins(); !slices.Equal(got, s.held) {
		s.t.Fatalf("%s: at the end %s, the last pins directive found %s (I7: every pin released once its batches are done)",
			file, heldString(got), heldString(s.held))
	}
}

// ---- partitions and IDs ----

// part parses "t[0]" (the same topic name at both ends) or "s[0]>d[0]",
// with "@TOKEN" after the source to give it another topic ID.
func (s *script) part(spec string) Pair {
	srcSpec, dstSpec, renamed := strings.Cut(spec, ">")
	srcSpec, idTok, _ := strings.Cut(srcSpec, "@")
	src := s.tp(srcSpec)
	dst := src
	if renamed {
		dst = s.tp(dstSpec)
	}
	if idTok == "" {
		idTok = "src:" + src.Topic
	}
	src.ID = s.topicID(idTok)
	dst.ID = s.topicID("dst:" + dst.Topic)
	return Pair{Src: src, Dst: dst}
}

// partArg takes a directive's first argument as a partition.
func (s *script) partArg(args []datadriven.CmdArg) (Pair, []datadriven.CmdArg) {
	if len(args) == 0 || len(args[0].Vals) != 0 {
		s.fatalf("%s: want a partition first", s.td.Cmd)
	}
	return s.part(args[0].Key), args[1:]
}

var partRE = regexp.MustCompile(`^([A-Za-z0-9._-]+)\[(\d+)\]$`)

func (s *script) tp(spec string) tp.Partition {
	m := partRE.FindStringSubmatch(spec)
	if m == nil {
		s.fatalf("bad partition %q, want topic[n]", spec)
	}
	n, _ := strconv.Atoi(m[2])
	return tp.Partition{Topic: m[1], Partition: int32(n)}
}

// topicID is the topic ID a token names; the script remembers the token to
// name the ID in its output.
func (s *script) topicID(token string) [16]byte {
	id := topicID(token)
	s.ids[id] = token
	return id
}

func topicID(token string) [16]byte {
	sum := sha256.Sum256([]byte(token))
	var id [16]byte
	copy(id[:], sum[:])
	return id
}

// placements parses groups "PART opts" separated by "|".
func (s *script) placements(args []datadriven.CmdArg) []Placement {
	var out []Placement
	for len(args) > 0 {
		i := slices.IndexFunc(args, func(a datadriven.CmdArg) bool { return a.Key == "|" })
		if i < 0 {
			i = len(args)
		}
		if i > 0 {
			out = append(out, s.placement(args[:i]))
		}
		args = args[min(i+1, len(args)):]
	}
	return out
}

// placement parses "PART start= dststart= dstend= ck=S/D ckid=TOKEN|none
// ckprod=PID:EPOCH:SEQ salt=PID:VALUE".
func (s *script) placement(args []datadriven.CmdArg) Placement {
	pr, args := s.partArg(args)
	pc := Placement{Pair: pr}
	for _, a := range args {
		v := s.str(a)
		switch a.Key {
		case "start":
			pc.StartOffset = s.int(a)
		case "dststart":
			pc.DstStart = s.int(a)
		case "dstend":
			pc.DstEnd = s.int(a)
		case "ck":
			src, dst, _ := strings.Cut(v, "/")
			pc.Checkpoint = &statestore.CheckpointValue{SourceTopic: pc.Src.Topic, SourcePartition: pc.Src.Partition,
				SourceNextOffset: s.parseInt(src), DestNextOffset: s.parseInt(dst), SourceTopicID: statestore.UUID(pc.Src.ID)}
		case "ckid":
			if pc.Checkpoint == nil {
				s.fatalf("ckid before ck")
			}
			pc.Checkpoint.SourceTopicID = statestore.UUID(s.topicID(v))
			if v == "none" {
				pc.Checkpoint.SourceTopicID = statestore.UUID{} // a version 0 checkpoint
			}
		case "ckprod":
			if pc.Checkpoint == nil {
				s.fatalf("ckprod before ck")
			}
			f := strings.Split(v, ":")
			if len(f) != 3 {
				s.fatalf("ckprod=PID:EPOCH:LASTSEQ")
			}
			pid := s.parseInt(f[0])
			pc.Checkpoint.Producers = append(pc.Checkpoint.Producers, statestore.ProducerState{
				SourceClusterID: s.src.Cluster, OriginalPID: pid, MappedPID: transform.MapPID(pid, s.src.Region),
				Region: uint32(s.src.Region), Epoch: int16(s.parseInt(f[1])), LastSequence: int32(s.parseInt(f[2])), LastAppendMs: s.now.UnixMilli(),
			})
		case "salt":
			pid, salt, _ := strings.Cut(v, ":")
			pc.Salts = append(pc.Salts, Salt{Origin: transform.Origin{Cluster: s.src.Cluster, PID: s.parseInt(pid)}, Salt: s.parseInt(salt), At: s.now})
		default:
			s.fatalf("placement: unknown key %q", a.Key)
		}
	}
	return pc
}

// ---- batches ----

// buildBatch parses BASE:N[:opt,opt...] with options pid=P seq=S epoch=E
// gap=G (the last offset delta G beyond the last record: a compacted
// batch), lat (stamped LogAppendTime by the source broker), codec=C (0-4),
// txn. A batch without seq= continues its PID's sequence.
func (s *script) buildBatch(spec string) []byte {
	f := strings.SplitN(spec, ":", 3)
	if len(f) < 2 {
		s.fatalf("bad batch %q, want BASE:N[:opts]", spec)
	}
	sp := batchtest.Spec{BaseOffset: s.parseInt(f[0]), PID: 5, FirstTimestamp: 1_700_000_000_000}
	n := int(s.parseInt(f[1]))
	seq := int32(-2)
	gap := int32(0)
	if len(f) == 3 {
		for o := range strings.SplitSeq(f[2], ",") {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "pid":
				sp.PID = s.parseInt(v)
			case "seq":
				seq = int32(s.parseInt(v))
			case "epoch":
				sp.Epoch = int16(s.parseInt(v))
			case "gap":
				gap = int32(s.parseInt(v))
			case "lat":
				sp.LogAppendTime = 1_700_000_900_000
			case "codec":
				sp.Codec = int8(s.parseInt(v))
			case "txn":
				sp.Transactional = true
			default:
				s.fatalf("batch: unknown option %q", k)
			}
		}
	}
	if seq == -2 {
		seq = s.seq[sp.PID]
	}
	if sp.PID == -1 {
		seq = -1
	}
	sp.BaseSequence = seq
	if seq >= 0 {
		s.seq[sp.PID] = max(s.seq[sp.PID], seq+int32(n))
	}
	for i := range n {
		sp.Records = append(sp.Records, batchtest.Record{Key: fmt.Appendf(nil, "k%d", sp.BaseOffset+int64(i)), Value: []byte("v"), TimestampDelta: int64(i), OffsetDelta: -1})
	}
	if gap > 0 {
		// Compaction removed records: keep the first and last delta.
		for i := range sp.Records {
			if i > 0 {
				sp.Records[i].OffsetDelta = int32(i) + gap
			}
		}
		sp.LastOffsetDelta = int32(n-1) + gap
	}
	if n == 0 {
		sp.LastOffsetDelta = gap
	}
	return batchtest.Build(sp)
}

func (s *script) sourceBatch(spec string) []byte {
	if b, ok := s.batch[spec]; ok {
		return b
	}
	return s.buildBatch(spec)
}

// twinOf is what the destination holds for a source batch the pipeline
// appended at destination offset base: the forwarded batch (rewritten, or
// re-encoded when compacted), with options ~salt=N (the PID salted) and
// ~broker (rewritten the way a CreateTime topic's broker rewrites a
// LogAppendTime batch: timestamp type, max timestamp and CRC).
func (s *script) twinOf(spec string) []byte {
	at, rest, _ := strings.Cut(spec, "@")
	if names := strings.Split(rest, "+"); len(names) > 1 {
		return s.joinedTwin(at, names)
	}
	parts := strings.Split(rest, "~")
	src := slices.Clone(s.sourceBatch(parts[0]))
	h, _ := transform.ParseHeader(src)
	mapped := transform.MapPID(h.ProducerID, s.src.Region)
	broker := false
	for _, o := range parts[1:] {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "salt":
			mapped = transform.MapPIDSalted(h.ProducerID, s.src.Region, s.parseInt(v))
		case "broker":
			broker = true
		default:
			s.fatalf("twin: unknown option %q", k)
		}
	}
	if h.ProducerID < 0 {
		mapped = h.ProducerID
	}
	out := src
	if h.Dense() {
		transform.Rewrite(out, mapped)
	} else {
		var err error
		if out, _, err = transform.NewReencoder().Reencode(nil, src, mapped); err != nil {
			s.fatalf("twin of %s: %v", spec, err)
		}
	}
	if broker {
		out[transform.PosAttributes+1] &^= transform.AttrTimestampLogAppend
		binary.BigEndian.PutUint64(out[transform.PosMaxTimestamp:], uint64(1_700_000_000_000+int64(h.NumRecords)-1))
		crc := crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli))
		binary.BigEndian.PutUint32(out[17:], crc)
	}
	binary.BigEndian.PutUint64(out, uint64(s.parseInt(at)))
	return out
}

// joinedTwin is the batch a preserve session appended for a run of one
// producer's source batches (link/coalesce.go), at destination offset at:
// their records joined under the first one's mapped producer ID, epoch and
// base sequence (NAME+NAME~seq=S: base sequence S instead).
func (s *script) joinedTwin(at string, names []string) []byte {
	last, opt, _ := strings.Cut(names[len(names)-1], "~")
	names[len(names)-1] = last
	var bs [][]byte
	for _, n := range names {
		bs = append(bs, s.sourceBatch(n))
	}
	h, _ := transform.ParseHeader(bs[0])
	seq := h.BaseSequence
	if opt != "" {
		k, v, _ := strings.Cut(opt, "=")
		if k != "seq" {
			s.fatalf("joined twin: unknown option %q", k)
		}
		seq = int32(s.parseInt(v))
	}
	out, err := transform.NewReencoder().Join(nil, bs, transform.MergeHeader{
		ProducerID: transform.MapPID(h.ProducerID, s.src.Region), ProducerEpoch: h.ProducerEpoch, BaseSequence: seq})
	if err != nil {
		s.fatalf("joined twin of %v: %v", names, err)
	}
	binary.BigEndian.PutUint64(out, uint64(s.parseInt(at)))
	return out
}

// ---- output ----

// render writes a step's actions one a line, in the order the pipeline
// gave them; "(none)" when it gave none.
func (s *script) render(acts []Action) string {
	if len(acts) == 0 {
		return "(none)"
	}
	lines := make([]string, len(acts))
	for i, a := range acts {
		lines[i] = s.format(a)
	}
	return strings.Join(lines, "\n")
}

// format renders an action as the scripts name it (testdata/README.md).
func (s *script) format(a Action) string {
	switch a := a.(type) {
	case DoAssign:
		rec := ""
		if a.Reconciling {
			rec = " reconciling"
		}
		return fmt.Sprintf("assign %s@%d gen=%d%s%s", s.tpName(a.Src), a.Offset, a.Gen, rec, s.idSuffix(a.Src, "src:"))
	case DoUnassign:
		return "unassign " + s.tpName(a.Src) + s.idSuffix(a.Src, "src:")
	case DoRelease:
		return fmt.Sprintf("release pin#%d", s.pinNumber(a.Pin))
	case DoSubmit:
		r := a.Request
		return fmt.Sprintf("submit %s%s tag=%d %s", s.tpName(r.Partition), s.idSuffix(r.Partition, "dst:"), r.Tag, s.batchString(r.Batch))
	case DoJoin:
		records := 0
		for _, b := range a.Batches {
			h, _ := transform.ParseHeader(b)
			records += int(h.NumRecords)
		}
		return fmt.Sprintf("join %s%s tag=%d batches=%d n=%d seq=%d epoch=%d pid=%s", s.tpName(a.Dst), s.idSuffix(a.Dst, "dst:"), a.Tag,
			len(a.Batches), records, a.Header.BaseSequence, a.Header.ProducerEpoch, s.pidName(a.Header.ProducerID))
	case DoSettle:
		out := fmt.Sprintf("settle %s%s from=%d tag=%d delay=%s early=%s", s.tpName(a.Dst), s.idSuffix(a.Dst, "dst:"), a.From, a.Tag, a.Delay, a.EarlyAfter)
		if a.SentTo != nil {
			out += fmt.Sprintf(" sent_to=%d:%d", a.SentTo.Broker, a.SentTo.Epoch)
		}
		return out
	case DoReadTail:
		return fmt.Sprintf("readtail %s%s from=%d end=%d", s.tpName(a.Dst), s.idSuffix(a.Dst, "dst:"), a.From, a.End)
	case DoLookupSourceEnd:
		return "sourceend " + s.tpName(a.Src) + s.idSuffix(a.Src, "src:")
	case DoCommit:
		return s.commitString(a)
	case DoDiscover:
		ks := make([]string, len(a.Known))
		for i, p := range a.Known {
			ks[i] = s.srcName(p)
		}
		return "discover known=" + strings.Join(ks, ",")
	case DoPlace:
		ks := make([]string, len(a.Pairs))
		for i, p := range a.Pairs {
			ks[i] = s.pairName(p)
		}
		return "place " + strings.Join(ks, ",")
	case DoEnterMirroring:
		return "mirroring"
	case DoFail:
		return s.namedIDs("fail " + strconv.Quote(a.Err.Error()))
	case DoFinish:
		clean := "unclean"
		if a.Clean {
			clean = "clean"
		}
		return fmt.Sprintf("finish %s %s", clean, a.State)
	case DoLog:
		out := fmt.Sprintf("log %s %s", strings.ToUpper(a.Level.String()), strconv.Quote(a.Msg))
		for i := 0; i < len(a.Args); i += 2 {
			if i+1 == len(a.Args) {
				out += " EXTRA=" + logValue(a.Args[i])
				break
			}
			out += fmt.Sprintf(" %v=%s", a.Args[i], logValue(a.Args[i+1]))
		}
		return s.namedIDs(out)
	}
	return fmt.Sprintf("%T", a)
}

// namedIDs writes the topic IDs the script named, wherever line holds them
// as a UUID, as <TOKEN>: the token that names them.
func (s *script) namedIDs(line string) string {
	for id, tok := range s.ids {
		line = strings.ReplaceAll(line, statestore.UUID(id).String(), "<"+tok+">")
	}
	return line
}

// batchString describes a batch handed to the appender: its record count,
// last offset delta, base sequence, epoch, producer ID (by the source PID
// it maps), attributes, and whether its offsets are dense. (Its base
// offset is always 0: the destination broker assigns offsets.)
func (s *script) batchString(b []byte) string {
	h, err := transform.ParseHeader(b)
	if err != nil {
		return "unparsable"
	}
	out := fmt.Sprintf("n=%d lod=%d seq=%d epoch=%d pid=%s", h.NumRecords, h.LastOffsetDelta, h.BaseSequence, h.ProducerEpoch, s.pidName(h.ProducerID))
	if c := h.Compression(); c != 0 {
		out += fmt.Sprintf(" codec=%d", c)
	}
	if h.Transactional() {
		out += " txn"
	}
	if h.Attributes&transform.AttrTimestampLogAppend != 0 {
		out += " lat"
	}
	if h.Dense() {
		return out + " dense"
	}
	return out + " gappy"
}

// pidName names a mapped PID by the source PID it maps, with ~salt=N when a
// collision salt moved it; raw:PID for a PID that is not mapped.
func (s *script) pidName(mapped int64) string {
	r, low, ok := transform.DecodePID(mapped)
	if !ok {
		return fmt.Sprintf("raw:%d", mapped)
	}
	if r == s.src.Region {
		return strconv.Itoa(int(low))
	}
	return fmt.Sprintf("%d~salt=%d", low, int64(uint32(r-s.src.Region)))
}

// commitString renders a state transaction: its ID and state, then its
// records in order. Salt tombstones, which the pipeline gives in map order,
// are sorted among themselves.
func (s *script) commitString(a DoCommit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "commit #%d %s", a.ID, a.State)
	if a.Final {
		fmt.Fprintf(&b, " final unresolved=%d", a.Unresolved)
	}
	var tombs []string
	flush := func() {
		slices.Sort(tombs)
		for _, t := range tombs {
			b.WriteString(" " + t)
		}
		tombs = nil
	}
	for _, r := range a.Records {
		if k, ok := r.Key.(statestore.PIDCollisionKey); ok && r.Value == nil {
			tombs = append(tombs, fmt.Sprintf("tombstone=%s:%d", s.dstKeyName(k.TopicID, k.Partition), k.OriginalPID))
			continue
		}
		flush()
		switch k := r.Key.(type) {
		case statestore.PIDResetKey:
			fmt.Fprintf(&b, " barrier=%s", s.dstKeyName(k.TopicID, k.Partition))
		case statestore.CheckpointKey:
			v := r.Value.(statestore.CheckpointValue)
			dst := s.dstKeyName(k.TopicID, k.Partition)
			fmt.Fprintf(&b, " ck=%s:%d/%d", s.ckName(v, dst, k.Partition), v.SourceNextOffset, v.DestNextOffset)
			for _, p := range v.Producers {
				fmt.Fprintf(&b, " prod=%s:%s:%d:%d", dst, s.pidOf(p), p.Epoch, p.LastSequence)
			}
		case statestore.PIDCollisionKey:
			v := r.Value.(statestore.PIDCollisionValue)
			fmt.Fprintf(&b, " salt=%s:%d:%d", s.dstKeyName(k.TopicID, k.Partition), k.OriginalPID, v.Salt)
		case statestore.SaltedPIDKey:
			v := r.Value.(statestore.SaltedPIDValue)
			fmt.Fprintf(&b, " salted=%s", s.pidOf(statestore.ProducerState{OriginalPID: v.OriginalPID, MappedPID: k.MappedPID}))
		default:
			fmt.Fprintf(&b, " %T", r.Key)
		}
	}
	flush()
	return b.String()
}

// pidOf names a checkpointed producer: its source PID, with ~salt=N when
// its mapped PID is salted.
func (s *script) pidOf(p statestore.ProducerState) string {
	if p.MappedPID == transform.MapPID(p.OriginalPID, s.src.Region) {
		return strconv.FormatInt(p.OriginalPID, 10)
	}
	r, _, _ := transform.DecodePID(p.MappedPID)
	return fmt.Sprintf("%d~salt=%d", p.OriginalPID, int64(uint32(r-s.src.Region)))
}

// ckName names a checkpoint's partitions as the scripts name a pair: the
// destination alone when the source has its name and its topic's usual
// ID, else SRC[@TOKEN]>DST.
func (s *script) ckName(v statestore.CheckpointValue, dst string, partition int32) string {
	src := tp.Partition{Topic: v.SourceTopic, Partition: v.SourcePartition, ID: [16]byte(v.SourceTopicID)}
	if dst == fmt.Sprintf("%s[%d]", v.SourceTopic, v.SourcePartition) {
		return s.srcName(src)
	}
	return s.srcName(src) + ">" + dst
}

func (s *script) tpName(p tp.Partition) string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }

// idSuffix is " id=TOKEN" when p's topic ID is not the one its name gives
// (prefix "src:" or "dst:"), "" when it is.
func (s *script) idSuffix(p tp.Partition, prefix string) string {
	if p.ID == topicID(prefix+p.Topic) {
		return ""
	}
	return " id=" + s.idName(p.ID)
}

func (s *script) idName(id [16]byte) string {
	if id == ([16]byte{}) {
		return "none"
	}
	if tok, ok := s.ids[id]; ok {
		return tok
	}
	return statestore.UUID(id).String()
}

// srcName names a source partition as the scripts do: t[0], or t[0]@TOKEN
// when its topic ID is not the name's.
func (s *script) srcName(p tp.Partition) string {
	if p.ID == topicID("src:"+p.Topic) {
		return s.tpName(p)
	}
	return s.tpName(p) + "@" + s.idName(p.ID)
}

// pairName names a pair as the scripts do: SRC[@TOKEN] or SRC[@TOKEN]>DST.
func (s *script) pairName(pr Pair) string {
	if pr.Src.Topic == pr.Dst.Topic && pr.Src.Partition == pr.Dst.Partition && pr.Dst.ID == topicID("dst:"+pr.Dst.Topic) {
		return s.srcName(pr.Src)
	}
	return s.srcName(pr.Src) + ">" + s.tpName(pr.Dst) + s.idSuffix(pr.Dst, "dst:")
}

// dstKeyName names a destination partition of the state topic's keys.
func (s *script) dstKeyName(id statestore.UUID, partition int32) string {
	if tok, ok := s.ids[[16]byte(id)]; ok {
		if topic, ok := strings.CutPrefix(tok, "dst:"); ok {
			return fmt.Sprintf("%s[%d]", topic, partition)
		}
	}
	return fmt.Sprintf("%s[%d]", id, partition)
}

func (s *script) pinNumber(p fetcher.Pin) int {
	for i, q := range s.pins {
		if q == p {
			return i + 1
		}
	}
	return 0
}

// logValue writes a log argument, quoted when it holds spaces, quotes or
// an equals sign.
func logValue(v any) string {
	var str string
	switch v := v.(type) {
	case error:
		str = v.Error()
	case fmt.Stringer:
		str = v.String()
	default:
		str = fmt.Sprint(v)
	}
	if str == "" || strings.ContainsAny(str, " \t\n\"=") {
		return strconv.Quote(str)
	}
	return str
}

// ---- arguments ----

func (s *script) noArgs(td *datadriven.TestData) {
	if len(td.CmdArgs) > 0 {
		s.fatalf("%s takes no arguments", td.Cmd)
	}
}

// str is an argument's value; key=(a, b) gives "a, b", which is how a
// value with spaces is written: err=(no leader).
func (s *script) str(a datadriven.CmdArg) string {
	if len(a.Vals) == 0 {
		s.fatalf("%s wants a value", a.Key)
	}
	return strings.Join(a.Vals, ", ")
}

func (s *script) int(a datadriven.CmdArg) int64 { return s.parseInt(s.str(a)) }

func (s *script) parseInt(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.fatalf("bad number %q", v)
	}
	return n
}

func (s *script) dur(a datadriven.CmdArg) time.Duration {
	d, err := time.ParseDuration(s.str(a))
	if err != nil {
		s.fatalf("bad duration %q", s.str(a))
	}
	return d
}
