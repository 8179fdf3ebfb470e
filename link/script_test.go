package link

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

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
// pure pipeline: each script feeds inputs and states the actions, positions
// and counters it expects (the format is described in testdata/README.md).
// Every fault path of the pipeline has a script; a script that drifts from
// the pipeline fails with its file and line.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f) })
	}
}

// script is the state of one script's run.
type script struct {
	t      *testing.T
	file   string
	line   int
	pl     *Pipeline
	base   time.Time
	now    time.Time
	src    twin.Source
	cfg    PipelineConfig
	last   []Action          // the actions of the last step
	batch  map[string][]byte // named source batches, as the source holds them
	seq    map[int64]int32   // next base sequence per PID, for batches that do not say
	pins   []fetcher.Pin     // every pin given, by number
	freed  map[fetcher.Pin]int
	held   int // pins expected to be held at the end
	saltsN int64
	tags   map[tp.Key]uint64 // the last submit tag per destination partition
	commit uint64            // the last commit ID
}

func runScript(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &script{
		t:     t,
		file:  file,
		base:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		batch: map[string][]byte{},
		seq:   map[int64]int32{},
		freed: map[fetcher.Pin]int{},
		tags:  map[tp.Key]uint64{},
	}
	s.now = s.base
	region, _ := transform.RegionOf(kafkatest.SourceClusterID)
	s.src = twin.Source{Cluster: kafkatest.SourceClusterID, Region: region}
	s.cfg = PipelineConfig{Link: "l", SourceCluster: s.src.Cluster, Region: region, SettleDelay: 30 * time.Second,
		Rand: func() int64 { s.saltsN++; return s.saltsN * 1000 }}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s.line++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s.do(line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	s.checkPins()
}

func (s *script) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%s:%d: %s", s.file, s.line, fmt.Sprintf(format, args...))
}

func (s *script) pipeline() *Pipeline {
	if s.pl == nil {
		s.pl = NewPipeline(s.cfg)
	}
	return s.pl
}

// step feeds one input and keeps the actions.
func (s *script) step(in Input) {
	s.last = s.pipeline().Step(s.now, in)
	for _, a := range s.last {
		switch a := a.(type) {
		case DoRelease:
			s.freed[a.Pin]++
			if s.freed[a.Pin] > 1 {
				s.fatalf("pin#%d released twice (I7)", s.pinNumber(a.Pin))
			}
		case DoSubmit:
			s.tags[a.Request.Partition.Key()] = a.Request.Tag
		case DoCommit:
			s.commit = a.ID
		}
	}
}

func (s *script) do(line string) {
	s.t.Helper()
	words := fields(line)
	cmd, args := words[0], words[1:]
	kv := keyValues(args)
	switch cmd {
	case "config":
		s.configure(kv)
	case "at":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			s.fatalf("at: %v", err)
		}
		s.now = s.base.Add(d)
	case "def":
		// def NAME SPEC
		s.batch[args[0]] = s.buildBatch(args[1])
	case "add", "placed":
		initial := len(args) > 0 && args[0] == "initial"
		if initial {
			args = args[1:]
		}
		if cmd == "placed" && len(args) > 0 && strings.HasPrefix(args[0], "err=") {
			s.step(InPlaced{Err: errors.New(unquote(args[0][4:]))})
			return
		}
		var parts []Placement
		for _, group := range splitOn(args, "|") {
			if len(group) > 0 {
				parts = append(parts, s.placement(group))
			}
		}
		if cmd == "placed" {
			s.step(InPlaced{Parts: parts})
		} else {
			s.step(InAdd{Parts: parts, Initial: initial})
		}
	case "fetch":
		s.fetch(args)
	case "appended":
		s.appended(args[0], kv)
	case "settled":
		dst := s.part(args[0]).Dst
		in := InSettled{Dst: dst.Key(), Tag: s.tagOf(dst, kv), Offset: -1}
		switch {
		case kv["offset"] != "":
			in.Offset = s.int(kv["offset"])
		case kv["err"] != "":
			in.Err = errors.New(unquote(kv["err"]))
		}
		s.step(in)
	case "committed":
		id := s.commit
		if len(args) > 0 && strings.HasPrefix(args[0], "#") {
			id = uint64(s.int(args[0][1:]))
		}
		var err error
		if kv["err"] != "" {
			err = errors.New(unquote(kv["err"]))
		}
		s.step(InCommitted{ID: id, Err: err})
	case "tailread":
		s.tailRead(args)
	case "sourceend":
		in := InSourceEnd{Src: s.part(args[0]).Src.Key(), LSO: s.int(kv["lso"])}
		if kv["err"] != "" {
			in.Err = errors.New(unquote(kv["err"]))
		}
		s.step(in)
	case "discovered":
		s.discovered(kv)
	case "checkpointdue":
		s.step(InCheckpointDue{})
	case "discoverydue":
		s.step(InDiscoveryDue{})
	case "tick":
		s.step(InTick{})
	case "stop":
		st := Stopped
		if len(args) > 0 && args[0] == "paused" {
			st = Paused
		}
		s.step(InStop{State: st})
	case "draintimeout":
		s.step(InDrainTimeout{})
	case "expect":
		s.expect(line[len("expect "):])
	case "state":
		s.state(args[0], keyValues(args[1:]))
	case "stats":
		s.stats(kv)
	case "pins":
		s.held = int(s.int(kv["held"]))
		s.checkPins()
	default:
		s.fatalf("unknown command %q", cmd)
	}
}

func (s *script) configure(kv map[string]string) {
	for k, v := range kv {
		switch k {
		case "settle_delay":
			s.cfg.SettleDelay = s.dur(v)
		case "produce_timeout":
			s.cfg.ProduceTimeout = s.dur(v)
		case "exhaust_grace":
			s.cfg.ExhaustGrace = s.dur(v)
		case "max_reconciling":
			s.cfg.MaxReconciling = int(s.int(v))
		case "expiry":
			s.cfg.ProducerStateExpiry = s.dur(v)
		default:
			s.fatalf("config: unknown key %q", k)
		}
	}
	if s.pl != nil {
		s.fatalf("config after the pipeline started")
	}
}

// ---- partitions and IDs ----

// part parses "t[0]" (the same topic name at both ends) or "s[0]>d[0]",
// with "@id" after the source to give it another topic ID token.
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
	src.ID = topicID(idTok)
	dst.ID = topicID("dst:" + dst.Topic)
	return Pair{Src: src, Dst: dst}
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

func topicID(token string) [16]byte {
	sum := sha256.Sum256([]byte(token))
	var id [16]byte
	copy(id[:], sum[:])
	return id
}

// placement parses "t[0] start=.. dststart=.. dstend=.. ck=S/D ckid=TOK
// ckprod=PID:EPOCH:SEQ salt=PID:VALUE".
func (s *script) placement(words []string) Placement {
	pc := Placement{Pair: s.part(words[0])}
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "start":
			pc.StartOffset = s.int(v)
		case "dststart":
			pc.DstStart = s.int(v)
		case "dstend":
			pc.DstEnd = s.int(v)
		case "ck":
			a, b, _ := strings.Cut(v, "/")
			pc.Checkpoint = &statestore.CheckpointValue{SourceTopic: pc.Src.Topic, SourcePartition: pc.Src.Partition,
				SourceNextOffset: s.int(a), DestNextOffset: s.int(b), SourceTopicID: statestore.UUID(pc.Src.ID)}
		case "ckid":
			if pc.Checkpoint == nil {
				s.fatalf("ckid before ck")
			}
			pc.Checkpoint.SourceTopicID = statestore.UUID(topicID(v))
			if v == "none" {
				pc.Checkpoint.SourceTopicID = statestore.UUID{} // a version 0 checkpoint
			}
		case "ckprod":
			if pc.Checkpoint == nil {
				s.fatalf("ckprod before ck")
			}
			f := strings.Split(v, ":")
			pid := s.int(f[0])
			pc.Checkpoint.Producers = append(pc.Checkpoint.Producers, statestore.ProducerState{
				SourceClusterID: s.src.Cluster, OriginalPID: pid, MappedPID: transform.MapPID(pid, s.src.Region),
				Region: uint32(s.src.Region), Epoch: int16(s.int(f[1])), LastSequence: int32(s.int(f[2])), LastAppendMs: s.now.UnixMilli(),
			})
		case "salt":
			a, b, _ := strings.Cut(v, ":")
			pc.Salts = append(pc.Salts, Salt{Origin: transform.Origin{Cluster: s.src.Cluster, PID: s.int(a)}, Salt: s.int(b), At: s.now})
		default:
			s.fatalf("placement: unknown key %q", k)
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
	sp := batchtest.Spec{BaseOffset: s.int(f[0]), PID: 5, FirstTimestamp: 1_700_000_000_000}
	n := int(s.int(f[1]))
	seq := int32(-2)
	gap := int32(0)
	if len(f) == 3 {
		for _, o := range strings.Split(f[2], ",") {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "pid":
				sp.PID = s.int(v)
			case "seq":
				seq = int32(s.int(v))
			case "epoch":
				sp.Epoch = int16(s.int(v))
			case "gap":
				gap = int32(s.int(v))
			case "lat":
				sp.LogAppendTime = 1_700_000_900_000
			case "codec":
				sp.Codec = int8(s.int(v))
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

// fetch parses PART gen=N start=S [end=E] [hw=H] [lso=L] [skipped=N]
// [err=recreated|oor|refused] [b=SPEC|NAME ...].
func (s *script) fetch(args []string) {
	pr := s.part(args[0])
	r := fetcher.Result{Partition: pr.Src, HighWatermark: -1, LastStableOffset: -1}
	end := int64(-1)
	for _, w := range args[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "gen":
			r.Gen = uint64(s.int(v))
		case "start":
			r.Start = s.int(v)
		case "end":
			end = s.int(v)
		case "hw":
			r.HighWatermark = s.int(v)
		case "lso":
			r.LastStableOffset = s.int(v)
		case "skipped":
			r.SkippedRecords = s.int(v)
		case "err":
			switch v {
			case "recreated":
				r.Err = fmt.Errorf("%w: test", fetcher.ErrTopicRecreated)
			case "oor":
				r.Err = fmt.Errorf("%w: test", fetcher.ErrOffsetOutOfRange)
			default:
				r.Err = fmt.Errorf("%w: test", fetcher.ErrRefused)
			}
		case "b":
			raw := slices.Clone(s.sourceBatch(v))
			h, err := transform.ParseHeader(raw)
			if err != nil {
				s.fatalf("batch %s: %v", v, err)
			}
			r.Batches = append(r.Batches, fetcher.Batch{Raw: raw, Header: h})
			r.Bytes += len(raw)
		default:
			s.fatalf("fetch: unknown key %q", k)
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
	s.step(InFetched{Result: r})
}

func (s *script) pinNumber(p fetcher.Pin) int {
	for i, q := range s.pins {
		if q == p {
			return i + 1
		}
	}
	return 0
}

func (s *script) checkPins() {
	s.t.Helper()
	held := 0
	for _, p := range s.pins {
		if s.freed[p] == 0 {
			held++
		}
	}
	if held != s.held {
		s.fatalf("%d fetch pins held, want %d (I7: every pin released once its batches are done)", held, s.held)
	}
}

// twinOf is what the destination holds for a source batch the pipeline
// appended at destination offset base: the forwarded batch (rewritten, or
// re-encoded when compacted), with options ~salt=N (the PID salted) and
// ~broker (rewritten the way a CreateTime topic's broker rewrites a
// LogAppendTime batch: timestamp type, max timestamp and CRC).
func (s *script) twinOf(spec string) []byte {
	at, rest, _ := strings.Cut(spec, "@")
	parts := strings.Split(rest, "~")
	src := slices.Clone(s.sourceBatch(parts[0]))
	h, _ := transform.ParseHeader(src)
	mapped := transform.MapPID(h.ProducerID, s.src.Region)
	broker := false
	for _, o := range parts[1:] {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "salt":
			mapped = transform.MapPIDSalted(h.ProducerID, s.src.Region, s.int(v))
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
	binary.BigEndian.PutUint64(out, uint64(s.int(at)))
	return out
}

// tailRead parses PART [d=DSTBASE@SRC[~opts]] [f=DSTBASE:N] [empty] [err=..].
func (s *script) tailRead(args []string) {
	pr := s.part(args[0])
	in := InTailRead{Dst: pr.Dst.Key()}
	for _, w := range args[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "d":
			in.Batches = append(in.Batches, s.twinOf(v))
		case "f":
			a, b, _ := strings.Cut(v, ":")
			foreign := batchtest.Simple(0, -77, 0, 0, int(s.int(b)))
			binary.BigEndian.PutUint64(foreign, uint64(s.int(a)))
			in.Batches = append(in.Batches, foreign)
		case "empty":
		case "err":
			in.Err = errors.New(unquote(v))
		default:
			s.fatalf("tailread: unknown key %q", k)
		}
	}
	s.step(in)
}

func (s *script) appended(part string, kv map[string]string) {
	dst := s.part(part).Dst
	res := appender.Result{Partition: dst, Tag: s.tagOf(dst, kv)}
	switch kv["err"] {
	case "":
		res.BaseOffset = s.int(kv["base"])
	case "unknown":
		// answered: a broker answered with an error code that leaves
		// the append possible; otherwise no answer came, sent=DURATION
		// ago (default now) with the produce timeout timeout=.
		res.Err = fmt.Errorf("%w: test", appender.ErrUnknownOutcome)
		res.Answered = slices.Contains(keysOf(kv), "answered")
		res.Sent = s.now
		if v := kv["sent"]; v != "" {
			res.Sent = s.now.Add(-s.dur(v))
		}
		if v := kv["timeout"]; v != "" {
			res.ProduceTimeout = s.dur(v)
		}
	case "corrupt":
		res.Err = fmt.Errorf("%w: test", appender.ErrCorrupt)
	case "stopped":
		res.Err = fmt.Errorf("%w: test", appender.ErrStopped)
	case "lease":
		res.Err = fmt.Errorf("%w: test", appender.ErrLeaseExpired)
	case "toolarge":
		res.Err = fmt.Errorf("%w: test", appender.ErrTooLarge)
	default:
		res.Err = fmt.Errorf("%w: test", appender.ErrFatal)
	}
	s.step(InAppended{Result: res})
}

func (s *script) tagOf(dst tp.Partition, kv map[string]string) uint64 {
	if v := kv["tag"]; v != "" {
		return uint64(s.int(v))
	}
	return s.tags[dst.Key()]
}

func (s *script) discovered(kv map[string]string) {
	in := InDiscovered{}
	if kv["err"] != "" {
		in.Err = errors.New(unquote(kv["err"]))
	}
	if v := kv["pairs"]; v != "" {
		for _, p := range strings.Split(v, ",") {
			in.Pairs = append(in.Pairs, s.part(p))
		}
	}
	if v := kv["gone"]; v != "" {
		for _, p := range strings.Split(v, ",") {
			in.Gone = append(in.Gone, s.part(p).Src.Key())
		}
	}
	s.step(in)
}

// ---- expectations ----

// expect checks that the last step's actions include, in order, one that
// has the expected line's verb and every one of its tokens (a quoted token
// matches a substring). "expect nothing" means no action but logs.
func (s *script) expect(want string) {
	s.t.Helper()
	got := make([]string, 0, len(s.last))
	for _, a := range s.last {
		got = append(got, s.format(a))
	}
	if want == "nothing" {
		for _, g := range got {
			if !strings.HasPrefix(g, "log ") {
				s.fatalf("expected no action, got:\n  %s", strings.Join(got, "\n  "))
			}
		}
		return
	}
	wt := fields(want)
	for i, g := range got {
		if matches(wt, fields(g)) {
			s.last = s.last[i+1:]
			return
		}
	}
	s.fatalf("no action matches %q among:\n  %s", want, strings.Join(got, "\n  "))
}

func matches(want, got []string) bool {
	if len(got) == 0 || want[0] != got[0] {
		return false
	}
	for _, w := range want[1:] {
		if q, ok := strings.CutPrefix(w, `"`); ok {
			q = strings.TrimSuffix(q, `"`)
			if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, q) }) {
				return false
			}
			continue
		}
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// format renders an action as the scripts name it.
func (s *script) format(a Action) string {
	name := func(p tp.Partition) string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }
	switch a := a.(type) {
	case DoAssign:
		return fmt.Sprintf("assign %s@%d gen=%d", name(a.Src), a.Offset, a.Gen)
	case DoUnassign:
		return "unassign " + name(a.Src)
	case DoRelease:
		return fmt.Sprintf("release pin#%d", s.pinNumber(a.Pin))
	case DoSubmit:
		h, _ := transform.ParseHeader(a.Request.Batch)
		pid := fmt.Sprintf("pid=raw:%d", h.ProducerID)
		if orig, ok := s.unmap(h.ProducerID); ok {
			pid = "pid=" + orig
		}
		dense := "dense"
		if !h.Dense() {
			dense = "gappy"
		}
		return fmt.Sprintf("submit %s tag=%d n=%d lod=%d seq=%d %s %s", name(a.Request.Partition), a.Request.Tag, h.NumRecords, h.LastOffsetDelta, h.BaseSequence, pid, dense)
	case DoSettle:
		return fmt.Sprintf("settle %s from=%d tag=%d delay=%s early=%s", name(a.Dst), a.From, a.Tag, a.Delay, a.EarlyAfter)
	case DoReadTail:
		return fmt.Sprintf("readtail %s from=%d end=%d", name(a.Dst), a.From, a.End)
	case DoLookupSourceEnd:
		return "sourceend " + name(a.Src)
	case DoCommit:
		var b strings.Builder
		fmt.Fprintf(&b, "commit #%d %s", a.ID, a.State)
		if a.Final {
			fmt.Fprintf(&b, " final unresolved=%d", a.Unresolved)
		}
		for _, r := range a.Records {
			switch k := r.Key.(type) {
			case statestore.PIDResetKey:
				fmt.Fprintf(&b, " barrier=%s", s.dstName(k.TopicID, k.Partition))
			case statestore.CheckpointKey:
				v := r.Value.(statestore.CheckpointValue)
				fmt.Fprintf(&b, " ck=%s:%d/%d", s.dstName(k.TopicID, k.Partition), v.SourceNextOffset, v.DestNextOffset)
				for _, p := range v.Producers {
					fmt.Fprintf(&b, " prod=%s:%d:%d:%d", s.dstName(k.TopicID, k.Partition), p.OriginalPID, p.Epoch, p.LastSequence)
				}
			case statestore.PIDCollisionKey:
				if r.Value == nil {
					fmt.Fprintf(&b, " tombstone=%s:%d", s.dstName(k.TopicID, k.Partition), k.OriginalPID)
				} else {
					fmt.Fprintf(&b, " salt=%s:%d", s.dstName(k.TopicID, k.Partition), k.OriginalPID)
				}
			}
		}
		return b.String()
	case DoDiscover:
		var ks []string
		for _, p := range a.Known {
			ks = append(ks, name(p))
		}
		return "discover known=" + strings.Join(ks, ",")
	case DoPlace:
		var ks []string
		for _, p := range a.Pairs {
			ks = append(ks, name(p.Src))
		}
		return "place " + strings.Join(ks, ",")
	case DoEnterMirroring:
		return "mirroring"
	case DoFail:
		return "fail " + strconv.Quote(a.Err.Error())
	case DoFinish:
		clean := "unclean"
		if a.Clean {
			clean = "clean"
		}
		return fmt.Sprintf("finish %s %s", clean, a.State)
	case DoLog:
		return fmt.Sprintf("log %s %s", strings.ToUpper(hclog.Level(a.Level).String()), strconv.Quote(a.Msg))
	}
	return fmt.Sprintf("%T", a)
}

// unmap names a mapped PID by the source PID it maps, with "~salted" when
// a salt moved it.
func (s *script) unmap(mapped int64) (string, bool) {
	if mapped >= 0 {
		return "", false
	}
	low := mapped & 0x7FFF_FFFF
	if transform.MapPID(low, s.src.Region) == mapped {
		return strconv.FormatInt(low, 10), true
	}
	return strconv.FormatInt(low, 10) + "~salted", true
}

func (s *script) dstName(id statestore.UUID, partition int32) string {
	for _, p := range s.pipeline().parts {
		if statestore.UUID(p.Dst.ID) == id {
			return fmt.Sprintf("%s[%d]", p.Dst.Topic, partition)
		}
	}
	return fmt.Sprintf("%s[%d]", id, partition)
}

// state checks a partition: phase=, src=, dst=, ck=S/D, pending=, gone.
func (s *script) state(part string, kv map[string]string) {
	s.t.Helper()
	pr := s.part(part)
	p := s.pipeline().byDst[pr.Dst.Key()]
	if v, ok := kv["phase"]; ok && v == "absent" {
		if p != nil {
			s.fatalf("%s: in phase %s, want it absent", part, p.phase)
		}
		return
	}
	if p == nil {
		s.fatalf("%s: not in the pipeline", part)
	}
	for k, v := range kv {
		var got string
		switch k {
		case "phase":
			got = p.phase.String()
		case "src":
			got = strconv.FormatInt(p.srcNext, 10)
		case "dst":
			got = strconv.FormatInt(p.dstNext, 10)
		case "ck":
			got = fmt.Sprintf("%d/%d", p.ckSrc, p.ckDst)
		case "pending":
			got = strconv.Itoa(p.pending())
		case "gen":
			got = strconv.FormatUint(p.gen, 10)
		case "window":
			got = windowString(p.win.list())
		default:
			s.fatalf("state: unknown key %q", k)
		}
		if got != v {
			s.fatalf("%s: %s is %s, want %s", part, k, got, v)
		}
	}
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

// stats checks counters by their names in the counter table (and
// discovery_failures, the failed topic discoveries).
func (s *script) stats(kv map[string]string) {
	s.t.Helper()
	pl := s.pipeline()
	for k, v := range kv {
		var got int64
		if k == "discovery_failures" {
			got = pl.DiscoveryFailures()
		} else {
			i := slices.IndexFunc(CounterTable(), func(c CounterInfo) bool { return c.Name == k })
			if i < 0 {
				s.fatalf("stats: unknown counter %q", k)
			}
			got = pl.Count(Counter(i))
		}
		if strconv.FormatInt(got, 10) != v {
			s.fatalf("stats: %s is %d, want %s", k, got, v)
		}
	}
}

// ---- parsing ----

// fields splits on spaces, keeping quoted strings whole.
func fields(line string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func keyValues(words []string) map[string]string {
	kv := map[string]string{}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		kv[k] = v
	}
	return kv
}

func keysOf(kv map[string]string) []string {
	out := make([]string, 0, len(kv))
	for k := range kv {
		out = append(out, k)
	}
	return out
}

func splitOn(words []string, sep string) [][]string {
	var out [][]string
	cur := []string{}
	for _, w := range words {
		if w == sep {
			out = append(out, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

func unquote(s string) string { return strings.Trim(s, `"`) }

func (s *script) int(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.fatalf("bad number %q", v)
	}
	return n
}

func (s *script) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.fatalf("bad duration %q", v)
	}
	return d
}
