package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// maxChecked bounds the producer IDs Origins remembers as not a link's; past
// it the memory is cleared and an ID seen again costs one more read.
const maxChecked = 1 << 16

// Origins learns which producer IDs at a link's source started at its
// destination without saying so by their region (DESIGN §16), from the
// state topic at the source, where links in the other direction (from the
// link's destination into its source) record them:
//
//   - the producer IDs of their transactional sessions (MirrorTxnProducer):
//     a transactional link appends under its own ID. A session records its
//     ID in a transaction no later than the one of its first data batch
//     under it;
//   - the salted mapped IDs of the destination's producers
//     (MirrorSaltedPid): a collision moved them out of the destination's
//     region. A link records one with the salt, before it appends under it.
//
// So after the link has fetched a committed batch under such an ID, a read
// of the state topic to its end finds the ID's record. Learn does that read
// for IDs it has not looked up yet, before the batches are decided;
// Sessions is the set the decisions consult.
//
// Safe for concurrent use: the fetcher's broker goroutines call Learn.
type Origins struct {
	store    *Store
	from, to string // the link's destination and source cluster IDs
	home     transform.Region
	strict   bool
	onRead   func()
	log      hclog.Logger
	set      *transform.Sessions

	mu      sync.Mutex // serialises reads; guards the fields below
	checked map[int64]struct{}
	warned  bool
	reads   int64

	// reverse is what Reverse's last read found of the links from the
	// destination into the source, and reverseAt when it read; nil: not
	// read yet.
	reverse   map[CheckpointKey]*reverseEntry
	reverseAt time.Time
	now       func() time.Time
}

// OriginsConfig says where Origins reads and what it looks for.
type OriginsConfig struct {
	// Topic is the state topic's name at the source: the same as the
	// link's own (links in both directions use one name).
	Topic string
	// SourceOpts reach the link's source cluster.
	SourceOpts []kgo.Opt
	// SourceClusterID and DestinationClusterID are the link's clusters.
	// A record counts when it is of a link from DestinationClusterID to
	// SourceClusterID.
	SourceClusterID, DestinationClusterID string
	// Strict: a state topic that cannot be read (refused, or failing) is
	// an error for Learn, which the fetcher retries; the link cannot tell
	// the batches a link from its destination appended under its
	// transactional sessions' or salted producer IDs. A
	// link that does not skip unattributed batches (not active-active)
	// is not strict: it says so once at INFO and treats the IDs as not a
	// link's. A state topic that does not exist holds no record either
	// way.
	Strict bool
	Logger hclog.Logger
	// OnRead, when set, is called at each read of the state topic.
	OnRead func()
	// Principal names the principal of the source credentials in errors
	// about a missing ACL. Default "the link's principal".
	Principal string
}

// NewOrigins returns an Origins with an empty set. It does no I/O.
func NewOrigins(cfg OriginsConfig) (*Origins, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	st, err := New(Config{Topic: cfg.Topic, Principal: cfg.Principal, OtherSide: true}, Deps{ClientOpts: cfg.SourceOpts, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	home, _ := transform.RegionOf(cfg.DestinationClusterID)
	return &Origins{store: st, from: cfg.DestinationClusterID, to: cfg.SourceClusterID, home: home, strict: cfg.Strict, onRead: cfg.OnRead,
		log: cfg.Logger.Named("origins"), set: transform.NewSessions(), checked: make(map[int64]struct{}), now: time.Now}, nil
}

// Sessions is the set of producer IDs learnt so far; it only grows.
func (o *Origins) Sessions() *transform.Sessions { return o.set }

// Reads is how many times Learn read the state topic.
func (o *Origins) Reads() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reads
}

// Close closes the source client.
func (o *Origins) Close() { o.store.Close() }

// candidate reports whether a batch with header h could have started at
// the destination without its region saying so: a transactional batch
// under a producer ID of the cluster itself (a transactional link's), or a
// batch under a mapped ID of another region than the destination's (a
// salted one; most are other clusters' further up a chain, each looked up
// once).
func (o *Origins) candidate(h transform.Header) bool {
	if h.Control() {
		return false
	}
	if r, _, ok := transform.DecodePID(h.ProducerID); ok {
		return r != o.home
	}
	return h.ProducerID >= 0 && h.Transactional()
}

// Learn makes Sessions answer for the producer ID of every batch of hs: an
// ID neither in the set nor looked up before makes it read the state topic
// at the source to its end (one read for all of hs).
func (o *Origins) Learn(ctx context.Context, hs []transform.Header) error {
	unknown := func() bool {
		for _, h := range hs {
			if !o.candidate(h) || o.set.Has(h.ProducerID) {
				continue
			}
			if _, ok := o.checked[h.ProducerID]; !ok {
				return true
			}
		}
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !unknown() {
		return nil
	}
	o.reads++
	if o.onRead != nil {
		o.onRead()
	}
	// kadm answers Metadata from the client's cache when it is younger
	// than MetadataMinAge (5 s; kadm.Client.Metadata uses
	// RequestCachedMetadata), which may predate the topic's creation or
	// a partition's new leader; this read must see the topic as it is now.
	// WithAuthorizedOps makes kadm ask the brokers.
	v, err := o.store.Replay(kadm.WithAuthorizedOps(ctx))
	switch {
	case errors.Is(err, ErrNoTopic):
		v = NewView()
	case err != nil && o.strict:
		return fmt.Errorf("read state topic %q at the source to tell the batches a link from the destination appended under its transactional sessions' or salted producer IDs, which must not be sent back: %w", o.store.Topic(), err)
	case err != nil:
		if !o.warned {
			o.warned = true
			o.log.Info("cannot read the state topic at the source, so producer IDs under which a link from the destination appended there (its transactional sessions', salted ones) are not looked up: a one-way link needs none; on active-active links set unattributed = \"skip\", which makes this an error, and grant Read on the topic there (docs/acls.md)", "topic", o.store.Topic(), "error", err)
		}
		v = NewView()
	}
	n := o.set.Len()
	for k, val := range v.TxnProducers {
		if val.SourceClusterID == o.from && val.DestinationClusterID == o.to {
			o.set.Add(k.ProducerID)
		}
	}
	for k := range v.SaltedPIDs {
		if k.SourceClusterID == o.from {
			o.set.Add(k.MappedPID)
		}
	}
	if len(o.checked) >= maxChecked {
		clear(o.checked)
	}
	for _, h := range hs {
		if o.candidate(h) && !o.set.Has(h.ProducerID) {
			o.checked[h.ProducerID] = struct{}{}
		}
	}
	if m := o.set.Len(); m > n {
		o.log.Info("learnt producer IDs that started at the destination (transactional links' sessions, salted mappings)", "new", m-n, "known", m)
	}
	return nil
}

// reverseAge is how long Reverse answers from the view it read last: a
// translation of a group's partitions asks once per partition. An older
// checkpoint is still a cut (Reverse), only a lower one.
const reverseAge = 10 * time.Second

// Reverse is the last checkpoint, of one partition, of a link in the other
// direction: from the link's destination into its source, over the same
// topic names, whose state topic (of the same name) is at the link's
// source. Every batch it mirrored from below SourceNext (an offset at the
// link's destination) is below DestNext at the link's source, and every
// one from SourceNext on is at DestNext or later.
type Reverse struct {
	Link string
	// Live: its last state record is not a stop or a pause: a session of
	// it runs, or crashed, and mirrors (or will) what its source gets.
	Live bool
	// State is that record's state.
	State                LinkState
	SourceNext, DestNext int64
	// Earlier are the link's checkpoints of the partition before the
	// last that the state topic still holds (compaction removes them),
	// oldest first: each is a cut as the last is.
	Earlier []Cut
}

// Cut is one checkpoint's pair of positions.
type Cut struct{ SourceNext, DestNext int64 }

// cutOf is a checkpoint's cut and its source topic's ID: the cuts of a
// topic deleted and created again under its name are not the new one's.
type cutOf struct {
	Cut
	topicID UUID
}

// reverseEntry is one checkpoint key of a link from the destination into
// the source: its link record, its last checkpoint, and every checkpoint of
// the key the read met, oldest first.
type reverseEntry struct {
	link    LinkValue
	last    CheckpointValue
	history []cutOf
}

// Reverse returns the checkpoint of the partition dst (at the link's
// destination) that a link from the destination into the source committed
// for its mirror src at the source; ok is false when no such link has one
// (of several, the checkpoint with the lowest SourceNext). The topic IDs must match
// where both are known. It reads the state topic at the source, or answers
// from a read less than 10 s old.
func (o *Origins) Reverse(ctx context.Context, src, dst tp.Partition) (Reverse, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reverse == nil || o.now().Sub(o.reverseAt) >= reverseAge {
		v, err := o.store.Replay(kadm.WithAuthorizedOps(ctx))
		switch {
		case errors.Is(err, ErrNoTopic):
			v = NewView()
		case err != nil && o.strict:
			return Reverse{}, false, fmt.Errorf("read state topic %q at the source for the checkpoints of the link in the other direction: %w", o.store.Topic(), err)
		case err != nil:
			return Reverse{}, false, nil
		}
		// Only the reverse links' checkpoints are kept, not the view.
		o.reverse, o.reverseAt = make(map[CheckpointKey]*reverseEntry), o.now()
		for k, ck := range v.Checkpoints {
			if lv, known := v.Links[k.LinkName]; known && lv.SourceClusterID == o.from && lv.DestinationClusterID == o.to {
				o.reverse[k] = &reverseEntry{link: lv, last: ck}
			}
		}
		for _, r := range v.Records {
			k, _ := r.Key.(CheckpointKey)
			ck, isCk := r.Value.(CheckpointValue)
			if e := o.reverse[k]; e != nil && isCk {
				e.history = append(e.history, cutOf{Cut{SourceNext: ck.SourceNextOffset, DestNext: ck.DestNextOffset}, ck.SourceTopicID})
			}
		}
	}
	var (
		out Reverse
		ok  bool
	)
	for k, e := range o.reverse {
		ck := e.last
		if ck.SourceTopic != dst.Topic || ck.SourcePartition != dst.Partition || k.Partition != src.Partition ||
			(k.TopicID != UUID{} && src.ID != [16]byte{} && k.TopicID != UUID(src.ID)) ||
			(ck.SourceTopicID != UUID{} && dst.ID != [16]byte{} && ck.SourceTopicID != UUID(dst.ID)) {
			continue
		}
		if !ok || ck.SourceNextOffset < out.SourceNext {
			out = Reverse{Link: k.LinkName, Live: e.link.State != Stopped && e.link.State != Paused, State: e.link.State,
				SourceNext: ck.SourceNextOffset, DestNext: ck.DestNextOffset}
			if h := e.history; len(h) > 1 {
				for _, c := range h[:len(h)-1] {
					if c.topicID == ck.SourceTopicID {
						out.Earlier = append(out.Earlier, c.Cut)
					}
				}
			}
			ok = true
		}
	}
	return out, ok, nil
}
