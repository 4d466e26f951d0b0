package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

// streamLimits are the serve flags that bound what listens and
// 2025-11-25 sessions hold.
type streamLimits struct {
	listens              server.ListenLimits
	sessions             int
	sessionsPerPrincipal int
}

// register adds the flags to f, with the library's defaults.
func (l *streamLimits) register(f *pflag.FlagSet) {
	d := server.DefaultListenLimits()
	l.listens = d
	l.sessions, l.sessionsPerPrincipal = streamhttp.DefaultMaxSessions, streamhttp.DefaultSessionsPerPrincipal
	for _, fl := range []struct {
		name  string
		value *int
		usage string
	}{
		{"max-listen-uris", &l.listens.URIsPerListen, "most resource URIs one listen, or one 2025-11-25 session, may follow; more is refused with -32602"},
		{"max-listens-per-principal", &l.listens.PerPrincipal.Listens, "most listens one caller may hold open (unauthenticated callers share one allowance); more is refused with -32603"},
		{"max-followed-uris-per-principal", &l.listens.PerPrincipal.URIs, "most resource URIs one caller's listens and sessions may follow in all"},
		{"max-listens-per-connection", &l.listens.PerConnection.Listens, "with --stdio: most listens the connection may hold open"},
		{"max-followed-uris-per-connection", &l.listens.PerConnection.URIs, "with --stdio: most resource URIs the connection's listens and session may follow in all"},
		{"max-listens", &l.listens.Total.Listens, "most listens open on the server at once"},
		{"max-followed-uris", &l.listens.Total.URIs, "most resource URIs all listens and sessions may follow at once"},
		{"max-sessions", &l.sessions, "most 2025-11-25 sessions open at once over HTTP; initialize is refused (503) beyond it"},
		{"max-sessions-per-principal", &l.sessionsPerPrincipal, "most 2025-11-25 sessions of one caller; its least recently used one ends to admit another"},
	} {
		f.Var(positiveInt{fl.value}, fl.name, fl.usage)
	}
}

// positiveInt is an int flag that refuses zero and less: a bound of zero
// would not mean "none", and nothing can be served without room for one.
type positiveInt struct{ p *int }

func (v positiveInt) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v positiveInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return fmt.Errorf("%q is not a positive whole number", s)
	}
	*v.p = n
	return nil
}

func (positiveInt) Type() string { return "int" }

// handlerOptions are the session bounds, for streamhttp.New.
func (l *streamLimits) handlerOptions() []streamhttp.Option {
	return []streamhttp.Option{streamhttp.WithSessionLimits(l.sessions, 0), streamhttp.WithSessionsPerPrincipal(l.sessionsPerPrincipal)}
}

// watchListens reports in /metrics what srv's listens hold.
func (o *observability) watchListens(srv *server.Server) error {
	return metrics.RegisterListens(o.registry, srv.ListenStats)
}

// watchSessions reports in /metrics what the sessions of the handler
// mounted at /mcp hold.
func (o *observability) watchSessions() error {
	if err := metrics.RegisterParked(o.registry, o.parked); err != nil {
		return err
	}
	return metrics.RegisterSessions(o.registry, o.sessions)
}
