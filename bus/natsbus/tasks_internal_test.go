package natsbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
	"tidings/internal/testrig/testbroker"
)

// FuzzTaskValue: any bytes in a bucket, ours or not, decode to a task or
// to an error, never a panic; what decodes encodes back to the same bytes.
func FuzzTaskValue(f *testing.F) {
	f.Add(encodeTaskValue(time.UnixMilli(1700000000123), []byte(`{"status":"working"}`)))
	f.Add(encodeTaskValue(time.UnixMilli(-1), nil))
	f.Add([]byte{})
	f.Add([]byte{taskValueVersion})
	f.Add([]byte("1"))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		exp, rec, err := decodeTaskValue(b)
		if err != nil {
			if !strings.Contains(err.Error(), "not a task") {
				t.Fatalf("unclear error %v", err)
			}
			return
		}
		if again := encodeTaskValue(exp, rec); !bytes.Equal(again, b) {
			t.Fatalf("decoded %x to %v and %q, which encode to %x", b, exp, rec, again)
		}
	})
}

// TestTaskKeysAndBuckets: every id a store accepts is a valid NATS key,
// no two share one, and a subject's tasks bucket is neither another
// subject's nor any state bucket.
func TestTaskKeysAndBuckets(t *testing.T) {
	valid := regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`) // a key of one token
	keys := map[string]string{}
	for _, id := range []string{".", "..", "a.b", "a~b", "~", "a_2Eb", "a_7Eb", "a=2Eb", "a-b", "A-z_0.9~", "abc"} {
		if brokerkit.BadTaskID(id) != "" {
			continue // "a=2Eb" is refused before it is a key
		}
		k := natsTaskKey(id)
		if !valid.MatchString(k) {
			t.Errorf("id %q has key %q, which NATS refuses", id, k)
		}
		if other, ok := keys[k]; ok {
			t.Errorf("ids %q and %q share key %q", other, id, k)
		}
		keys[k] = id
	}
	if natsTaskKey("abc") != "abc" {
		t.Errorf("a plain id is not its own key")
	}
	buckets := map[string]string{}
	for _, subject := range []string{"a.b", "a_b", "a_tasks", "a", "tidings", "a-b", "a.tasks"} {
		state, err := bucketName(subject)
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := tasksBucket(subject)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{state, tasks} {
			if other, ok := buckets[b]; ok {
				t.Errorf("%q and %q name bucket %q", other, subject, b)
			}
			buckets[b] = subject
		}
	}
}

// TestNATSTTL: the TTL of a write never ends before the expiry, counts
// whole seconds, and is left out for an expiry beyond any TTL.
func TestNATSTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		left time.Duration
		want time.Duration
	}{
		{-time.Hour, natsTTLGrace},
		{0, natsTTLGrace},
		{time.Millisecond, time.Second + natsTTLGrace},
		{time.Second, time.Second + natsTTLGrace},
		{1500 * time.Millisecond, 2*time.Second + natsTTLGrace},
		{time.Hour, time.Hour + natsTTLGrace},
	} {
		if got, ok := natsTTL(now.Add(c.left), now); !ok || got != c.want {
			t.Errorf("%v left: a TTL of %v (%v), want %v", c.left, got, ok, c.want)
		}
	}
	if got, ok := natsTTL(now.Add(natsMaxTTL+time.Second), now); ok {
		t.Errorf("an expiry beyond the largest TTL has TTL %v", got)
	}
}

// openTasksAt opens the store at url for an internal test.
func openTasksAt(t *testing.T, url string) bus.TaskStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	s, err := OpenTasks(ctx, url, quiet()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestNATSTasksDropped: the broker drops an entry by itself once its task
// has expired, whether or not it was updated since it was created — an
// update writes the entry anew, and must give it the TTL again.
func TestNATSTasksDropped(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	s := openTasksAt(t, br.URL()).(*natsTasks)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	exp := time.Now().Add(time.Second)
	for _, id := range []string{"created", "updated"} {
		if err := s.Create(ctx, id, []byte("v1"), exp); err != nil {
			t.Fatal(err)
		}
	}
	_, rev, err := s.Get(ctx, "updated")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "updated", []byte("v2"), rev); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"created", "updated"} {
		testbroker.WaitFor(t, "the broker to drop "+id, func() bool {
			_, err := s.kv.Get(ctx, natsTaskKey(id))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatal(err)
			}
			return err != nil
		})
	}
	if time.Now().Before(exp) {
		t.Fatalf("the broker dropped the tasks before they expired")
	}
}

// TestNATSTasksBucketWithoutTTL: a tasks bucket found without per-key
// TTLs, where expired tasks would stay for ever, is refused.
func TestNATSTasksBucketWithoutTTL(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	js := jetStreamAt(t, br.URL())
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	bucket, err := tasksBucket("tidings.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenTasks(ctx, br.URL(), quiet()...)
	if err == nil {
		s.Close()
		t.Fatal("opened a bucket without per-key TTLs")
	}
	if !strings.Contains(err.Error(), "TTL") {
		t.Errorf("the error does not say what is wrong: %v", err)
	}
}

// jetStreamAt connects a client to the NATS server at url, for a test to
// set up or look at buckets behind the store's back.
func jetStreamAt(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(strings.TrimSuffix(url, "/tidings.test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestNATSTasksBucketConfig: the bucket OpenTasks creates is the one
// jetstream.CreateKeyValue would for its settings, but that it allows no
// direct gets, which a follower could answer before it has a write.
func TestNATSTasksBucketConfig(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	s := openTasksAt(t, br.URL()).(*natsTasks)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	js := jetStreamAt(t, br.URL())
	st, err := js.Stream(ctx, s.stream)
	if err != nil {
		t.Fatal(err)
	}
	got := st.CachedInfo().Config
	if got.AllowDirect || got.MirrorDirect {
		t.Errorf("the bucket allows direct gets (allow_direct %v, mirror_direct %v)", got.AllowDirect, got.MirrorDirect)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "reference",
		Description:    got.Description,
		MaxValueSize:   bus.MaxTaskRecord + 4<<10,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: natsMarkerTTL,
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	want := ref.CachedInfo().Config
	want.Name, want.Subjects, want.AllowDirect = got.Name, got.Subjects, false
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the bucket's stream is\n%+v\nnot, as a key-value bucket's but for direct gets,\n%+v", got, want)
	}
	if want := []string{"$KV." + kv.Bucket() + ".>"}; !reflect.DeepEqual(ref.CachedInfo().Config.Subjects, want) {
		t.Errorf("a key-value bucket takes %q, not %q", ref.CachedInfo().Config.Subjects, want)
	}
}

// TestNATSTasksBucketWithDirectGets: a tasks bucket found allowing direct
// gets, as one made by jetstream.CreateKeyValue or the nats tool does, is
// refused, and used once they are turned off.
func TestNATSTasksBucketWithDirectGets(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	js := jetStreamAt(t, br.URL())
	bucket, err := tasksBucket("tidings.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, LimitMarkerTTL: natsMarkerTTL}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenTasks(ctx, br.URL(), quiet()...)
	if err == nil {
		s.Close()
		t.Fatal("opened a bucket that allows direct gets")
	}
	if !strings.Contains(err.Error(), "direct gets") || !strings.Contains(err.Error(), "allow_direct false") {
		t.Errorf("the error does not say what is wrong and what to do: %v", err)
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ts := openTasksAt(t, br.URL())
	if err := ts.Create(ctx, "t1", []byte("v1"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := ts.Get(ctx, "t1"); err != nil || string(rec) != "v1" {
		t.Fatalf("get: %q, %v", rec, err)
	}
}

// countingKV counts the reads of a bucket.
type countingKV struct {
	jetstream.KeyValue
	gets atomic.Int64
}

func (kv *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.gets.Add(1)
	return kv.KeyValue.Get(ctx, key)
}

// TestNATSTasksUpdateReads: an Update at the revision its store last read
// or wrote is the write alone, without reading the entry again for its
// expiry; one at another revision reads it, as do a refused write and a
// task that has expired, which are still told apart.
func TestNATSTasksUpdateReads(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	a, b := openTasksAt(t, br.URL()).(*natsTasks), openTasksAt(t, br.URL()).(*natsTasks)
	kv := &countingKV{KeyValue: a.kv}
	a.kv = kv
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	reads := func(what string, want int64, call func()) {
		t.Helper()
		before := kv.gets.Load()
		call()
		if got := kv.gets.Load() - before; got != want {
			t.Errorf("%s: %d reads, want %d", what, got, want)
		}
	}
	exp := time.Now().Add(time.Hour)
	if err := a.Create(ctx, "t1", []byte("v1"), exp); err != nil {
		t.Fatal(err)
	}
	var rev uint64
	reads("get", 1, func() { rev = mustRev(t, a, "t1") })
	update := func(rec string, at uint64, want error) uint64 {
		t.Helper()
		next, err := a.Update(ctx, "t1", []byte(rec), at)
		if !errors.Is(err, want) {
			t.Fatalf("update at %d: %v, want %v", at, err, want)
		}
		return next
	}
	reads("update at the revision read", 0, func() { rev = update("v2", rev, nil) })
	reads("update at the revision written", 0, func() { rev = update("v3", rev, nil) })
	// Another replica changes it: the write is refused, and a read says why.
	stale := rev
	if _, err := b.Update(ctx, "t1", []byte("v4"), mustRev(t, b, "t1")); err != nil {
		t.Fatal(err)
	}
	reads("update at a revision since changed", 1, func() { update("lost", stale, bus.ErrTaskConflict) })
	// A revision this store has not seen: a read for the expiry.
	rev, err := b.Update(ctx, "t1", []byte("v4b"), mustRev(t, b, "t1"))
	if err != nil {
		t.Fatal(err)
	}
	reads("update at a revision read elsewhere", 1, func() { rev = update("v5", rev, nil) })
	if rec, _, err := b.Get(ctx, "t1"); err != nil || string(rec) != "v5" {
		t.Fatalf("get: %q, %v", rec, err)
	}
	// The expiry kept through the updates is the one created.
	e, err := b.kv.Get(ctx, natsTaskKey("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := decodeTaskValue(e.Value()); err != nil || !got.Equal(time.UnixMilli(brokerkit.CeilMilli(exp))) {
		t.Fatalf("the entry expires at %v (%v), want %v", got, err, exp)
	}
	// A task that expired, at the revision last written: bus.ErrNoTask
	// without a read, since the expiry is known.
	soon := time.UnixMilli(time.Now().Add(300 * time.Millisecond).UnixMilli()) // whole milliseconds, as stored
	if err := a.Create(ctx, "t2", []byte("v1"), soon); err != nil {
		t.Fatal(err)
	}
	rev = mustRev(t, a, "t2")
	time.Sleep(time.Until(soon)) // the clock is what is tested; this orders nothing
	reads("update of an expired task", 0, func() {
		if _, err := a.Update(ctx, "t2", []byte("v2"), rev); !errors.Is(err, bus.ErrNoTask) {
			t.Errorf("update of an expired task: %v, want bus.ErrNoTask", err)
		}
	})
}

// TestNATSTasksSeenBounded: what a store remembers of the revisions it
// saw stays within its bound however many tasks it sees.
func TestNATSTasksSeenBounded(t *testing.T) {
	s := &natsTasks{seen: make(map[string]seenRev)}
	exp := time.Unix(1000, 0)
	for i := range 3 * natsSeenMax {
		s.remember(fmt.Sprint(i), uint64(i+1), exp)
	}
	if len(s.seen) != natsSeenMax {
		t.Fatalf("%d revisions remembered, want %d", len(s.seen), natsSeenMax)
	}
	s.remember("last", 7, exp)
	if got, ok := s.expiryOf("last", 7); !ok || !got.Equal(exp) {
		t.Fatalf("the last revision remembered is not known: %v, %v", got, ok)
	}
	if _, ok := s.expiryOf("last", 8); ok {
		t.Fatalf("a revision not seen is known")
	}
	s.forget("last")
	if _, ok := s.expiryOf("last", 7); ok {
		t.Fatalf("a forgotten revision is known")
	}
}

// TestNATSTasksClusterReadsItsWrites: on a bucket of three replicas, a
// Get finds what a Create or an Update through any server wrote the
// moment it returned, through any server. A follower that has not applied
// a write yet (here, one cut off from the others) does not answer: a Get
// through its server fails rather than find an older record, or none.
func TestNATSTasksClusterReadsItsWrites(t *testing.T) {
	t.Parallel()
	c := testbroker.StartNATSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	first := openTasksAt(t, c.URL(0)+"?replicas=1").(*natsTasks)
	// The bucket is made with one replica; an operator scales it to three.
	st, err := first.js.Stream(ctx, first.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Replicas = 3
	if _, err := first.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	leader := currentLeader(t, first, first.stream)
	var stores []bus.TaskStore
	for i := range 3 {
		stores = append(stores, openTasksAt(t, c.URL(i)))
	}
	find := func(s bus.TaskStore, id string, want []byte, wantRev uint64) {
		t.Helper()
		rec, rev, err := s.Get(ctx, id)
		if err != nil || !bytes.Equal(rec, want) || wantRev != 0 && rev != wantRev {
			t.Fatalf("get %q just after the write: %q at revision %d (%v), want %q at %d", id, rec, rev, err, want, wantRev)
		}
	}
	for w, s := range stores {
		id := fmt.Sprintf("t%d", w)
		if err := s.Create(ctx, id, []byte("v1"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, o := range stores {
			find(o, id, []byte("v1"), 0)
		}
		_, rev, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		next, err := s.Update(ctx, id, []byte("v2"), rev)
		if err != nil {
			t.Fatalf("update %q: %v", id, err)
		}
		for _, o := range stores {
			find(o, id, []byte("v2"), next)
		}
	}

	// A follower answers direct gets, when the bucket allows them, once
	// it has caught up: then, cut off, it would answer with what it has.
	if cfg.AllowDirect {
		testbroker.WaitFor(t, "every replica to answer direct gets", func() bool {
			for i := range 3 {
				if !c.Serves(i, "$JS.API.DIRECT.GET."+first.stream) {
					return false
				}
			}
			return true
		})
	}

	// Cut a follower off; the leader and the other follower go on.
	var cut, writer int
	for i := range 3 {
		if c.Name(i) == leader {
			writer = i
		} else {
			cut = i
		}
	}
	c.Partition(cut)
	rev, err := stores[writer].Update(ctx, "t0", []byte("v3"), mustRev(t, stores[writer], "t0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stores[writer].Create(ctx, "new", []byte("v1"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i, o := range stores {
		if i != cut {
			find(o, "t0", []byte("v3"), rev)
			find(o, "new", []byte("v1"), 0)
		}
	}
	for id, want := range map[string]string{"t0": "v3", "new": "v1"} {
		short, cancel := context.WithTimeout(ctx, time.Second)
		rec, got, err := stores[cut].Get(short, id)
		cancel()
		if err == nil && string(rec) != want || errors.Is(err, bus.ErrNoTask) {
			t.Errorf("get %q through a server cut off from the stream's leader: %q at revision %d (%v), want %q or an error", id, rec, got, err, want)
		}
	}
}

// mustRev is the revision of the task id in s.
func mustRev(t *testing.T, s bus.TaskStore, id string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	_, rev, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
