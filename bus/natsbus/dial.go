// Package natsbus connects the replicas of a server through NATS: a
// bus.Conn over core NATS publish and subscribe (Dial), and the shared
// state and task store in JetStream key-value buckets (OpenState,
// OpenTasks). It is a package of its own so that a program links the
// NATS client only if it imports it; package brokers opens it, or Redis,
// by URL.
//
// Every URL has the form
//
//	nats://[user:password@]host:port[/subject]   (tls:// for TLS; default subject "tidings")
//
// and replicas that name the same subject on one NATS form one bus, share
// one state and one task store.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// endpoint is a NATS URL as read once: what the client connects to, and
// the subject that names the bus and its buckets.
type endpoint struct {
	server   string // the URL without the subject: scheme, user and host
	subject  string
	redacted string // the URL without its password, for errors
}

// parse reads nats://[user:password@]host:port[/subject] (tls:// for
// TLS). Its errors never show the password.
func parse(rawURL string) (endpoint, error) {
	u, err := brokerkit.ParseURL(rawURL)
	if err != nil {
		return endpoint{}, fmt.Errorf("natsbus: %w", err)
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return endpoint{}, fmt.Errorf("natsbus: %s: scheme %q is not nats or tls", u.Redacted(), u.Scheme)
	}
	subject, err := natsSubject(u)
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{subject: subject, redacted: u.Redacted(),
		server: (&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).String()}, nil
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
	if len(u.Query()) > 0 {
		return "", fmt.Errorf("natsbus: a NATS URL takes no parameters, got %q", u.RawQuery)
	}
	return subject, nil
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
	nc, err := nats.Connect(e.server, opts...)
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
