package link

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/aclsync"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/statestore"
)

// ACL sync (issue 25, item 3; opt-in with acl_sync { enabled = true }):
// every acl_sync_interval, and right after the session starts mirroring or
// adds topics, the source's ACL bindings on the mirrored topics and on the
// consumer groups and share groups the link syncs are brought to the
// destination, as package internal/aclsync decides (its doc says which
// bindings follow, and how WRITE is held back until write is granted).
// The rules beside those:
//
//   - a round runs only while this agent's session of the link is the live
//     one, and checks again right before it changes anything, as config
//     sync does;
//   - every binding the link creates is recorded in the state topic
//     (statestore.ACLKey) before it is created, and only recorded bindings
//     are ever deleted, and their records removed after: a binding the
//     destination held already is someone else's and is left alone. The
//     records are written by the ACL sync's own idempotent producer, not
//     in the session's transactions: a zombie agent's late record can only
//     name a binding that a later round deletes again, and no record is
//     needed for the data's exactly-once guarantees;
//   - the records are read from the state topic when this agent's session
//     becomes the live one (another agent's session may have written
//     some), and kept current by the sync's own writes after;
//   - a failover with grant_write (GrantACLWrite) runs a round that grants
//     WRITE; the bindings it creates are recorded as the failover's, and
//     as long as any is recorded later rounds keep write granted.
//
// Its goroutine (runACLSync) is started and waited for by Link.Run; it
// owns its two clients and closes them before it returns.

// ACLSync is a link's acl_sync block.
type ACLSync struct {
	// Enabled: the link syncs ACLs.
	Enabled bool
	// Write: ALLOW WRITE on topics follows too, before any failover.
	Write bool
}

// ACLSyncStatus is the ACL sync's part of a link's status.
type ACLSyncStatus struct {
	Interval time.Duration `json:"interval"`
	// Write: ALLOW WRITE on topics follows; WriteGrantedBy says why
	// ("config": acl_sync write; "failover": a failover granted it).
	Write          bool   `json:"write"`
	WriteGrantedBy string `json:"write_granted_by,omitempty"`
	// LastRound is when the last round ended; LastSuccess when the last
	// round without an error ended.
	LastRound   time.Time `json:"last_round,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// Idle says why no round runs now. Empty while rounds run.
	Idle string `json:"idle,omitempty"`
	// Managed is how many bindings the link created and holds at the
	// destination after the last round; LeftAlone how many bindings the
	// source calls for that the destination held already, someone
	// else's. Created and Deleted are the last round's changes.
	Managed   int      `json:"managed"`
	LeftAlone int      `json:"left_alone"`
	Created   []string `json:"created,omitempty"`
	Deleted   []string `json:"deleted,omitempty"`
	// Errors are the last round's bindings that could not be created or
	// deleted.
	Errors []string `json:"errors,omitempty"`
	// Skipped are the source's DENY bindings not synced because they
	// would apply to the link's own principal at the destination (it, or
	// User:*): they would refuse the link its writes to the mirror.
	Skipped []string `json:"skipped,omitempty"`
}

// ACLRound is what one ACL sync round did, as a failover reports it.
type ACLRound = failover.ACLGrant

// aclGrant is a failover's request for a round that grants WRITE.
type aclGrant struct {
	reply chan aclGrantResult
}

type aclGrantResult struct {
	round ACLRound
	err   error
}

// Why ACL sync needs each permission (docs/acls.md).
const (
	whyACLSrcDescribe  = "ACL sync reads the source's ACLs (DescribeAcls); or turn it off with acl_sync { enabled = false }"
	whyACLDstDescribe  = "ACL sync reads the destination's ACLs (DescribeAcls), to create only what is missing"
	whyACLDstAlter     = "ACL sync creates and deletes the destination's ACLs (CreateAcls, DeleteAcls); or turn it off with acl_sync { enabled = false }"
	whyACLGroupsListed = "ACL sync lists the source's groups to resolve prefixed and wildcard group ACLs"
	clusterResource    = "Cluster:kafka-cluster"
)

var (
	// errNoAuthorizer: a cluster answered SECURITY_DISABLED.
	errNoAuthorizer = errors.New("the cluster has no authorizer configured (SECURITY_DISABLED): it keeps no ACLs; set authorizer.class.name on its brokers, or turn ACL sync off with acl_sync { enabled = false }")
	// errACLSyncNotLive is why no round runs while this agent's session
	// of the link is not the live one.
	errACLSyncNotLive = errors.New("this agent's session of the link is not the live one (not MIRRORING, or its lease lapsed): ACL sync changes the destination's ACLs only from the session that holds the link")
	// errACLSyncOff: GrantACLWrite without acl_sync.
	errACLSyncOff = errors.New("acl_sync is not enabled for the link: a failover cannot grant WRITE; enable acl_sync, or fail over without grant_write")
)

// aclRoundTimeout bounds one round's requests.
const aclRoundTimeout = time.Minute

// aclSyncer runs a link's ACL sync.
type aclSyncer struct {
	l        *Link
	log      hclog.Logger
	src, dst *kgo.Client
	srcAdm   *kadm.Client
	// recorded are the bindings the link created, as the state topic
	// and this sync's own writes say; nil until read, and read again
	// whenever this agent's session of the link is a new one (session),
	// or was not live (another agent's session may have written).
	recorded map[aclsync.Binding]statestore.ACLValue
	session  *online
	// skipped is the last round's skipped DENY bindings, logged when
	// they change.
	skipped string
}

// runACLSync syncs on the interval, when asked, and for a failover's
// grant, until ctx ends.
func (l *Link) runACLSync(ctx context.Context) {
	as := &aclSyncer{l: l, log: l.log.Named("acls")}
	var err error
	if as.src, err = kgo.NewClient(l.deps.SourceOpts...); err != nil {
		as.fail(fmt.Errorf("ACL sync: source cluster %s client: %w", l.cfg.Source.Name, err))
		return
	}
	defer as.src.Close()
	// The state records go where the session's go: the key partitioner
	// keeps every key in one partition (statestore.Store.Begin).
	dopts := append(slices.Clone(l.deps.DestinationOpts), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if as.dst, err = kgo.NewClient(dopts...); err != nil {
		as.fail(fmt.Errorf("ACL sync: destination cluster %s client: %w", l.cfg.Destination.Name, err))
		return
	}
	defer as.dst.Close()
	as.srcAdm = kadm.NewClient(as.src)
	t := time.NewTicker(l.cfg.Link.ACLSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			as.round(ctx, false) //nolint:errcheck // the status and log carry it
		case <-l.aclNow:
			as.round(ctx, false) //nolint:errcheck // the status and log carry it
		case g := <-l.aclGrants:
			r, err := as.round(ctx, true)
			g.reply <- aclGrantResult{round: r, err: err}
		}
	}
}

// GrantACLWrite runs an ACL sync round that grants WRITE (a failover's
// grant_write) and waits for it: the held-back ALLOW WRITE bindings of the
// mirrored topics are created, recorded as the failover's, and kept by
// later rounds. It fails when acl_sync is off, when this agent's session
// is not the live one, and when the round fails.
func (l *Link) GrantACLWrite(ctx context.Context) (ACLRound, error) {
	if !l.cfg.Link.ACLSync.Enabled {
		return ACLRound{}, errACLSyncOff
	}
	g := aclGrant{reply: make(chan aclGrantResult, 1)}
	select {
	case l.aclGrants <- g:
	case <-ctx.Done():
		return ACLRound{}, ctx.Err()
	}
	select {
	case r := <-g.reply:
		return r.round, r.err
	case <-ctx.Done():
		return ACLRound{}, ctx.Err()
	}
}

// fail records an error that keeps ACL sync from running at all.
func (as *aclSyncer) fail(err error) {
	as.log.Error("ACL sync cannot run", "error", err)
	as.set(func(c *ACLSyncStatus) { c.LastError = err.Error() })
}

// set changes the ACL sync's status, copied so that a Status taken before
// stays as it was.
func (as *aclSyncer) set(fn func(*ACLSyncStatus)) {
	as.l.setStatus(func(s *Status) {
		c := ACLSyncStatus{Interval: as.l.cfg.Link.ACLSyncInterval, Write: as.l.cfg.Link.ACLSync.Write}
		if s.ACLSync != nil {
			c = *s.ACLSync
		}
		fn(&c)
		s.ACLSync = &c
	})
}

// round syncs once; grant asks for WRITE (a failover).
func (as *aclSyncer) round(ctx context.Context, grant bool) (ACLRound, error) {
	if !as.l.syncLive() {
		as.recorded = nil // read again once live: another agent may write
		as.set(func(c *ACLSyncStatus) { c.Idle = errACLSyncNotLive.Error() })
		return ACLRound{}, errACLSyncNotLive
	}
	ctx, cancel := context.WithTimeout(ctx, aclRoundTimeout)
	defer cancel()
	r, errs, err := as.sync(ctx, grant)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return r, err // the link stops
	}
	now := as.l.deps.Now()
	if err != nil {
		as.l.met.add(ACLSyncErrors, 1)
		as.log.Warn("ACL sync round failed", "error", err)
	}
	as.l.met.add(ACLSyncRounds, 1)
	write, by := as.writeGranted(false)
	as.set(func(c *ACLSyncStatus) {
		c.LastRound, c.LastError, c.Idle = now, "", ""
		c.Write, c.WriteGrantedBy = write, by
		c.Managed, c.LeftAlone, c.Created, c.Deleted, c.Errors, c.Skipped = r.Managed, r.LeftAlone, r.Created, r.Deleted, errs, r.Skipped
		if err == nil && len(errs) == 0 {
			c.LastSuccess = now
		}
		if err != nil {
			c.LastError = err.Error()
		}
	})
	if err == nil && len(errs) > 0 {
		err = fmt.Errorf("%d ACL bindings not synced: %s", len(errs), errs[0])
	}
	return r, err
}

// writeGranted reports whether WRITE follows, and why.
func (as *aclSyncer) writeGranted(grant bool) (bool, string) {
	switch {
	case as.l.cfg.Link.ACLSync.Write:
		return true, "config"
	case grant:
		return true, "failover"
	}
	for _, v := range as.recorded {
		if v.Failover {
			return true, "failover"
		}
	}
	return false, ""
}

// sync reads both sides' bindings, creates what is missing and deletes
// what the link created and is no longer called for. errs are the
// bindings that failed; err a failure of the round as a whole.
func (as *aclSyncer) sync(ctx context.Context, grant bool) (r ACLRound, errs []string, err error) {
	r = ACLRound{Created: []string{}, Deleted: []string{}}
	l := as.l
	if o := l.online.Load(); o != as.session {
		as.recorded, as.session = nil, o
	}
	if as.recorded == nil {
		view, err := statestore.ReadView(ctx, l.cfg.Link.StateTopic, l.deps.DestinationOpts)
		if err != nil {
			return r, nil, fmt.Errorf("read the ACLs the link created from state topic %s: %w", l.cfg.Link.StateTopic, err)
		}
		as.recorded = map[aclsync.Binding]statestore.ACLValue{}
		for k, v := range view.ACLs {
			if k.LinkName == l.cfg.Link.Name {
				as.recorded[bindingOf(k)] = v
			}
		}
	}
	topics, err := l.mirroredTopics(ctx)
	if err != nil {
		return r, nil, err
	}
	src, err := describeACLs(ctx, as.src, l.acl.src, whyACLSrcDescribe, kmsg.ACLResourcePatternTypeAny)
	if err != nil {
		return r, nil, err
	}
	resources := make([]aclsync.Resource, 0, len(topics))
	for _, m := range topics {
		resources = append(resources, aclsync.Resource{Type: kmsg.ACLResourceTypeTopic, Source: m.src, Destination: m.dst})
	}
	groups, err := as.groups(ctx, src)
	if err != nil {
		return r, nil, err
	}
	for _, g := range groups {
		resources = append(resources, aclsync.Resource{Type: kmsg.ACLResourceTypeGroup, Source: g, Destination: g})
	}
	sources := make(map[aclsync.Binding]string, len(as.recorded))
	for b, v := range as.recorded {
		sources[b] = v.SourceResource
	}
	resources = aclsync.Scope(resources, sources, func(t kmsg.ACLResourceType, source string) bool {
		if t == kmsg.ACLResourceTypeTopic {
			return l.cfg.Link.Selects(source)
		}
		return as.selectsGroup(source)
	})
	dst, err := describeACLs(ctx, as.dst, l.acl.dst, whyACLDstDescribe, kmsg.ACLResourcePatternTypeLiteral)
	if err != nil {
		return r, nil, err
	}
	held := map[aclsync.Binding]bool{}
	for _, b := range dst {
		held[b] = true
	}
	write, _ := as.writeGranted(grant)
	wants, skipped := aclsync.Plan(src, resources, l.cfg.Destination.Principal)
	r.Skipped = r.Skipped[:0]
	for _, w := range skipped {
		r.Skipped = append(r.Skipped, w.String())
	}
	if s := strings.Join(r.Skipped, "; "); s != as.skipped {
		as.skipped = s
		if s != "" {
			as.log.Warn("ACL sync: DENY bindings of the source not synced: they would apply to the link's own principal at the destination and refuse it its writes to the mirror", "principal", l.cfg.Destination.Principal, "skipped", s)
		}
	}
	desired := aclsync.Desired(wants, write)
	ch := aclsync.Compare(desired, held, setOf(as.recorded))
	r.Managed, r.LeftAlone = ch.InPlace, len(ch.LeftAlone)
	if len(ch.Create) == 0 && len(ch.Delete) == 0 {
		return r, nil, nil
	}
	if !l.syncLive() {
		return r, nil, errACLSyncNotLive
	}
	byFailover := grant || !l.cfg.Link.ACLSync.Write && write
	created, cerrs, err := as.create(ctx, ch.Create, byFailover)
	errs = append(errs, cerrs...)
	for _, w := range created {
		r.Created = append(r.Created, w.String())
		as.log.Info("ACL created at the destination", "acl", w.String(), "source_acl", w.From.String())
	}
	r.Managed += len(created)
	l.met.add(ACLsCreated, int64(len(created)))
	if err != nil {
		return r, errs, err
	}
	deleted, derrs, err := as.remove(ctx, ch.Delete)
	errs = append(errs, derrs...)
	for _, b := range deleted {
		r.Deleted = append(r.Deleted, b.String())
		as.log.Info("ACL the link had created deleted at the destination: the source's ACLs no longer call for it (deleted at the source, its topic or group no longer synced, or split ALLOW ALL replaced once WRITE was granted)", "acl", b.String())
	}
	l.met.add(ACLsDeleted, int64(len(deleted)))
	if len(errs) > 0 {
		l.met.add(ACLSyncErrors, int64(len(errs)))
	}
	return r, errs, err
}

// groups are the source groups whose bindings follow: those the link's
// groups and share_groups blocks select, listed at the source, and those
// a LITERAL group binding names.
func (as *aclSyncer) groups(ctx context.Context, src []aclsync.Binding) ([]string, error) {
	cfg := &as.l.cfg.Link
	if cfg.Groups == nil && cfg.ShareGroups == nil {
		return nil, nil
	}
	selects := as.selectsGroup
	names := map[string]bool{}
	for _, b := range src {
		if b.Resource == kmsg.ACLResourceTypeGroup && b.Pattern == kmsg.ACLResourcePatternTypeLiteral && b.Name != "*" && selects(b.Name) {
			names[b.Name] = true
		}
	}
	listed, err := as.srcAdm.ListGroups(ctx)
	if err != nil && !errors.Is(err, kerr.UnsupportedVersion) {
		if access.IsRefusal(err) {
			return nil, as.l.acl.src.Refused(kmsg.ACLOperationDescribe, clusterResource, whyACLGroupsListed, err)
		}
		return nil, fmt.Errorf("list the groups of source cluster %s: %w", as.l.cfg.Source.Name, err)
	}
	for _, g := range listed.Groups() {
		if selects(g) {
			names[g] = true
		}
	}
	return slices.Sorted(maps.Keys(names)), nil
}

// selectsGroup reports whether the link syncs group g (its groups or
// share_groups block selects it).
func (as *aclSyncer) selectsGroup(g string) bool {
	cfg := &as.l.cfg.Link
	return cfg.Groups != nil && cfg.Groups.Selects(g) || cfg.ShareGroups != nil && cfg.ShareGroups.Selects(g)
}

// create records each binding as the link's, then creates them; it
// returns those created and the errors of the others.
func (as *aclSyncer) create(ctx context.Context, ws []aclsync.Want, failover bool) (created []aclsync.Want, errs []string, err error) {
	if len(ws) == 0 {
		return nil, nil, nil
	}
	now := as.l.deps.Now().UnixMilli()
	recs := make([]statestore.Record, len(ws))
	for i, w := range ws {
		v := statestore.ACLValue{SourceResource: w.Source, Failover: failover && w.Kind == aclsync.WriteGranted, TimestampMs: now}
		recs[i] = statestore.Record{Key: as.key(w.Binding), Value: v}
	}
	if err := as.record(ctx, recs); err != nil {
		return nil, nil, err
	}
	for i, w := range ws {
		as.recorded[w.Binding] = recs[i].Value.(statestore.ACLValue)
	}
	req := kmsg.NewPtrCreateACLsRequest()
	for _, w := range ws {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = w.Resource, w.Name, w.Pattern
		c.Principal, c.Host, c.Operation, c.PermissionType = w.Principal, w.Host, w.Operation, w.Permission
		req.Creations = append(req.Creations, c)
	}
	resp, err := req.RequestWith(ctx, as.dst)
	if err == nil && len(resp.Results) != len(ws) {
		err = fmt.Errorf("destination cluster %s answered %d results to %d ACL creations", as.l.cfg.Destination.Name, len(resp.Results), len(ws))
	}
	if err != nil {
		// Nothing created for certain: the records go again (a
		// binding created all the same is created again next round,
		// which Kafka answers as a success, and recorded again).
		return nil, nil, errors.Join(as.explainDst(err), as.unrecord(ctx, ws))
	}
	var refused []aclsync.Want
	for i, res := range resp.Results {
		if e := kerr.ErrorForCode(res.ErrorCode); e != nil {
			if access.IsRefusal(e) || errors.Is(e, kerr.SecurityDisabled) {
				err = as.explainDst(e)
			} else {
				errs = append(errs, fmt.Sprintf("create %s at destination cluster %s: %v%s", ws[i].Binding, as.l.cfg.Destination.Name, e, detail(deref(res.ErrorMessage))))
			}
			refused = append(refused, ws[i])
			continue
		}
		created = append(created, ws[i])
	}
	return created, errs, errors.Join(err, as.unrecord(ctx, refused))
}

// unrecord removes the records of bindings that were not created.
func (as *aclSyncer) unrecord(ctx context.Context, ws []aclsync.Want) error {
	tombs := make([]statestore.Record, 0, len(ws))
	for _, w := range ws {
		tombs = append(tombs, statestore.Record{Key: as.key(w.Binding)})
	}
	if err := as.record(ctx, tombs); err != nil {
		return err
	}
	for _, w := range ws {
		delete(as.recorded, w.Binding)
	}
	return nil
}

// remove deletes bindings the link created, then their records; it
// returns those deleted and the errors of the others.
func (as *aclSyncer) remove(ctx context.Context, bs []aclsync.Binding) (deleted []aclsync.Binding, errs []string, err error) {
	if len(bs) == 0 {
		return nil, nil, nil
	}
	req := kmsg.NewPtrDeleteACLsRequest()
	for _, b := range bs {
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourceName, f.ResourcePatternType = b.Resource, new(b.Name), b.Pattern
		f.Principal, f.Host, f.Operation, f.PermissionType = new(b.Principal), new(b.Host), b.Operation, b.Permission
		req.Filters = append(req.Filters, f)
	}
	resp, err := req.RequestWith(ctx, as.dst)
	if err != nil {
		return nil, nil, as.explainDst(err)
	}
	if len(resp.Results) != len(bs) {
		return nil, nil, fmt.Errorf("destination cluster %s answered %d results to %d ACL deletions", as.l.cfg.Destination.Name, len(resp.Results), len(bs))
	}
	var tombs []statestore.Record
	for i, res := range resp.Results {
		if e := kerr.ErrorForCode(res.ErrorCode); e != nil {
			if access.IsRefusal(e) || errors.Is(e, kerr.SecurityDisabled) {
				return nil, errs, as.explainDst(e)
			}
			errs = append(errs, fmt.Sprintf("delete %s at destination cluster %s: %v%s", bs[i], as.l.cfg.Destination.Name, e, detail(deref(res.ErrorMessage))))
			continue
		}
		deleted = append(deleted, bs[i])
		tombs = append(tombs, statestore.Record{Key: as.key(bs[i])})
	}
	if err := as.record(ctx, tombs); err != nil {
		return nil, errs, err
	}
	for _, b := range deleted {
		delete(as.recorded, b)
	}
	return deleted, errs, nil
}

// record writes state records and waits until the state topic holds them.
func (as *aclSyncer) record(ctx context.Context, recs []statestore.Record) error {
	if len(recs) == 0 {
		return nil
	}
	krs := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		k, err := statestore.EncodeKey(r.Key)
		if err != nil {
			return err
		}
		krs = append(krs, &kgo.Record{Topic: as.l.cfg.Link.StateTopic, Key: k, Value: statestore.EncodeValue(r.Value)})
	}
	if err := as.dst.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		if access.IsRefusal(err) {
			return as.l.acl.dst.RefusedTopic(kmsg.ACLOperationWrite, as.l.cfg.Link.StateTopic, "ACL sync records in the state topic which ACLs the link created", err)
		}
		return fmt.Errorf("record ACLs in state topic %s: %w", as.l.cfg.Link.StateTopic, err)
	}
	return nil
}

// key is the state record key of a binding the link created.
func (as *aclSyncer) key(b aclsync.Binding) statestore.ACLKey {
	return statestore.ACLKey{LinkName: as.l.cfg.Link.Name, ResourceType: int8(b.Resource), ResourceName: b.Name, PatternType: int8(b.Pattern),
		Principal: b.Principal, Host: b.Host, Operation: int8(b.Operation), Permission: int8(b.Permission)}
}

// explainDst explains a destination's refusal of CreateAcls or DeleteAcls.
func (as *aclSyncer) explainDst(err error) error {
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		return fmt.Errorf("destination cluster %s: %w", as.l.cfg.Destination.Name, errNoAuthorizer)
	case access.IsRefusal(err):
		return as.l.acl.dst.Refused(kmsg.ACLOperationAlter, clusterResource, whyACLDstAlter, err)
	}
	return fmt.Errorf("ACL sync at destination cluster %s: %w", as.l.cfg.Destination.Name, err)
}

// bindingOf is the binding a state record key names.
func bindingOf(k statestore.ACLKey) aclsync.Binding {
	return aclsync.Binding{Resource: kmsg.ACLResourceType(k.ResourceType), Name: k.ResourceName, Pattern: kmsg.ACLResourcePatternType(k.PatternType),
		Principal: k.Principal, Host: k.Host, Operation: kmsg.ACLOperation(k.Operation), Permission: kmsg.ACLPermissionType(k.Permission)}
}

func setOf(m map[aclsync.Binding]statestore.ACLValue) map[aclsync.Binding]bool {
	s := make(map[aclsync.Binding]bool, len(m))
	for b := range m {
		s[b] = true
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// describeACLs reads a cluster's bindings on topics and groups of the
// pattern type given (ANY: every stored pattern; LITERAL: literal ones).
func describeACLs(ctx context.Context, cl *kgo.Client, c access.Cluster, why string, pattern kmsg.ACLResourcePatternType) ([]aclsync.Binding, error) {
	var out []aclsync.Binding
	for _, rt := range []kmsg.ACLResourceType{kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup} {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourcePatternType = rt, pattern
		req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			if err = kerr.ErrorForCode(resp.ErrorCode); err != nil {
				err = fmt.Errorf("%w%s", err, detail(deref(resp.ErrorMessage)))
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, kerr.SecurityDisabled):
			return nil, fmt.Errorf("%s cluster %s: %w", c.Role, c.Name, errNoAuthorizer)
		case access.IsRefusal(err):
			return nil, c.Refused(kmsg.ACLOperationDescribe, clusterResource, why, err)
		default:
			return nil, fmt.Errorf("describe the ACLs of %s cluster %s: %w", c.Role, c.Name, err)
		}
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				out = append(out, aclsync.Binding{Resource: r.ResourceType, Name: r.ResourceName, Pattern: r.ResourcePatternType,
					Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.PermissionType})
			}
		}
	}
	return out, nil
}
