package brokerkit

import (
	"errors"
	"net"
	"net/url"
	"strings"
)

// ParseURLHosts parses a broker URL whose authority may name several
// hosts, separated by commas (scheme://[userinfo@]host1:port,host2[/path]),
// which net/url refuses when a host lacks a port or is an IPv6 literal. It
// returns the URL, whose Host is the list as written (so that Redacted
// shows it), and the hosts one by one, each given defaultPort when it
// names none (with defaultPort "", as written). Its errors never show
// the password.
func ParseURLHosts(rawURL, defaultPort string) (*url.URL, []string, error) {
	start := strings.Index(rawURL, "://")
	if start < 0 {
		u, err := ParseURL(rawURL)
		if err != nil {
			return nil, nil, err
		}
		return u, nil, nil
	}
	start += len("://")
	end := len(rawURL)
	if i := strings.IndexAny(rawURL[start:], "/?#"); i >= 0 {
		end = start + i
	}
	hostStart := start
	if i := strings.LastIndex(rawURL[start:end], "@"); i >= 0 {
		hostStart = start + i + 1
	}
	list := rawURL[hostStart:end]
	// Parsed with one stand-in host, so that net/url reads the rest.
	u, err := ParseURL(rawURL[:hostStart] + "hosts" + rawURL[end:])
	if err != nil {
		return nil, nil, err
	}
	u.Host = list
	var hosts []string
	for h := range strings.SplitSeq(list, ",") {
		hp, err := hostPort(h, defaultPort)
		if err != nil {
			return nil, nil, err
		}
		hosts = append(hosts, hp)
	}
	return u, hosts, nil
}

// errBadHost is hostPort's error. It never quotes the host: what looks
// like one may be part of a password cut at a '/'.
var errBadHost = errors.New("the URL names a host that is not host or host:port, or an empty one " +
	"(a password holding any of : / ? # [ ] @ % must be percent-encoded)")

// hostPort is h as host:port, with port defaultPort if h names none.
func hostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", errBadHost
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: a name, an IPv4 address or a bracketed IPv6 one.
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort
		if strings.HasPrefix(h, "[") != strings.HasSuffix(h, "]") || strings.Contains(host, "[") ||
			strings.Contains(host, "]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
			return "", errBadHost
		}
	}
	if port == "" {
		port = defaultPort
	}
	if host == "" || strings.ContainsAny(host, "@/?#%") {
		return "", errBadHost
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return "", errBadHost
		}
	}
	if port == "" {
		return h, nil // defaultPort is ""
	}
	return net.JoinHostPort(host, port), nil
}
