package natsbus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// natsTasks is a bus.TaskStore in a JetStream key-value bucket: an entry per
// task, its revision the entry's, which the stream numbers and checks. A
// value is an envelope (see taskValue) holding the record and its expiry,
// which Get and Update check by this process's clock; the broker drops
// the entry a little after, by a TTL set on every write of it.
type natsTasks struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	stream  string // the bucket's stream, which every write expects
	subject string // "$KV.<bucket>.", before a key
	log     *slog.Logger
	closed  chan struct{}
	once    sync.Once
	// seen holds the expiry of the revision of each task this store last
	// read or wrote, so that an Update at that revision, which must keep
	// the expiry, need not read the entry again to learn it: a change
	// costs the server's Get and the write, not a read besides. The
	// expiry of an entry's revision never changes, so what is here is
	// never wrong, only missing.
	mu   sync.Mutex
	seen map[string]seenRev
}

// seenRev is a revision of a task and the expiry its entry holds.
type seenRev struct {
	rev uint64
	exp time.Time
}

// natsSeenMax bounds natsTasks.seen, to some hundreds of KiB (an id is
// at most 256 bytes): room for the tasks one replica changes at a time.
// An Update of a task forgotten meanwhile reads it first, as it would
// without the map.
const natsSeenMax = 1024

// remember records that the entry of task id at revision rev expires at
// exp. A full map loses an entry, any one: the tasks in hand are the ones
// read again soonest, and come back.
func (s *natsTasks) remember(id string, rev uint64, exp time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[id]; !ok && len(s.seen) >= natsSeenMax {
		for other := range s.seen {
			delete(s.seen, other)
			break
		}
	}
	s.seen[id] = seenRev{rev, exp}
}

// forget drops what remember recorded of task id, which is gone.
func (s *natsTasks) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, id)
}

// expiryOf returns the expiry of task id's entry at revision rev, if this
// store last read or wrote that revision.
func (s *natsTasks) expiryOf(id string, rev uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.seen[id]
	return r.exp, ok && r.rev == rev
}

// tasksBucket names the bucket of a subject's tasks: the state's bucket
// name with "_tasks" after it. The state's names hold a '_' only before
// "5F" or "2E" (see bucketName), so no state bucket is named so, and two
// subjects never share a tasks bucket.
func tasksBucket(subject string) (string, error) {
	b, err := bucketName(subject)
	if err != nil {
		return "", err
	}
	return b + "_tasks", nil
}

// natsMarkerTTL is how long the bucket keeps the marker the broker leaves
// where it dropped an expired entry: the least it allows, since nothing
// here watches for them. Having markers at all is what lets a bucket's
// entries carry a TTL of their own.
const natsMarkerTTL = time.Second

// natsTTLGrace is added to the TTL each write sets: the broker counts
// whole seconds, by its own clock, and must not drop an entry before the
// replicas' clocks say it has expired.
const natsTTLGrace = time.Second

// natsMaxTTL bounds the TTL of an entry. A task set to expire later still
// expires then, by its envelope, but the broker keeps it until deleted.
const natsMaxTTL = 100 * 365 * 24 * time.Hour

// OpenTasks connects to the task store of the replicas that Dial joins
// with the same URL: the JetStream key-value bucket "<state bucket>_tasks"
// (see OpenState), default "tidings_tasks". The server needs JetStream
// with per-key TTLs (NATS 2.11 or later).
//
// Compare-and-swap is the stream's: it takes a write only if the entry's
// revision (its sequence in the stream) is still the one read, and
// revisions grow across the bucket. Every Get is answered by the
// stream's leader, which acknowledged the write, and which, newly
// elected, answers only once it holds every write its predecessors
// acknowledged: the bucket allows no direct gets, which any replica or
// mirror answers from what it has applied, perhaps not yet a write the
// leader has acknowledged.
//
// The expiry is stored with the record, and Get and Update report
// bus.ErrNoTask once this process's clock passes it; every write of an
// entry also gives it a TTL of what is left, rounded up to the second,
// plus a second, so that the broker drops it by itself shortly after (it
// leaves a marker for a second). Create over a task that has expired but
// is not yet dropped replaces it.
//
// A bucket that does not exist is created with file storage, the
// replicas of the state's bucket (replicas=N, or by default as many as
// the cluster has servers, up to 3; see OpenState, which also says what
// is done with a bucket found with fewer), values of at most a record
// and its framing, per-key TTLs and no direct gets; create it beforehand
// to choose otherwise, with a limit marker TTL and allow_direct false on
// its stream (the nats tool and jetstream.CreateKeyValue allow direct
// gets: update the stream after) — it is used as found, one without
// per-key TTLs or that allows direct gets is refused, and a bucket TTL
// (max age) set on it drops tasks that long after their last write,
// whatever their expiry. A bucket scaled to more replicas later keeps
// reading through its leader; one whose leader is lost answers once its
// other replicas have elected another (a few seconds), and the client
// moves to another server of the cluster by itself.
//
// OpenTasks fails once ctx ends if the store cannot be reached (if ctx
// has no deadline: within 5s for the connection, and 30s for JetStream
// to answer, which a cluster still electing its leaders may not do at
// once); later losses are reported by the methods' errors, within their
// context's deadline, and the connection is regained on its own. A
// write that no stream hears, as while the bucket's stream elects a
// leader, is written again until it is heard or its context ends (5s
// without a deadline). Of the options, WithLogger and WithBackoff apply.
func OpenTasks(ctx context.Context, rawURL string, opts ...bus.Option) (bus.TaskStore, error) {
	ep, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	bucket, err := tasksBucket(ep.subject)
	if err != nil {
		return nil, err
	}
	cfg := settings(opts)
	s := &natsTasks{stream: "KV_" + bucket, subject: "$KV." + bucket + ".", seen: make(map[string]seenRev), log: cfg.Logger}
	if s.nc, s.closed, err = ep.dial(ctx, cfg, "tasks"); err != nil {
		return nil, err
	}
	p := ep.plan(s.nc)
	if err := openPatiently(ctx, cfg, askWait, func(ctx context.Context) error {
		return s.open(ctx, bucket, p, cfg.Logger)
	}); err != nil {
		s.Close()
		return nil, fmt.Errorf("natsbus: tasks at %s: %w", ep.redacted, err)
	}
	return s, nil
}

// open opens the bucket, creating it with p's replicas if it is not
// there, and checks that one found there can drop its entries by
// themselves, reads every entry through its stream's leader and has the
// replicas p asks.
func (s *natsTasks) open(ctx context.Context, bucket string, p replicaPlan, log *slog.Logger) error {
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	s.kv, err = s.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Made as a stream, since a KeyValueConfig cannot say no to direct
		// gets. Another replica may make it first: the same config is
		// taken as made, another is opened and checked as one found.
		if err := checkTTLs(ctx, s.js); err != nil {
			return fmt.Errorf("key-value bucket %q: %w", bucket, err)
		}
		_, err = s.js.CreateStream(ctx, tasksStream(bucket, p.n))
		if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s.kv, err = s.js.KeyValue(ctx, bucket)
		} else {
			return p.refused(bucket, err)
		}
	}
	if err != nil {
		return fmt.Errorf("key-value bucket %q: %w", bucket, err)
	}
	st, err := s.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("key-value bucket %q: %w", bucket, err)
	}
	if st.LimitMarkerTTL() <= 0 {
		return fmt.Errorf("key-value bucket %q has no per-key TTL, and expired tasks would stay in it for ever: "+
			"create it with a limit marker TTL (nats kv add --marker-ttl), or remove it and let it be created", bucket)
	}
	if st.Config().Mirror != nil {
		return fmt.Errorf("key-value bucket %q is a mirror, which takes no writes", bucket)
	}
	// The client reads by direct get if the stream allowed them when the
	// handle was made (the status is read a moment later), and any
	// replica or mirror answers those from what it has applied: perhaps
	// not yet a task just created, or an older revision of it.
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); !ok || bs.StreamInfo().Config.AllowDirect {
		return fmt.Errorf("key-value bucket %q allows direct gets, which a replica or a mirror may answer "+
			"before it has a task just written: update its stream %q with allow_direct false, "+
			"or remove it and let it be created", bucket, s.stream)
	}
	if have, ok := replicasOf(st); ok {
		return p.check(bucket, have, log)
	}
	return nil
}

// checkTTLs fails unless the server gives streams per-key TTLs (JetStream
// API level 1, NATS 2.11). An older one would ignore the stream's TTL
// settings, and make a bucket that open then refuses.
func checkTTLs(ctx context.Context, js jetstream.JetStream) error {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return err
	}
	if info.API.Level < 1 {
		return fmt.Errorf("the NATS server has no per-key TTLs (JetStream API level %d), which tasks need: NATS 2.11 or later has them", info.API.Level)
	}
	return nil
}

// tasksStream is the stream of a tasks bucket OpenTasks creates, with
// the replicas given: what jetstream.CreateKeyValue makes of a bucket
// with file storage, those replicas, values of at most a record and its
// framing and per-key TTLs, but for direct gets, which CreateKeyValue
// always allows. A direct get may be answered by any replica, or a
// mirror, from what it has applied, which may not yet be a write the
// stream's leader has acknowledged; without them every Get is the
// leader's (see OpenTasks), as Create's and Update's writes are.
// TestNATSTasksBucketConfig holds the two to the same shape.
func tasksStream(bucket string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        "KV_" + bucket,
		Description: "tidings: the tasks of a server's replicas",
		Subjects:    []string{"$KV." + bucket + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		// The latest value of each key, and a full stream refuses a write
		// rather than drop other tasks.
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardNew,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxConsumers:      -1,
		MaxMsgSize:        bus.MaxTaskRecord + 4<<10, // the record and its framing, see bus.MaxTaskRecord
		Duplicates:        2 * time.Minute,
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       false,
		// Per-key TTLs, and the markers they leave where they drop a key.
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: natsMarkerTTL,
	}
}

// natsTaskKey is the key of a task in a bucket. Keys allow '.' only
// between tokens and no '~', so those two are written "=2E" and "=7E";
// ids hold no '=', so two ids never share a key.
func natsTaskKey(id string) string {
	if !strings.ContainsAny(id, ".~") {
		return id
	}
	return strings.NewReplacer(".", "=2E", "~", "=7E").Replace(id)
}

// natsTTL is the TTL a write of an entry expiring at exp sets, at now:
// what is left of it, in whole seconds rounded up, and natsTTLGrace. No
// TTL (ok false) past natsMaxTTL.
func natsTTL(exp, now time.Time) (ttl time.Duration, ok bool) {
	left := exp.Sub(now)
	if left > natsMaxTTL {
		return 0, false
	}
	left = max(left, 0)
	if r := left % time.Second; r != 0 {
		left += time.Second - r
	}
	return left + natsTTLGrace, true
}

// ttlOpts are the publish options of a write of an entry expiring at exp.
func ttlOpts(exp time.Time) []jetstream.PublishOpt {
	if ttl, ok := natsTTL(exp, time.Now()); ok {
		return []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	}
	return nil
}

func (s *natsTasks) Create(ctx context.Context, id string, rec []byte, expires time.Time) error {
	if err := brokerkit.CheckTask("create", id, rec); err != nil {
		return err
	}
	key := natsTaskKey(id)
	exp := time.UnixMilli(brokerkit.CeilMilli(expires))
	val := encodeTaskValue(exp, rec)
	var opts []jetstream.KVCreateOpt
	if ttl, ok := natsTTL(exp, time.Now()); ok {
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	// Twice at most: a task found expired may be dropped before it is read.
	for range 2 {
		var rev uint64
		err := untilHeard(ctx, s.log, func(ctx context.Context) (err error) {
			rev, err = s.kv.Create(ctx, key, val, opts...)
			return err
		})
		if err == nil {
			s.remember(id, rev, exp)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return s.fail("create", id, err)
		}
		// The key is taken, perhaps by a task that has expired and that
		// the broker is yet to drop: that one is replaced, in its
		// revision's place.
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // dropped meanwhile: the id is free
		}
		if err != nil {
			return s.fail("create", id, err)
		}
		if old, _, err := decodeTaskValue(e.Value()); err != nil || time.Now().Before(old) {
			return bus.ErrTaskExists
		}
		rev, err = s.put(ctx, key, val, e.Revision(), exp)
		if err != nil {
			if errors.Is(err, errRevision) {
				return bus.ErrTaskExists // another replica replaced it first
			}
			return s.fail("create", id, err)
		}
		s.remember(id, rev, exp)
		return nil
	}
	return bus.ErrTaskExists
}

// errRevision is a write the stream refused because the entry's revision
// was not the one expected.
var errRevision = errors.New("the revision is not the latest")

// put writes val under key if the entry's revision is still rev, with the
// TTL of an entry expiring at exp, and returns the new revision. It is
// what KeyValue.Update does, but for the TTL, which Update drops: the
// stream checks the revision, and the write is refused, as errRevision,
// if another came first.
func (s *natsTasks) put(ctx context.Context, key string, val []byte, rev uint64, exp time.Time) (uint64, error) {
	opts := append(ttlOpts(exp), jetstream.WithExpectStream(s.stream), jetstream.WithExpectLastSequencePerSubject(rev))
	var ack *jetstream.PubAck
	err := untilHeard(ctx, s.log, func(ctx context.Context) (err error) {
		ack, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: s.subject + key, Header: nats.Header{}, Data: val}, opts...)
		return err
	})
	if err != nil {
		var ae *jetstream.APIError
		if errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, errRevision
		}
		return 0, err
	}
	return ack.Sequence, nil
}

// get reads the live entry of task id: its record, revision and expiry,
// which it remembers.
func (s *natsTasks) get(ctx context.Context, op, id string) (rec []byte, rev uint64, exp time.Time, err error) {
	e, err := s.kv.Get(ctx, natsTaskKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.forget(id)
		return nil, 0, time.Time{}, bus.ErrNoTask
	}
	if err != nil {
		return nil, 0, time.Time{}, s.fail(op, id, err)
	}
	exp, rec, err = decodeTaskValue(e.Value())
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("natsbus: %s task %q in bucket %q: %w", op, id, s.kv.Bucket(), err)
	}
	if !time.Now().Before(exp) {
		s.forget(id)
		return nil, 0, time.Time{}, bus.ErrNoTask
	}
	s.remember(id, e.Revision(), exp)
	return rec, e.Revision(), exp, nil
}

func (s *natsTasks) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	if err := brokerkit.CheckTaskID(id); err != nil {
		return nil, 0, err
	}
	rec, rev, _, err := s.get(ctx, "get", id)
	return rec, rev, err
}

// Update must keep the entry's expiry, and report a record that has
// expired as bus.ErrNoTask, not a conflict. It knows the expiry without a
// read when rev is the revision this store last read or wrote, as it is
// when a server reads a task and then changes it; else it reads the
// entry first, as the server's Get did, and a revision other than rev is
// a conflict at once. The write then expects rev, so nothing written
// since is overwritten; when it is refused, a read tells a conflict from
// an entry dropped as it expired.
func (s *natsTasks) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	if err := brokerkit.CheckTask("update", id, rec); err != nil {
		return 0, err
	}
	exp, ok := s.expiryOf(id, rev)
	if !ok {
		_, cur, e, err := s.get(ctx, "update", id)
		if err != nil {
			return 0, err
		}
		if cur != rev {
			return 0, bus.ErrTaskConflict
		}
		exp = e
	} else if !time.Now().Before(exp) {
		s.forget(id)
		return 0, bus.ErrNoTask
	}
	next, err := s.put(ctx, natsTaskKey(id), encodeTaskValue(exp, rec), rev, exp)
	if errors.Is(err, errRevision) {
		// Changed since read, or dropped as it expired.
		if _, _, _, err := s.get(ctx, "update", id); errors.Is(err, bus.ErrNoTask) {
			return 0, bus.ErrNoTask
		}
		return 0, bus.ErrTaskConflict
	}
	if err != nil {
		return 0, s.fail("update", id, err)
	}
	s.remember(id, next, exp)
	return next, nil
}

// fail wraps the error of a call with what it was, and says when the
// client is not connected, which the client's own errors (a full
// outbound buffer, a deadline) leave to be guessed.
func (s *natsTasks) fail(op, id string, err error) error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("natsbus: %s task %q in bucket %q: not connected to NATS (%v): %w", op, id, s.kv.Bucket(), st, err)
	}
	return fmt.Errorf("natsbus: %s task %q in bucket %q: %w", op, id, s.kv.Bucket(), err)
}

func (s *natsTasks) Close() error {
	s.once.Do(func() {
		s.nc.Close()
		<-s.closed // the client's callbacks have run; its goroutines are ending
	})
	return nil
}

// A task's value in a bucket is an envelope: a version byte (1), the
// expiry in Unix milliseconds (8 bytes, big-endian), then the record. The
// expiry travels with the record so that every replica reads the same
// one, and an Update keeps it.
const (
	taskValueVersion = 1
	taskValueHeader  = 9
)

// encodeTaskValue wraps rec, expiring at exp, in an envelope.
func encodeTaskValue(exp time.Time, rec []byte) []byte {
	b := make([]byte, taskValueHeader, taskValueHeader+len(rec))
	b[0] = taskValueVersion
	binary.BigEndian.PutUint64(b[1:], uint64(exp.UnixMilli()))
	return append(b, rec...)
}

// decodeTaskValue opens an envelope. The record shares b's memory. A
// value of another shape is an error, for Get to report rather than guess
// at: someone else's entry, or one of a later version.
func decodeTaskValue(b []byte) (exp time.Time, rec []byte, err error) {
	switch {
	case len(b) < taskValueHeader:
		return time.Time{}, nil, fmt.Errorf("the value (%d bytes) is not a task: too short", len(b))
	case b[0] != taskValueVersion:
		return time.Time{}, nil, fmt.Errorf("the value is not a task of version %d (it starts with byte %d)", taskValueVersion, b[0])
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[1:]))), b[taskValueHeader:], nil
}
