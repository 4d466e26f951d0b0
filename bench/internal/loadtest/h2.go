package loadtest

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/streamhttp"
)

// ServerTidingsH2 is the project's server with its listens over HTTP/2
// without TLS (h2c), many to a connection.
const ServerTidingsH2 = "tidings-h2"

// MaxHTTP2Listeners bounds the listens of a run over HTTP/2: they need
// one file descriptor per connection, not per listen, so the open-file
// limit does not bound them.
const MaxHTTP2Listeners = 1000000

// startFrontH2 serves h on loopback with HTTP/2 by prior knowledge as
// well as HTTP/1.1, one connection holding any number of streams, as
// net/http's own server serves it: the floor's front.
func startFrontH2(h http.Handler) (*front, error) {
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
	f := &front{hs: hs, addr: ln.Addr().String(), stalledAddr: ln.Addr().String(), served: make(chan error, 1), serves: 1}
	go func() { f.served <- hs.Serve(ln) }()
	return f, nil
}

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

// startTidingsH2 is the project's server as tidings serve runs it,
// streamhttp.Serve, over HTTP/2 without TLS (h2c), with room for
// MaxHTTP2Listeners listens on a connection, its socket writes counted;
// noCoalesce writes each batch of frames as it comes.
func startTidingsH2(writeTimeout time.Duration, noCoalesce bool) (*serveTarget, error) {
	writeBuffer := streamhttp.DefaultHTTP2WriteBuffer
	if noCoalesce {
		writeBuffer = 0
	}
	t, err := startServeOn(writeTimeout, false, streamhttp.WithHTTP2(MaxHTTP2Listeners, writeBuffer))
	if err != nil {
		return nil, err
	}
	return t, nil
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
