// Package redisbus connects the replicas of a server through Redis: a
// bus.Conn over Redis pub/sub (Dial), and the shared state and task store
// in Redis hashes (OpenState, OpenTasks). It is a package of its own so
// that a program links the Redis client only if it imports it; package
// brokers opens it, or NATS, by URL.
//
// A URL names one Redis server, or the Sentinels that watch a primary
// and its replicas:
//
//	redis://[user:password@]host:port[/db][?channel=name]
//	redis+sentinel://[user:password@]host[:port],host[:port],.../master[/db][?channel=name]
//
// (rediss:// and rediss+sentinel:// for TLS; default channel "tidings";
// a Sentinel's port defaults to 26379). Replicas that name the same
// channel on one Redis, or on one Sentinel-watched primary, form one
// bus; those that also name the same db share one state and one task
// store. Other parameters are go-redis's own, and these:
//
//	wait=N              a write is done once N replicas have it (WAIT; default 1 with Sentinel, else 0)
//	wait_timeout=D      how long a write waits for them (a Go duration; default 1s)
//	sentinel_username=U, sentinel_password=P   what the Sentinels take, when they require it
//
// With Sentinel, the user and password are the Redis servers', the
// client asks the Sentinels which server is the primary, and the bus,
// the state and the tasks all move to the new primary when the Sentinels
// promote a replica; until they have, calls fail, and the bus counts its
// events as dropped and re-notifies when it is back.
//
// # Failover and acknowledged writes
//
// Redis replicates asynchronously: the primary answers a write before
// any replica has it, and a failover that promotes a replica lacking it
// loses it. So with wait=N (N > 0) every write of the shared state (Set)
// and of the task store (Create, Update) is followed, on the same
// connection, by WAIT N: it is reported done only once N replicas have
// acknowledged it. If fewer do within wait_timeout, the call fails with
// ErrUnreplicated: the write is on the primary and may be on fewer
// replicas, and a failover may lose it; the caller is told, as when a
// reply is lost, that the write may or may not stand. What is reported
// done is on the primary and on N replicas, and Sentinel promotes the
// replica furthest along, so a write reported done survives the loss of
// the primary alone; losing the primary and every replica that had it
// (or a Sentinel made to pick another) can still lose it, as can writes
// that failed with ErrUnreplicated. A failover while the old primary is
// still up (an operator's SENTINEL FAILOVER, a partition) leaves a
// window: a write the old primary takes after the promoted replica left
// it may be acknowledged by another replica that then follows the new
// primary, and be lost; wait=N with N all the replicas closes it, at the
// price of failing writes while any replica is down. Events on the bus
// are never waited for: a peer that misses one sees the gap in its
// numbers and re-notifies.
package redisbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// dialWait bounds dialling when ctx has no deadline.
const dialWait = 5 * time.Second

// defaultWaitTimeout is how long a write waits for its replicas unless
// the URL says (wait_timeout).
const defaultWaitTimeout = time.Second

// sentinelPort is a Sentinel's port unless the URL says.
const sentinelPort = "26379"

// ErrUnreplicated is what a write fails with when fewer replicas than
// the URL's wait=N acknowledged it in time: it is on the primary, but a
// failover may lose it.
var ErrUnreplicated = errors.New("redisbus: the write reached fewer replicas than asked for, and a failover may lose it")

// client is a Redis client made by dial, with what its URL named.
type client struct {
	*redis.Client
	channel  string // the pub/sub channel, and the prefix of the keys
	redacted string // the URL without its password, for errors
	wait     int    // replicas a write waits for (0: none)
	waitFor  time.Duration
	primary  *primaryWatch // nil unless through Sentinel
}

// dial is where every client of this package is made, for the bus
// ("bus"), the state ("state") or the tasks ("tasks"): it reads rawURL
// (see target), sets the client's retries (-1 for none), and checks that
// the server answers within ctx, or within dialWait if ctx has no
// deadline. Its errors say what it dialled, without the password.
func dial(ctx context.Context, rawURL, what string, retries int) (*client, error) {
	tg, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	c := &client{channel: tg.channel, redacted: tg.redacted, wait: tg.wait, waitFor: tg.waitFor}
	if fo := tg.failover; fo != nil {
		fo.MaxRetries = retries
		c.Client = redis.NewFailoverClient(fo)
		c.primary = &primaryWatch{}
		c.AddHook(c.primary)
	} else {
		tg.opt.MaxRetries = retries
		c.Client = redis.NewClient(tg.opt)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialWait)
		defer cancel()
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisbus: %s at %s: %w", what, tg.redacted, err)
	}
	return c, nil
}

// write runs fn, which makes a write (and reports whether it did), then,
// when the URL asks for replicas (wait=N), sends WAIT on the same
// connection, since WAIT counts the writes of the connection it is sent
// on: ErrUnreplicated when fewer than N have the write within the URL's
// wait_timeout.
func (c *client) write(ctx context.Context, fn func(redis.Cmdable) (bool, error)) error {
	if c.wait <= 0 {
		_, err := fn(c.Client)
		return err
	}
	cn := c.Conn()
	defer cn.Close()
	wrote, err := fn(cn)
	if err != nil || !wrote {
		return err
	}
	n, err := cn.Wait(ctx, c.wait, c.waitFor).Result()
	if err != nil {
		return fmt.Errorf("wait for %d replicas: %w", c.wait, err)
	}
	if n < int64(c.wait) {
		return fmt.Errorf("%w (%d of %d acknowledged it within %v)", ErrUnreplicated, n, c.wait, c.waitFor)
	}
	return nil
}

// target is what a URL names: one server (opt) or a primary found
// through Sentinels (failover), and what this package reads itself.
type target struct {
	opt      *redis.Options
	failover *redis.FailoverOptions
	channel  string
	redacted string // the URL without its passwords
	wait     int
	waitFor  time.Duration
}

// parse reads a URL of the package doc's forms. Its errors never show a
// password.
func parse(rawURL string) (target, error) {
	u, hosts, err := brokerkit.ParseURLHosts(rawURL, sentinelPort)
	if err != nil {
		return target{}, fmt.Errorf("redisbus: %w", err)
	}
	q := u.Query()
	tg := target{channel: q.Get("channel"), wait: 0, waitFor: defaultWaitTimeout}
	if q.Has("sentinel_password") {
		r := *u
		rq := u.Query()
		rq.Set("sentinel_password", "xxxxx")
		r.RawQuery = rq.Encode()
		tg.redacted = r.Redacted()
	} else {
		tg.redacted = u.Redacted()
	}
	if tg.channel == "" {
		tg.channel = "tidings"
	}
	sentinel := false
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+sentinel", "rediss+sentinel":
		sentinel, tg.wait = true, 1
	default:
		return target{}, fmt.Errorf("redisbus: %s: scheme %q is not redis, rediss, redis+sentinel or rediss+sentinel", tg.redacted, u.Scheme)
	}
	if q.Has("wait") {
		n, err := strconv.Atoi(q.Get("wait"))
		if err != nil || n < 0 {
			return target{}, fmt.Errorf("redisbus: %s: wait=%.20q is not a count of replicas", tg.redacted, q.Get("wait"))
		}
		tg.wait = n
	}
	if q.Has("wait_timeout") {
		d, err := time.ParseDuration(q.Get("wait_timeout"))
		if err != nil || d < time.Millisecond {
			return target{}, fmt.Errorf("redisbus: %s: wait_timeout=%.20q is not a duration of 1ms or more", tg.redacted, q.Get("wait_timeout"))
		}
		tg.waitFor = d
	}
	for _, k := range []string{"channel", "wait", "wait_timeout"} {
		q.Del(k)
	}
	if sentinel {
		tg.failover, err = failoverOptions(u, hosts, q)
	} else {
		tg.opt, err = serverOptions(u, q)
	}
	if err != nil {
		return target{}, fmt.Errorf("redisbus: %s: %w", tg.redacted, hideSecrets(err, u))
	}
	return tg, nil
}

// secretsHidden is an error of go-redis about a URL made from one of
// ours, with the URL's passwords cut out of its text: go-redis quotes
// the URL it was given, passwords and all.
type secretsHidden struct {
	err     error
	secrets []string
}

// hideSecrets returns err without the passwords of u in its text, as
// written, percent-encoded in a user's or a query's way.
func hideSecrets(err error, u *url.URL) error {
	var secrets []string
	pw, _ := u.User.Password()
	for _, s := range []string{pw, u.Query().Get("sentinel_password")} {
		if s != "" {
			secrets = append(secrets, s, strings.TrimPrefix(url.UserPassword("", s).String(), ":"), url.QueryEscape(s), url.PathEscape(s))
		}
	}
	return secretsHidden{err, secrets}
}

func (e secretsHidden) Error() string {
	m := e.err.Error()
	for _, s := range e.secrets {
		m = strings.ReplaceAll(m, s, "xxxxx")
	}
	return m
}

func (e secretsHidden) Unwrap() error { return e.err }

// serverOptions reads a redis:// or rediss:// URL, less the parameters
// parse took, into go-redis options.
func serverOptions(u *url.URL, q url.Values) (*redis.Options, error) {
	rest := *u
	rest.RawQuery = q.Encode()
	opt, err := redis.ParseURL(rest.String())
	if err != nil {
		return nil, err
	}
	opt.ContextTimeoutEnabled = true
	opt.DisableIdentity = true
	opt.DialerRetries = 1 // the receiving loop paces reconnects with the bus's own backoff
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// failoverOptions reads a redis+sentinel:// or rediss+sentinel:// URL,
// less the parameters parse took, into go-redis failover options: the
// path names the master and the db, the user and password are the Redis
// servers', and the Sentinels' own are parameters. It leaves the rest to
// go-redis's ParseFailoverURL, whose form differs.
func failoverOptions(u *url.URL, hosts []string, q url.Values) (*redis.FailoverOptions, error) {
	path := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return nil, errors.New("the path is not /master or /master/db")
	}
	master, err := url.PathUnescape(path[0])
	if err != nil {
		return nil, errors.New("the master name is not percent-encoded right")
	}
	q.Set("master_name", master)
	if len(path) == 2 && path[1] != "" {
		if _, err := strconv.Atoi(path[1]); err != nil {
			return nil, fmt.Errorf("db %.20q is not a number", path[1])
		}
		q.Set("db", path[1])
	}
	if u.User != nil {
		q.Set("username", u.User.Username())
		if pw, ok := u.User.Password(); ok {
			q.Set("password", pw)
		}
	}
	fu := url.URL{Scheme: strings.TrimSuffix(u.Scheme, "+sentinel"), Host: hosts[0]}
	if user, pw := q.Get("sentinel_username"), q.Get("sentinel_password"); user != "" || pw != "" {
		fu.User = url.UserPassword(user, pw)
	}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q["addr"] = hosts[1:]
	fu.RawQuery = q.Encode()
	fo, err := redis.ParseFailoverURL(fu.String())
	if err != nil {
		return nil, err
	}
	if fo.TLSConfig != nil {
		// Each host's name is checked against its own certificate, where
		// go-redis would check every one against the first Sentinel's.
		fo.TLSConfig.ServerName = ""
	}
	fo.ContextTimeoutEnabled = true
	fo.DisableIdentity = true
	fo.DialerRetries = 1
	return fo, nil
}

// primaryWatch notes the address of each Redis server a failover client
// connects to, which is the primary the Sentinels named: the primary in
// use, and how many times it changed.
type primaryWatch struct {
	mu        sync.Mutex
	addr      string
	failovers int64
}

func (p *primaryWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil {
			p.saw(cn.RemoteAddr().String())
		}
		return cn, err
	}
}

func (p *primaryWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *primaryWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// saw notes a connection to addr.
func (p *primaryWatch) saw(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if addr != p.addr {
		if p.addr != "" {
			p.failovers++
		}
		p.addr = addr
	}
}

// get returns the primary last connected to and the changes seen.
func (p *primaryWatch) get() (string, int64) {
	if p == nil {
		return "", 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr, p.failovers
}

// settings reads the options as every constructor here does.
func settings(opts []bus.Option) brokerkit.Config { return brokerkit.Apply(opts) }

// errClosed is what a closed connection returns from Run.
var errClosed = brokerkit.ErrClosed
