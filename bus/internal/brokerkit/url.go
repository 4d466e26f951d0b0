package brokerkit

import (
	"errors"
	"net/url"
	"strings"
)

// ParseURL parses a broker URL. Its error never shows the URL: net/url's
// errors quote the whole of it, password included, and some of their
// inner parts quote a piece of it (a password cut at a '/' becomes a
// port), so only the kind of mistake is told. Callers put their
// package's name before it.
func ParseURL(rawURL string) (*url.URL, error) {
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
	const msg = "the URL does not parse (a password holding any of : / ? # [ ] @ % must be percent-encoded)"
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
