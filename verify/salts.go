package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// StateSalts reads the collision salts of a link's state topic on the
// destination cluster and returns a lookup for Config.Salt.
//
// The state topic keys a salt by destination topic ID; the lookup finds it
// by the ID of the partition it is given, or, when that ID is zero (a
// cluster that reports no topic IDs), by topic name, with the IDs mapped to
// names through the destination's metadata.
//
// A salt is committed before the batch it concerns is appended, so a
// destination batch that a comparison reads may need a salt committed after
// StateSalts read the topic. On a miss the lookup reads the state topic
// again, unless the topic has not grown since the last read or another
// lookup re-read it after this one was called; an answer is therefore
// complete for every batch appended before the lookup was called.
//
// A salt that was tombstoned (its producer expired) is still returned:
// batches appended under it may remain in the destination. If a key was
// salted more than once, the latest salt wins.
//
// dest is used for metadata and offset listings, destOpts (the options
// that reach the same cluster) for the reads; ctx bounds every read,
// including those of later lookups: once it ends, a miss is final. A
// re-read that fails leaves the miss as it is. The lookup is safe for
// concurrent use. A state topic that does not exist holds no salts.
func StateSalts(ctx context.Context, dest *kgo.Client, destOpts []kgo.Opt, stateTopic string) (func(tp.Partition, transform.Origin) (int64, bool), error) {
	s := newSaltReader(dest, destOpts, stateTopic)
	if err := s.read(ctx); err != nil {
		return nil, err
	}
	return func(p tp.Partition, o transform.Origin) (int64, bool) { return s.lookup(ctx, p, o) }, nil
}

type saltByID struct {
	id        [16]byte
	partition int32
	origin    transform.Origin
}

type saltByName struct {
	p      tp.Key
	origin transform.Origin
}

// saltReader holds the salts of one state topic and re-reads it on a miss.
type saltReader struct {
	cl    *kgo.Client
	adm   *kadm.Client
	opts  []kgo.Opt
	topic string

	started atomic.Uint64 // reads and growth checks begun; see lookup

	mu     sync.Mutex // guards everything below and serializes reads
	byID   map[saltByID]int64
	byName map[saltByName]int64
	ends   map[int32]int64 // the state topic's end offsets before the last read
	reads  int             // completed reads, for tests
}

func newSaltReader(dest *kgo.Client, destOpts []kgo.Opt, stateTopic string) *saltReader {
	return &saltReader{cl: dest, adm: kadm.NewClient(dest), opts: destOpts, topic: stateTopic}
}

// lookup returns the salt of origin o at destination partition p.
func (s *saltReader) lookup(ctx context.Context, p tp.Partition, o transform.Origin) (int64, bool) {
	// A check that begins after this call began sees every salt that was
	// committed before it: waiting for one that is under way (or done)
	// answers as well as a new one.
	arrived := s.started.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if salt, ok := s.find(p, o); ok {
		return salt, true
	}
	if s.started.Load() > arrived || ctx.Err() != nil {
		return 0, false
	}
	s.started.Add(1)
	ends, err := s.endOffsets(ctx)
	if err != nil || maps.Equal(ends, s.ends) {
		return 0, false // nothing was committed since the last read
	}
	if err := s.readLocked(ctx, ends); err != nil {
		return 0, false
	}
	return s.find(p, o)
}

func (s *saltReader) find(p tp.Partition, o transform.Origin) (int64, bool) {
	if p.ID != ([16]byte{}) {
		salt, ok := s.byID[saltByID{p.ID, p.Partition, o}]
		return salt, ok
	}
	salt, ok := s.byName[saltByName{p.Key(), o}]
	return salt, ok
}

// read reads the state topic for the first time.
func (s *saltReader) read(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started.Add(1)
	ends, err := s.endOffsets(ctx)
	if err != nil {
		return err
	}
	return s.readLocked(ctx, ends)
}

// endOffsets lists the state topic's end offsets; nil if it does not exist.
func (s *saltReader) endOffsets(ctx context.Context) (map[int32]int64, error) {
	// kadm answers from the client's metadata cache, which may be up to
	// MetadataMinAge old and not know a state topic created since; a
	// metadata request of our own is answered by a broker and refreshes
	// that cache.
	md, err := s.metadata(ctx, s.topic)
	if err != nil {
		return nil, err
	}
	if len(md.Topics) != 1 || errors.Is(kerr.ErrorForCode(md.Topics[0].ErrorCode), kerr.UnknownTopicOrPartition) {
		return nil, nil // no such topic
	}
	listed, err := s.adm.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("state topic %q: list end offsets: %w", s.topic, err)
	}
	ends := map[int32]int64{}
	var errs []error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 && errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return // deleted since the metadata request
		}
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("state topic %q partition %d: list end offset: %w", s.topic, o.Partition, o.Err))
			return
		}
		ends[o.Partition] = o.Offset
	})
	if len(ends) == 0 && len(errs) == 0 {
		return nil, nil // no such topic
	}
	return ends, errors.Join(errs...)
}

// readLocked replays the state topic, whose end offsets were ends just
// before, and replaces the salts.
func (s *saltReader) readLocked(ctx context.Context, ends map[int32]int64) error {
	byID := map[saltByID]int64{}
	byName := map[saltByName]int64{}
	if ends != nil {
		view, err := statestore.ReadView(ctx, s.topic, s.opts)
		switch {
		case errors.Is(err, statestore.ErrNoTopic):
			view = statestore.NewView()
		case err != nil:
			return fmt.Errorf("read salts: %w", err)
		}
		names, err := s.topicNames(ctx)
		if err != nil {
			return err
		}
		// Records are in log order per key, so a later salt of a key
		// replaces an earlier one; a tombstone does not remove it.
		for _, r := range view.Records {
			k, ok := r.Key.(statestore.PIDCollisionKey)
			v, hasValue := r.Value.(statestore.PIDCollisionValue)
			if !ok || !hasValue {
				continue
			}
			o := transform.Origin{Cluster: k.SourceClusterID, PID: k.OriginalPID}
			byID[saltByID{[16]byte(k.TopicID), k.Partition, o}] = v.Salt
			if name, ok := names[[16]byte(k.TopicID)]; ok {
				byName[saltByName{tp.Key{Topic: name, Partition: k.Partition}, o}] = v.Salt
			}
		}
	}
	s.byID, s.byName, s.ends = byID, byName, ends
	s.reads++
	return nil
}

// topicNames maps the destination's topic IDs to names.
func (s *saltReader) topicNames(ctx context.Context) (map[[16]byte]string, error) {
	md, err := s.metadata(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[[16]byte]string, len(md.Topics))
	for _, td := range md.Topics {
		if td.ErrorCode == 0 && td.Topic != nil && td.TopicID != ([16]byte{}) {
			names[td.TopicID] = *td.Topic
		}
	}
	return names, nil
}

// metadata asks a destination broker for the topics' metadata (every
// topic's without names), bypassing the client's cache.
func (s *saltReader) metadata(ctx context.Context, topics ...string) (*kmsg.MetadataResponse, error) {
	resp, err := leaders.Metadata(ctx, s.cl, topics...)
	if err != nil {
		return nil, fmt.Errorf("read salts: destination %w", err)
	}
	return resp, nil
}
