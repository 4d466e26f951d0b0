// Command brokers runs one of testbroker's brokers until it gets SIGTERM
// or SIGINT, for scripts that test many replicas from outside Go
// (scripts/conformance-cluster), so that they start the same brokers as
// the Go tests do:
//
//	brokers -kind nats|nats-cluster|redis|redis-sentinel -dir DIR [-subscribers N]
//
// nats is a NATS server with JetStream, run in this process; nats-cluster
// three of them in one cluster; redis a redis-server process;
// redis-sentinel a Redis primary, two replicas and three Sentinels. Once
// the broker is ready, brokers prints "bus URL" on standard error: the
// URL the replicas' -bus takes.
//
// On SIGUSR1 it kills the server the replicas' tasks live on, as the loss
// of its machine would: the NATS server that leads the tasks bucket, or
// the Redis primary, which the Sentinels then replace. It prints "killed
// WHAT" and, for Redis, waits until the Sentinels agree on a new primary
// that has a replica in sync and the subscriptions of -subscribers
// replicas, for 5 s on end, and prints "settled after D". A kill that
// cannot be done prints "kill failed: WHY".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tidings/internal/testrig/testbroker"
)

func main() {
	kind := flag.String("kind", "nats", "the broker: nats, nats-cluster, redis or redis-sentinel")
	dir := flag.String("dir", "", "directory for the brokers' stores and logs (default: a temporary one)")
	subscribers := flag.Int("subscribers", 1, "redis-sentinel: the replicas whose subscriptions a new primary must have before a kill has settled")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -kind nats|nats-cluster|redis|redis-sentinel [-dir dir] [-subscribers n]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	r := &rig{dir: *dir}
	defer r.stop()
	killer, err := start(r, *kind, *subscribers)
	if err != nil {
		fmt.Fprintf(os.Stderr, "brokers: %v\n", err)
		r.stop()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kills := make(chan os.Signal, 1)
	signal.Notify(kills, syscall.SIGUSR1)
	defer signal.Stop(kills)
	for {
		select {
		case <-ctx.Done():
			return
		case <-kills:
			if killer == nil {
				fmt.Fprintf(os.Stderr, "kill failed: a %s broker has no server to kill and still be there\n", *kind)
				continue
			}
			if err := killer(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "kill failed: %v\n", err)
			}
		}
	}
}

// start starts the broker kind and prints its URL; it returns what
// SIGUSR1 does, nil for a broker of one server.
func start(r *rig, kind string, subscribers int) (func(context.Context) error, error) {
	var url string
	var kill func(context.Context) error
	switch kind {
	case "nats":
		url = testbroker.StartNATS(r).URL()
	case "nats-cluster":
		c := testbroker.StartNATSCluster(r, 3)
		url = c.Seeds()
		kill = func(context.Context) error {
			i := c.StreamLeader(tasksStream)
			if i < 0 {
				return fmt.Errorf("no server leads %s", tasksStream)
			}
			name := c.Name(i)
			c.Crash(i)
			fmt.Fprintf(os.Stderr, "killed nats-server %s, the leader of the tasks bucket\n", name)
			return nil
		}
	case "redis":
		url = testbroker.StartRedis(r).URL()
	case "redis-sentinel":
		// A server is down after 3 s without an answer: with 1 s, the
		// Sentinels on a machine loaded by the conformance suite took the
		// primary they had just promoted for down and failed over again.
		s := testbroker.StartSentinelDownAfter(r, 3*time.Second)
		url = s.URL()
		kill = func(ctx context.Context) error {
			addr := s.KillPrimary()
			fmt.Fprintf(os.Stderr, "killed the Redis primary %s\n", addr)
			started := time.Now()
			if err := settle(ctx, s, subscribers); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "settled after %v: the new primary had a replica and every copy's subscription, and kept them for 5 s\n",
				time.Since(started).Round(time.Millisecond))
			return nil
		}
	default:
		return nil, fmt.Errorf("unknown -kind %q: nats, nats-cluster, redis or redis-sentinel", kind)
	}
	fmt.Fprintf(os.Stderr, "bus %s\n", url)
	return kill, nil
}

// tasksStream is the JetStream stream of the tasks bucket of the
// subject testbroker's URLs name ("tidings.test").
const tasksStream = "KV_tidings_2Etest_tasks"

// settle waits, three minutes at most, until every Sentinel names the
// same primary and takes it for up, and the primary has a replica online
// and the subscriptions of subscribers replicas on the bus's channel,
// for 5 s on end: reads come back first, writes once a replica follows
// the new primary (the replicas wait for one), and a replica hears the
// others once its subscription is on the new primary. A run started
// before that would measure the failover, not the replicas; a second
// failover soon after the first would fall inside it.
func settle(ctx context.Context, s *testbroker.Sentinel, subscribers int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var since time.Time
	for {
		if ready(ctx, s, subscribers) {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= 5*time.Second {
				return nil
			}
		} else {
			since = time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Sentinels did not settle on a new primary with a replica and %d subscriptions: %w", subscribers, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready reports whether the Sentinels agree on an up primary that has
// a replica online and subscribers subscriptions.
func ready(ctx context.Context, s *testbroker.Sentinel, subscribers int) bool {
	var primary string
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), DisableIdentity: true, MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, testbroker.SentinelMaster).Result()
		m, merr := c.Master(ctx, testbroker.SentinelMaster).Result()
		_ = c.Close()
		if err != nil || merr != nil || len(addr) != 2 || m["flags"] != "master" {
			return false
		}
		if a := addr[0] + ":" + addr[1]; primary == "" {
			primary = a
		} else if a != primary {
			return false
		}
	}
	c := redis.NewClient(&redis.Options{Addr: primary, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") || !strings.Contains(info, "state=online") {
		return false
	}
	subs, err := c.PubSubNumSub(ctx, channel).Result()
	return err == nil && subs[channel] >= int64(subscribers)
}

// channel is the Pub/Sub channel of testbroker's Redis URLs.
const channel = "tidings-test"

// rig is what testbroker asks of a testing.TB, outside a test: a
// failure ends the command once everything started is stopped, and
// cleanups run, last first, when it ends.
type rig struct {
	// TB is nil: it lends rig the interface's unexported method, and
	// rig defines every method testbroker calls.
	testing.TB
	dir      string
	cleanups []func()
}

func (r *rig) Helper() {}

func (r *rig) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *rig) Errorf(format string, args ...any) { r.Fatalf(format, args...) }

func (r *rig) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }

func (r *rig) Fatalf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }

func (r *rig) Skip(args ...any) { r.fail(fmt.Sprint(args...)) }

func (r *rig) TempDir() string {
	d, err := os.MkdirTemp(r.dir, "broker-")
	if err != nil {
		r.Fatalf("a directory for the broker: %v", err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// fail reports why the brokers cannot go on, stops them and exits 1.
func (r *rig) fail(why string) {
	fmt.Fprintf(os.Stderr, "brokers: %s\n", why)
	r.stop()
	os.Exit(1)
}

// stop runs the cleanups, last first, once.
func (r *rig) stop() {
	for len(r.cleanups) > 0 {
		f := r.cleanups[len(r.cleanups)-1]
		r.cleanups = r.cleanups[:len(r.cleanups)-1]
		f()
	}
}
