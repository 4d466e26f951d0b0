package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"tidings/client"
	"tidings/gateway"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// forgetfulServer is a 2025-11-25 server on one loopback address that
// forgets its sessions when it restarts, and then answers a request of a
// session it does not know as servers built on the TypeScript SDK do:
// 400, naming the session id, where the spec says 404.
type forgetfulServer struct {
	addr string
	srv  *server.Server
	hs   *http.Server
	done chan struct{}
}

func startForgetful(t *testing.T, tools ...string) *forgetfulServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forgetfulServer{addr: ln.Addr().String()}
	f.serve(t, ln, tools)
	t.Cleanup(f.down)
	return f
}

func (f *forgetfulServer) url() string { return "http://" + f.addr + "/mcp" }

func (f *forgetfulServer) serve(t *testing.T, ln net.Listener, tools []string) {
	f.srv = server.New(mcp.Implementation{Name: "forgetful", Version: "1"})
	for _, name := range tools {
		addEcho(t, f.srv, name, `{"type":"object"}`)
	}
	h := streamhttp.New(f.srv)
	f.hs = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderSessionID) != "" {
			w = &notFoundAs400{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	})}
	f.done = make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		_ = hs.Serve(ln)
	}(f.hs, f.done)
}

// down shuts the server and its sessions down, and closes every connection.
func (f *forgetfulServer) down() {
	if f.hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
	_ = f.hs.Close()
	<-f.done
	f.hs = nil
}

// restart brings up a new server, with tools, on the same address.
func (f *forgetfulServer) restart(t *testing.T, tools ...string) {
	t.Helper()
	f.down()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", f.addr, err)
	}
	f.serve(t, ln, tools)
}

// notFoundAs400 answers 400 with the TypeScript SDK's words where the
// handler answers 404.
type notFoundAs400 struct {
	http.ResponseWriter
	swallow bool
}

func (w *notFoundAs400) WriteHeader(code int) {
	if code != http.StatusNotFound {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.swallow = true
	w.ResponseWriter.Header().Del("Content-Length")
	w.ResponseWriter.Header().Set("Content-Type", "application/json")
	w.ResponseWriter.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w.ResponseWriter, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`)
}

func (w *notFoundAs400) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *notFoundAs400) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.swallow {
		f.Flush()
	}
}

// waitAdded waits up to d for a ToolsChanged event that adds name.
func waitAdded(t *testing.T, events <-chan client.Event, name string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-events:
			if e.Kind == client.ToolsChanged && slices.Contains(e.Added, name) {
				return
			}
		case <-deadline:
			t.Fatalf("%s not back within %v", name, d)
		}
	}
}

// TestRestartedServerThatAnswers400IsBack: a 2025-11-25 server that
// restarts and then answers the old session with 400 is spoken to again
// on a new session — by a watcher of its own and behind the gateway —
// and its tools are back within seconds, told to a listener.
func TestRestartedServerThatAnswers400IsBack(t *testing.T) {
	f := startForgetful(t, "echo")
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "old", URL: f.url(), Protocol: "2025-11-25"}}})
	gw := client.NewHTTP(url)
	defer gw.Close()
	_, viaGateway := watchTools(t, gw)
	waitAdded(t, viaGateway, "old_echo", waitTimeout)

	direct := client.NewHTTP(f.url(), client.WithProtocolVersion("2025-11-25"))
	defer direct.Close()
	_, directly := watchTools(t, direct)
	waitAdded(t, directly, "echo", waitTimeout)

	f.restart(t, "echo", "fresh")
	waitAdded(t, directly, "fresh", 5*time.Second)
	waitAdded(t, viaGateway, "old_fresh", 5*time.Second)
}
