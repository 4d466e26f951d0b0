package testbroker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of StartSentinel know their
// primary by.
const SentinelMaster = "tidings"

// Sentinel is a Redis primary and two replicas, each a redis-server
// process on a loopback port, watched by three Sentinels (redis-server
// --sentinel) that agree on a failure with a quorum of two. A primary
// they cannot reach for a second (see StartSentinelDownAfter) is taken
// for down, and they promote a replica within a few seconds more.
type Sentinel struct {
	t testing.TB
	// Servers are the Redis servers; the first was started as the
	// primary.
	Servers []*Redis
	// Sentinels watch them.
	Sentinels []*Redis
}

// StartSentinel starts the servers and the Sentinels, and waits until
// each Sentinel sees the primary, both replicas in sync with it and the
// two other Sentinels, so that a failover can start as soon as the
// primary fails. It skips the test when redis-server is not installed,
// unless TIDINGS_REDIS=1 says it must be. Everything is killed when the
// test ends.
func StartSentinel(t testing.TB) *Sentinel { return StartSentinelDownAfter(t, time.Second) }

// StartSentinelDownAfter is StartSentinel with Sentinels that take a
// server for down after downAfter without an answer: on a loaded
// machine, a second is short enough for them to take the primary they
// have just promoted for down and fail over a second time.
func StartSentinelDownAfter(t testing.TB, downAfter time.Duration) *Sentinel {
	path := redisServer(t)
	// Made before the cleanup that kills the servers is registered, so
	// that it is removed after they are gone: a Redis still running
	// writes there.
	base := t.TempDir()
	dir := func() string {
		d, err := os.MkdirTemp(base, "redis-")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Cleanup(func() { waitDialProbes(t) })
	s := &Sentinel{t: t}
	t.Cleanup(func() {
		for _, b := range append(s.Sentinels, s.Servers...) {
			b.Down()
		}
	})
	// Any server may become the primary, and a replica it gains must not
	// wait for a full sync to be batched with others (5s by default).
	// Replicas sign in as a user of their own, whom CutReplication
	// turns away.
	common := []string{"--repl-diskless-sync-delay", "0",
		"--user", replUser, "on", ">" + replPassword, "~*", "&*", "+@all",
		"--masteruser", replUser, "--masterauth", replPassword}
	primary := startRedis(t, path, dir(), "", common...)
	s.Servers = append(s.Servers, primary)
	for range 2 {
		s.Servers = append(s.Servers, startRedis(t, path, dir(), "",
			append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.port)}, common...)...))
	}
	for i := range 3 {
		d := dir()
		conf := filepath.Join(d, "sentinel.conf")
		cfg := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s %[4]d\n"+
			"sentinel parallel-syncs %[1]s 2\n", SentinelMaster, primary.port, downAfter.Milliseconds(), 2*downAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatalf("sentinel %d: %v", i, err)
		}
		s.Sentinels = append(s.Sentinels, startRedis(t, path, d, conf))
	}
	WaitFor(t, "the Sentinels to see the primary, both replicas in sync and each other", func() bool {
		for _, sn := range s.Sentinels {
			if !s.settled(sn, primary.Addr(), true) {
				return false
			}
		}
		return true
	})
	return s
}

// settled reports whether Sentinel sn sees primary as the primary, with
// two replicas (linked to it, if linked says so) and two other
// Sentinels.
func (s *Sentinel) settled(sn *Redis, primary string, linked bool) bool {
	c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m, err := c.Master(ctx, SentinelMaster).Result()
	if err != nil || m["ip"]+":"+m["port"] != primary || m["flags"] != "master" ||
		m["num-slaves"] != "2" || m["num-other-sentinels"] != "2" {
		return false
	}
	reps, err := c.Replicas(ctx, SentinelMaster).Result()
	if err != nil || len(reps) != 2 {
		return false
	}
	for _, r := range reps {
		if r["flags"] != "slave" || linked && r["master-link-status"] != "ok" {
			return false
		}
	}
	return true
}

// URL returns
// redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/tidings/0?channel=tidings-test,
// naming the three Sentinels.
func (s *Sentinel) URL() string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return fmt.Sprintf("redis+sentinel://%s/%s/0?channel=tidings-test", strings.Join(addrs, ","), SentinelMaster)
}

// Primary returns the address of the primary as the first Sentinel that
// answers names it.
func (s *Sentinel) Primary() string {
	s.t.Helper()
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), DisableIdentity: true, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		cancel()
		_ = c.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1]
		}
	}
	s.t.Fatal("no Sentinel names the primary")
	return ""
}

// KillPrimary kills the server the Sentinels name as the primary, as a
// crash would (SIGKILL), and returns its address.
func (s *Sentinel) KillPrimary() string {
	s.t.Helper()
	addr := s.Primary()
	for _, b := range s.Servers {
		if b.Addr() == addr {
			b.Down()
			return addr
		}
	}
	s.t.Fatalf("the primary %s is none of the servers", addr)
	return ""
}

// Switch has a Sentinel promote a replica while the primary is up
// (SENTINEL FAILOVER), as an operator would, and waits until every
// Sentinel names the new primary and has made the two others, the old
// one included, its replicas (which may still be syncing: the Sentinels
// look at a replica's link every ten seconds), and the old one says it
// is a replica. It returns the old primary's address.
func (s *Sentinel) Switch() string {
	s.t.Helper()
	old := s.Primary()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := c.Failover(ctx, SentinelMaster).Err(); err != nil {
		s.t.Fatalf("sentinel failover: %v", err)
	}
	WaitFor(s.t, "the Sentinels to settle on a new primary", func() bool {
		now := s.Primary()
		if now == old {
			return false
		}
		for _, sn := range s.Sentinels {
			if !s.settled(sn, now, false) {
				return false
			}
		}
		return true
	})
	// The Sentinels made the old primary a replica and closed its
	// clients' connections in one transaction.
	oc := redis.NewClient(&redis.Options{Addr: old, DisableIdentity: true, MaxRetries: -1})
	defer oc.Close()
	WaitFor(s.t, "the old primary to be made a replica", func() bool {
		info, err := oc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave\r\n")
	})
	return old
}

// CutReplication stops the primary the Sentinels name from sending its
// writes to the replicas: it turns their user away and closes their
// connections, as a partition between them would, while the Sentinels
// still reach every server. The Sentinels do not mend it (they mend a
// replica that follows the wrong address, not one refused by the
// right one), so what the primary takes from then on is on it alone.
func (s *Sentinel) CutReplication() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Primary(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := c.Do(ctx, "ACL", "SETUSER", replUser, "off").Err(); err != nil {
		s.t.Fatalf("cut replication: %v", err)
	}
	if err := c.Do(ctx, "CLIENT", "KILL", "USER", replUser).Err(); err != nil {
		s.t.Fatalf("cut replication: %v", err)
	}
	WaitFor(s.t, "the primary to have no replica", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0\r\n")
	})
}

// The user replicas sign in to their primary as.
const (
	replUser     = "replica"
	replPassword = "replica-secret"
)

// Addr returns the server's address, 127.0.0.1:PORT.
func (b *Redis) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "127.0.0.1:" + strconv.Itoa(b.port)
}
