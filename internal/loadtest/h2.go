package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/coalesce"
	"tidings/internal/h2"
	"tidings/internal/sse"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// ServerTidingsH2 is the project's server with its listens over HTTP/2
// without TLS (h2c), many to a connection.
const ServerTidingsH2 = "tidings-h2"

// MaxHTTP2Listeners bounds the listens of a run over HTTP/2: they need
// one file descriptor per connection, not per listen, so the open-file
// limit does not bound them.
const MaxHTTP2Listeners = 200000

// startFrontH2 serves h on loopback with HTTP/2 as well as HTTP/1.1,
// one connection holding any number of streams, its writes gathered by
// coalesce unless noCoalesce, served by the h2 package as tidings serve
// has it (listens parked on their streams), or with plain by net/http's
// own server.
func startFrontH2(h http.Handler, noCoalesce, plain bool) (*h2Front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(listenPath, h)
	hs := &http.Server{
		Handler:   mux,
		Protocols: new(http.Protocols),
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: MaxHTTP2Listeners},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	if !plain {
		if _, err := h2.Configure(hs, h2.Config{MaxStreams: MaxHTTP2Listeners}); err != nil {
			return nil, err
		}
	}
	f := &front{hs: hs, addr: ln.Addr().String(), stalledAddr: ln.Addr().String(), served: make(chan error, 1), serves: 1}
	counted := &countingListener{Listener: ln}
	var served net.Listener = counted
	if !noCoalesce {
		served = coalesce.Listen(served, 0)
	}
	go func() { f.served <- hs.Serve(served) }()
	return &h2Front{front: f, writes: &counted.writes}, nil
}

// h2Front is a front that counts the writes made to its sockets.
type h2Front struct {
	*front
	writes *atomic.Int64
}

// socketWrites returns how many writes the server made to its sockets.
func (f *h2Front) socketWrites() int64 { return f.writes.Load() }

// countingListener counts the writes made to the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// startTidingsH2 is startTidings over an HTTP/2 front, with room for
// MaxHTTP2Listeners listens.
func startTidingsH2(writeTimeout time.Duration, noCoalesce bool) (*tidingsH2Target, error) {
	room := server.Allowance{Listens: MaxHTTP2Listeners}
	srv := server.New(mcp.Implementation{Name: "tidings-bench", Version: "0"},
		server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room}))
	if err := srv.AddTool(mcp.Tool{Name: "base"}, noopTool); err != nil {
		return nil, err
	}
	f, err := startFrontH2(streamhttp.New(srv, streamhttp.WithWriteTimeout(writeTimeout), streamhttp.WithParking()), noCoalesce, false)
	if err != nil {
		return nil, err
	}
	return &tidingsH2Target{tidingsTarget: &tidingsTarget{srv: srv, front: f.front}, h2: f}, nil
}

// tidingsH2Target is the project's server over HTTP/2, whose socket
// writes are counted.
type tidingsH2Target struct {
	*tidingsTarget
	h2 *h2Front
}

func (t *tidingsH2Target) socketWrites() int64 { return t.h2.socketWrites() }

// h2Clients are the HTTP/2 transports of one listener set, one per
// connection; listen i goes over transport i mod their number.
type h2Clients struct {
	tr []*http.Transport
}

// newH2Clients makes n transports that speak HTTP/2 by prior knowledge
// and whose connections s tracks, so that s.close closes them.
func newH2Clients(s *listenerSet, n int) *h2Clients {
	c := &h2Clients{tr: make([]*http.Transport, n)}
	for i := range c.tr {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		// One connection each, however many streams: the server allows
		// them all, and the client is not to open more.
		tr.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if !s.track(conn) {
				return nil, errors.New("listener set closed")
			}
			return conn, nil
		}
		c.tr[i] = tr
	}
	return c
}

// warm opens each transport's one connection before the listens start,
// so that concurrent first requests do not each dial.
func (c *h2Clients) warm(ctx context.Context, addr string) error {
	for i, tr := range c.tr {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/warm", nil)
		if err != nil {
			return err
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return fmt.Errorf("opening HTTP/2 connection %d: %w", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			return fmt.Errorf("connection %d speaks %s, not HTTP/2", i, resp.Proto)
		}
	}
	return nil
}

// close lets go of the transports' idle connections; the busy ones are
// closed with the set's.
func (c *h2Clients) close() {
	for _, tr := range c.tr {
		tr.CloseIdleConnections()
	}
}

// openOneH2 opens listen i as a stream of one of the set's HTTP/2
// connections and reads its ack.
func (s *listenerSet) openOneH2(ctx context.Context, i int) error {
	id := strconv.Itoa(i + 1)
	tr := s.h2.tr[i%len(s.h2.tr)]
	body := listenBody(id)
	// The request lives as long as the listen: the set ends it by
	// closing the connections, or ctx before the ack.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://"+s.spec.Addr+listenPath, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	type result struct {
		r   *sse.Reader
		err error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			got <- result{err: fmt.Errorf("sending the listen: %w", err)}
			return
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			got <- result{err: fmt.Errorf("listen refused: %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), b)}
			return
		}
		r := sse.NewReader(resp.Body, 4096)
		ev, err := r.Next()
		if err != nil {
			resp.Body.Close()
			got <- result{err: fmt.Errorf("reading the ack: %w", err)}
			return
		}
		if err := checkAck(ev.Data, id); err != nil {
			resp.Body.Close()
			got <- result{err: err}
			return
		}
		got <- result{r: r}
	}()
	select {
	case res := <-got:
		if res.err != nil {
			return res.err
		}
		slot := s.slot[i]
		s.wg.Go(func() { s.read(slot, res.r, []byte(id)) })
		return nil
	case <-ctx.Done():
		// The stream ends with its connection when the set closes; the
		// goroutine above then returns.
		return fmt.Errorf("opening: %w", context.Cause(ctx))
	}
}

// listenBody is the body of listen id for tools list changes.
func listenBody(id string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":{"_meta":{%q:%q,%q:{}},"notifications":{"toolsListChanged":true}}}`,
		id, mcp.MethodListen, mcp.MetaProtocolVersion, mcp.Version, mcp.MetaClientCapabilities)
}

// checkAck checks that data is the ack of tools listen id.
func checkAck(data []byte, id string) error {
	var ack struct {
		Method string `json:"method"`
		Params struct {
			Meta struct {
				SubscriptionID jsontext.Value `json:"io.modelcontextprotocol/subscriptionId"`
			} `json:"_meta"`
			Notifications mcp.SubscriptionFilter `json:"notifications"`
		} `json:"params"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return fmt.Errorf("decoding the ack: %w", err)
	}
	if ack.Method != mcp.NotifyAcknowledged || string(ack.Params.Meta.SubscriptionID) != id || !ack.Params.Notifications.ToolsListChanged {
		return fmt.Errorf("first message is not the ack of a tools listen: %.200s", data)
	}
	return nil
}

// validateH2 checks a run over HTTP/2.
func (c Config) validateH2() error {
	switch {
	case c.HTTP2Conns < 1 || c.HTTP2Conns > MaxListeners:
		return fmt.Errorf("HTTP/2 connections must be between 1 and %d, not %d", MaxListeners, c.HTTP2Conns)
	case c.Listeners < c.HTTP2Conns || c.Listeners > MaxHTTP2Listeners:
		return fmt.Errorf("listeners over HTTP/2 must be between the %d connections and %d, not %d", c.HTTP2Conns, MaxHTTP2Listeners, c.Listeners)
	case c.Changes < 1 || c.Changes > MaxChanges:
		return fmt.Errorf("changes must be between 1 and %d, not %d", MaxChanges, c.Changes)
	case c.Stalled != 0 || c.Gateway:
		return errors.New("stalled listens and the gateway are measured over HTTP/1.1 only")
	case c.Timeout < 0 || c.WriteTimeout < 0 || c.OpenTimeout < 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}
