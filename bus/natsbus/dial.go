// Package natsbus connects the replicas of a server through NATS: a
// bus.Conn over core NATS publish and subscribe (Dial), and the shared
// state and task store in JetStream key-value buckets (OpenState,
// OpenTasks). It is a package of its own so that a program links the
// NATS client only if it imports it; package brokers opens it, or Redis,
// by URL.
//
// Every URL has the form
//
//	nats://[user:password@]host:port[,nats://host:port...][/subject][?replicas=N]
//
// (tls:// for TLS; default subject "tidings"), and replicas that name
// the same subject on one NATS server or cluster form one bus, share one
// state and one task store.
//
// A cluster is named by its seeds, as the NATS client takes them: whole
// URLs separated by commas, each with its scheme, all nats:// or all
// tls://. The client connects to one of them, learns the others from it,
// and moves to another when its server is lost. The subject and the
// parameters are written once, after the last seed, as the path and
// query of a URL whose host is a list; a seed before the last that has
// either is refused, as is one with a user or password other than the
// first seed's. The user and password are given on the first seed, and
// every seed, and every server the client learns of, is dialled with
// them. A ',' in a password is written %2C.
//
// replicas=N (1 to 5) is the replica count of a bucket OpenState or
// OpenTasks creates; see OpenState. Dial reads it and ignores it, so that
// one URL serves all three.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// endpoint is a NATS URL as read once: the servers the client connects
// to, the subject that names the bus and its buckets, and the replica
// count of the buckets made.
type endpoint struct {
	servers  []string // the seeds, each with the first seed's user and password, without subject
	subject  string
	replicas int    // replicas=N, or 0 for the default (see plan)
	redacted string // the URL without its password, for errors
}

// maxReplicas is the most replicas JetStream gives a stream.
const maxReplicas = 5

// parse reads nats://[user:password@]host:port[,nats://host:port...][/subject][?replicas=N]
// (tls:// for TLS; see the package doc). Its errors never show the
// password, nor any part of a seed that might hold a piece of one.
func parse(rawURL string) (endpoint, error) {
	seeds := strings.Split(rawURL, ",")
	var e endpoint
	var first, last *url.URL
	var shown []string
	for i, raw := range seeds {
		raw = strings.TrimSpace(raw)
		which := ""
		if len(seeds) > 1 {
			which = fmt.Sprintf("seed %d of %d: ", i+1, len(seeds))
		}
		if raw == "" {
			return endpoint{}, fmt.Errorf("natsbus: %sempty: seeds are separated by single commas, "+
				"nats://a:4222,nats://b:4222/subject", which)
		}
		if len(seeds) > 1 && !strings.Contains(raw, "://") {
			return endpoint{}, errNotWhole(which)
		}
		u, err := brokerkit.ParseURL(raw)
		if err != nil {
			return endpoint{}, fmt.Errorf("natsbus: %s%w", which, err)
		}
		if err := checkSeed(u, i, len(seeds), which, first); err != nil {
			return endpoint{}, err
		}
		if first == nil {
			first = u
		}
		last = u
		shown = append(shown, u.Redacted())
		e.servers = append(e.servers, (&url.URL{Scheme: u.Scheme, User: first.User, Host: u.Host}).String())
	}
	e.redacted = strings.Join(shown, ",")
	var err error
	if e.subject, err = natsSubject(last); err != nil {
		return endpoint{}, err
	}
	if e.replicas, err = natsReplicas(last); err != nil {
		return endpoint{}, err
	}
	return e, nil
}

// checkSeed checks seed i of n, u, against the first (nil for the first
// itself). A seed other than the only one is not quoted: cut at a comma,
// a password's pieces may look like a scheme or a host.
func checkSeed(u *url.URL, i, n int, which string, first *url.URL) error {
	switch {
	case u.Scheme != "nats" && u.Scheme != "tls":
		if n == 1 {
			return fmt.Errorf("natsbus: %s: scheme %q is not nats or tls", u.Redacted(), u.Scheme)
		}
		return errNotWhole(which)
	case u.Host == "":
		return fmt.Errorf("natsbus: %sno host: write every seed whole, nats://host:port", which)
	case first != nil && u.Scheme != first.Scheme:
		return fmt.Errorf("natsbus: %sthe seeds mix nats:// and tls://: every seed is dialled alike, "+
			"with TLS or without", which)
	case first != nil && u.User != nil && u.User.String() != first.User.String():
		return fmt.Errorf("natsbus: %sa user or password other than the first seed's: "+
			"give them once, on the first seed, and every seed is dialled with them", which)
	case i < n-1 && (u.Path != "" || u.RawQuery != "" || u.ForceQuery):
		return fmt.Errorf("natsbus: %sa subject or parameters before the last seed: write them once, "+
			"after the last, nats://a:4222,nats://b:4222/subject?replicas=3", which)
	}
	return nil
}

// errNotWhole is a seed, which, that is not a nats:// or tls:// URL.
func errNotWhole(which string) error {
	return fmt.Errorf("natsbus: %sit is not a nats:// or tls:// URL: write every seed whole, "+
		"nats://a:4222,nats://b:4222/subject (a ',' in a password is written %%2C)", which)
}

// natsSubject returns the subject of nats://host:port/subject (default
// "tidings").
func natsSubject(u *url.URL) (string, error) {
	subject := strings.TrimPrefix(u.Path, "/")
	if subject == "" {
		subject = "tidings"
	}
	if !validSubject(subject) {
		return "", fmt.Errorf("natsbus: %q is not a NATS subject without wildcards", subject)
	}
	return subject, nil
}

// natsReplicas returns the replicas=N of u's query, or 0 without one,
// and refuses any other parameter.
func natsReplicas(u *url.URL) (int, error) {
	q := u.Query()
	for k := range q {
		if k != "replicas" {
			return 0, fmt.Errorf("natsbus: a NATS URL takes no parameters but replicas=N, got %q", u.RawQuery)
		}
	}
	vs, ok := q["replicas"]
	if !ok {
		return 0, nil
	}
	if len(vs) != 1 {
		return 0, fmt.Errorf("natsbus: replicas is given %d times", len(vs))
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 1 || n > maxReplicas {
		return 0, fmt.Errorf("natsbus: replicas=%q is not a replica count from 1 to %d", vs[0], maxReplicas)
	}
	return n, nil
}

// validSubject reports whether s is a NATS subject one may publish to:
// dot-separated non-empty tokens without wildcards or white space.
func validSubject(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}

// dialWait bounds dialling when ctx has no deadline: the NATS client
// dials with a timeout, not a context, and dialling must end.
const dialWait = 5 * time.Second

// dial is where every client of this package is first made, for the bus
// ("bus"), the state ("state") or the tasks ("tasks"), once parse has
// read the URL: it connects (see connect) within ctx, or within dialWait
// if ctx has no deadline. Its errors say what it dialled, without the
// password.
func (e endpoint) dial(ctx context.Context, cfg brokerkit.Config, what string, extra ...nats.Option) (*nats.Conn, chan struct{}, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	nc, ended, err := e.connect(ctx, cfg, what, extra...)
	if err != nil {
		return nil, nil, fmt.Errorf("natsbus: %s at %s: %w", what, e.redacted, err)
	}
	return nc, ended, nil
}

// bounded gives ctx a deadline of dialWait if it has none.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, dialWait)
}

// connect dials a client of e, named "tidings <what>", before ctx's
// deadline, with what every client here shares, then extra: it
// reconnects on its own, for ever, with the bus's backoff, and buffers
// nothing while disconnected — a write made then fails at once instead
// of landing later over whatever was written meanwhile, and an event
// sent then is dropped and counted, and the peers re-notify, the same on
// every broker. It returns the client and the channel its closed
// callback closes. Its error does not show the URL.
func (e endpoint) connect(ctx context.Context, cfg brokerkit.Config, what string, extra ...nats.Option) (*nats.Conn, chan struct{}, error) {
	dl, _ := ctx.Deadline()
	timeout := time.Until(dl)
	if timeout <= 0 || ctx.Err() != nil {
		return nil, nil, context.DeadlineExceeded
	}
	name := "tidings " + what
	ended := make(chan struct{})
	opts := append([]nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(cfg.Backoff),
		nats.ReconnectBufSize(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(ended) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			cfg.Logger.Debug("natsbus: NATS reports an error", "client", name, "err", err)
		}),
	}, extra...)
	o := nats.GetDefaultOptions()
	o.Servers = e.servers // each whole: a ',' in a password stays in it
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, nil, err
		}
	}
	nc, err := o.Connect()
	if err != nil {
		return nil, nil, err
	}
	return nc, ended, nil
}

// settings reads the options as every constructor here does.
func settings(opts []bus.Option) brokerkit.Config { return brokerkit.Apply(opts) }

// errClosed is what a closed connection returns from Run.
var errClosed = brokerkit.ErrClosed

// errDisconnected stands for a loss the client gave no reason for.
var errDisconnected = errors.New("disconnected")
