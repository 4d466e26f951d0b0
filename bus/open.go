package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Dial connects to the broker rawURL names, subscribed and ready when it
// returns, or fails once ctx ends. Two kinds of URL are understood:
//
//	nats://[user:password@]host:port[/subject]           (tls:// for TLS; default subject "tidings")
//	redis://[user:password@]host:port[/db][?channel=name] (rediss:// for TLS; default channel "tidings")
//
// Replicas that share a subject or channel on one broker form one bus.
// Redis channels span every database of a server, so db selects nothing
// for pub/sub. Replicas in one process join with NewLocal instead, which
// has no URL: a name would have to be looked up in process-wide state.
func Dial(ctx context.Context, rawURL string, opts ...Option) (Conn, error) {
	u, b, err := parseBroker(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := newConfig(opts)
	if b == natsBroker {
		return dialNATS(ctx, u, cfg)
	}
	return dialRedis(ctx, u, cfg)
}

// Open dials rawURL (see Dial) and starts a Bus over the connection.
func Open(ctx context.Context, rawURL string, opts ...Option) (Bus, error) {
	c, err := Dial(ctx, rawURL, opts...)
	if err != nil {
		return nil, err
	}
	return New(c, opts...), nil
}

// broker is the kind of broker a URL names.
type broker int

const (
	natsBroker broker = iota
	redisBroker
)

// parseBroker parses rawURL (see parseURL) and tells which broker its
// scheme names: the one place that knows the schemes, for the bus, the
// state and the task store alike.
func parseBroker(rawURL string) (*url.URL, broker, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, 0, err
	}
	switch u.Scheme {
	case "nats", "tls":
		return u, natsBroker, nil
	case "redis", "rediss":
		return u, redisBroker, nil
	}
	return nil, 0, fmt.Errorf("bus: %s: unknown scheme %q (want nats, tls, redis or rediss)", u.Redacted(), u.Scheme)
}

// parseURL parses a broker URL. Its error never shows the URL: net/url's
// errors quote the whole of it, password included, and some of their
// inner parts quote a piece of it (a password cut at a '/' becomes a
// port), so only the kind of mistake is told.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, badURLError{err}
	}
	return u, nil
}

// badURLError is a URL that does not parse. It keeps url.Parse's error for
// errors.Is and errors.As, not for its message.
type badURLError struct{ err error }

func (e badURLError) Error() string {
	const msg = "bus: the URL does not parse (a password holding any of : / ? # [ ] @ % must be percent-encoded)"
	var esc url.EscapeError
	var host url.InvalidHostError
	kind := ""
	switch m := e.err.Error(); {
	case errors.As(e.err, &esc):
		kind = "a bad percent-escape"
	case errors.As(e.err, &host):
		kind = "a bad character in the host"
	case strings.HasPrefix(m, "invalid port"):
		kind = "a bad port"
	case m == "missing protocol scheme", m == "first path segment in URL cannot contain colon",
		m == "net/url: invalid control character in URL":
		kind = m // says nothing of the URL
	default:
		return msg
	}
	return msg + ": " + kind
}

func (e badURLError) Unwrap() error { return e.err }
