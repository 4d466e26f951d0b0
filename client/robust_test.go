package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// authKey carries the request's Authorization header to resource handlers.
type authKey struct{}

// TestLegacyLiveAnswersArePrivate: an answer of a 2025-11-25 server, kept
// fresh by a live Watcher, depends on who asked as far as the client can
// tell, so a view under another authorization never gets it from the
// cache; the client that asked still does.
func TestLegacyLiveAnswersArePrivate(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "old-server", Version: "2025.11"}, server.WithLogger(quietLogger()))
	must(t, srv.AddResource(mcp.Resource{URI: "res://me"}, func(ctx context.Context, _ *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		who, _ := ctx.Value(authKey{}).(string)
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: "res://me", Text: &who}}}, nil
	}))
	h := streamhttp.New(srv) // one handler: it keeps the sessions
	withAuth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authKey{}, r.Header.Get("Authorization"))))
	})
	var modern atomic.Int32
	rec := &recorder{next: legacyOnly(withAuth, refuseJSON, &modern)}
	ts := httptest.NewServer(rec)
	t.Cleanup(func() { closeServer(ts) })

	alice := rawClient(t, ts.URL, WithAuthorization("alice"))
	_, log := watch(t, alice, WatchOptions{URIs: []string{"res://me"}, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "the first read", kindIs(ResourceUpdated))

	ctx := t.Context()
	rr, err := alice.ReadResource(ctx, "res://me")
	must(t, err)
	if got := contentText(t, rr); got != "alice" {
		t.Fatalf("alice read %q", got)
	}
	reads := rec.count(mcp.MethodResourcesRead)
	rr, err = alice.As("bob").ReadResource(ctx, "res://me")
	must(t, err)
	if got := contentText(t, rr); got != "bob" {
		t.Errorf("a view as bob read %q from the cache, want bob's own answer", got)
	}
	if n := rec.count(mcp.MethodResourcesRead); n != reads+1 {
		t.Errorf("bob's read sent %d requests, want 1", n-reads)
	}
	// The client that asked keeps its answer fresh, as before.
	reads = rec.count(mcp.MethodResourcesRead)
	rr, err = alice.ReadResource(ctx, "res://me")
	must(t, err)
	if got := contentText(t, rr); got != "alice" {
		t.Errorf("alice read %q", got)
	}
	if n := rec.count(mcp.MethodResourcesRead); n != reads {
		t.Errorf("alice's second read went to the server (%d requests); want it from the cache", n-reads)
	}
}

// TestEraProbeWaitersKeepTheirDeadline: while one request probes the era,
// another waits for it no longer than its own context allows.
func TestEraProbeWaitersKeepTheirDeadline(t *testing.T) {
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		if r.Method == mcp.MethodDiscover {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
			return rawDiscover, ""
		}
		return `{"tools":[],"resultType":"complete"}`, ""
	}, true)
	c := rawClient(t, ts.URL)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)

	first := make(chan error, 1)
	go func() {
		_, err := c.Tools(context.Background())
		first <- err
	}()
	<-held
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Tools(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("request waiting on the probe: err = %v, want its own deadline", err)
	}
	if d := time.Since(start); d > waitTimeout/2 {
		t.Errorf("request with a 50ms deadline waited %s for another request's probe", d)
	}
	open()
	if err := <-first; err != nil {
		t.Errorf("the probing request: %v", err)
	}
	if era, err := c.Era(t.Context()); err != nil || era != EraModern {
		t.Errorf("Era = %q, %v", era, err)
	}
}

// TestEraProbeTransientFailureStaysModern covers BC-3: only an answer that
// shows an old server leads to initialize. A 5xx says nothing about the
// era: the request fails, and the next one probes again and finds a
// modern server.
func TestEraProbeTransientFailureStaysModern(t *testing.T) {
	cases := []struct {
		name  string
		fail  func(w http.ResponseWriter, id string)
		check func(error) bool
	}{
		{"503 text", func(w http.ResponseWriter, _ string) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}, func(err error) bool {
			var he *HTTPError
			return errors.As(err, &he) && he.Status == http.StatusServiceUnavailable
		}},
		{"500 JSON-RPC error", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"internal error"}}`, id)
		}, func(err error) bool {
			var rpc *jsonrpc.Error
			return errors.As(err, &rpc) && rpc.Code == -32603
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var discovers atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				var r rawRequest
				body, _ := io.ReadAll(req.Body)
				_ = json.Unmarshal(body, &r)
				if r.Method == mcp.MethodDiscover && discovers.Add(1) == 1 {
					tc.fail(w, string(r.ID))
					return
				}
				res := `{"tools":[],"resultType":"complete"}`
				switch r.Method {
				case mcp.MethodDiscover:
					res = rawDiscover
				case mcp.MethodInitialize:
					// A dual-era server would accept the handshake too.
					res = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"dual","version":"1"}}`
				case mcp.NotifyInitialized:
					w.WriteHeader(http.StatusAccepted)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, r.ID, res)
			})
			rec := &recorder{next: h}
			ts := httptest.NewServer(rec)
			t.Cleanup(func() { closeServer(ts) })
			c := rawClient(t, ts.URL)
			if _, err := c.Tools(t.Context()); !tc.check(err) {
				t.Errorf("first request: err = %v, want the server's failure", err)
			}
			if _, err := c.Tools(t.Context()); err != nil {
				t.Errorf("second request: %v", err)
			}
			if era, err := c.Era(t.Context()); err != nil || era != EraModern {
				t.Errorf("Era = %q, %v; want %s", era, err, EraModern)
			}
			if n := rec.count(mcp.MethodInitialize); n != 0 {
				t.Errorf("initialize sent %d times after a transient failure", n)
			}
			if n := discovers.Load(); n != 2 {
				t.Errorf("server/discover sent %d times, want 2 (probed again)", n)
			}
		})
	}
}

// TestLegacyReprobeUnderLoad: requests of a legacy session run while the
// era is forgotten and probed again, over and over; each request uses the
// session it started with, so none finds it gone halfway (which used to
// be a nil dereference).
func TestLegacyReprobeUnderLoad(t *testing.T) {
	f := newLegacyFix(t, refuseJSON)
	c := f.client(t)
	ctx := t.Context()
	if _, err := c.CallTool(ctx, "a", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.CallTool(ctx, "a", map[string]any{}); err != nil {
					t.Errorf("CallTool during reprobes: %v", err)
					return
				}
			}
		})
	}
	for range 100 {
		c.forgetEra()
		if _, err := c.Era(ctx); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
}

// TestCloseStopsServerGroup: a server that started a helper holding its
// output open is stopped with the helper, and Close returns promptly.
func TestCloseStopsServerGroup(t *testing.T) {
	c, err := NewCommand(t.Context(), "sh", []string{"-c", "sleep 30 & exec sleep 600"}, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	c.t.(*commandTransport).cur.grace = 100 * time.Millisecond
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("Close still waiting after %s for a server whose helper holds its stderr", time.Since(start))
	}
}

// spawnExiting returns a spawn function for a server that exits at once.
func spawnExiting(t *testing.T) func(context.Context) (*stdioTransport, error) {
	return func(ctx context.Context) (*stdioTransport, error) {
		return startStdio(ctx, "sh", []string{"-c", "exit 0"}, nil, nil, nil, 1<<20)
	}
}

func waitDone(t *testing.T, p *stdioTransport) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatal("the server process did not end")
	}
}

// TestCrashLoopGuardResets: a death after a long life ends a run of quick
// deaths, so two more quick deaths after it are not a crash loop.
func TestCrashLoopGuardResets(t *testing.T) {
	tr, err := newCommandTransport(t.Context(), t.Context(), spawnExiting(t), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.close() })
	for i, quick := range []bool{true, true, false, true, true} {
		waitDone(t, tr.cur)
		tr.quickDeath = time.Hour // every life counts as quick
		if !quick {
			tr.quickDeath = 0 // no life counts as quick
		}
		if _, err := tr.current(); err != nil {
			t.Fatalf("restart %d: %v; want a restart (a long life ended the run of quick deaths)", i+1, err)
		}
	}
}

// TestCrashLoopJudgedAtDeath: a process that died right after its start is
// a quick death even when the next request comes much later.
func TestCrashLoopJudgedAtDeath(t *testing.T) {
	tr, err := newCommandTransport(t.Context(), t.Context(), spawnExiting(t), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.close() })
	tr.quickDeath = 200 * time.Millisecond
	for i := range maxQuickDeath {
		p := tr.cur
		waitDone(t, p)
		waitUntil(t, "the quick-death bound to pass", func() bool { return time.Since(p.started) > 2*tr.quickDeath })
		_, err := tr.current()
		if i < maxQuickDeath-1 && err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		if i == maxQuickDeath-1 && !errors.Is(err, ErrServerGone) {
			t.Fatalf("after %d quick deaths: err = %v, want ErrServerGone", maxQuickDeath, err)
		}
	}
}

// lineWriter hands each line written to it to a channel.
type lineWriter chan []byte

func (w lineWriter) Write(b []byte) (int, error) { w <- append([]byte(nil), b...); return len(b), nil }
func (w lineWriter) Close() error                { return nil }

// TestStdioCancelledEndsOnlyListens: notifications/cancelled from the
// server ends a pending listen, but not another request with the same id
// (a 2025-11-25 server cancelling a request of its own).
func TestStdioCancelledEndsOnlyListens(t *testing.T) {
	for _, method := range []string{mcp.MethodToolsCall, mcp.MethodListen} {
		t.Run(method, func(t *testing.T) {
			w := make(lineWriter, 4)
			r, rw := io.Pipe() // a server that writes nothing on its own
			st := newStdioConn(r, w, r, 1<<20, nil, nil)
			t.Cleanup(func() { _ = rw.Close(); _ = st.close() })
			got := make(chan *jsonrpc.Message, 1)
			go func() {
				m, err := st.roundTrip(t.Context(), &outbound{id: jsonrpc.IntID(7), method: method, body: []byte(`{}`)}, nil)
				if err != nil {
					t.Error(err)
				}
				got <- m
			}()
			<-w // the request is pending once it is written
			decode := func(s string) *jsonrpc.Message {
				m, err := jsonrpc.Decode([]byte(s), 0)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			st.route(decode(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`))
			st.route(decode(`{"jsonrpc":"2.0","id":7,"result":{}}`))
			m := <-got
			if method == mcp.MethodListen && m.Method != mcp.NotifyCancelled {
				t.Errorf("listen ended with %+v, want the server's notifications/cancelled", m)
			}
			if method != mcp.MethodListen && !m.IsResponse() {
				t.Errorf("%s ended with %q, want its response: the server cancelled a request of its own", method, m.Method)
			}
		})
	}
}

// TestCloseCancelsInFlight: Close ends a request in flight with ErrClosed
// instead of leaving it to its timeout.
func TestCloseCancelsInFlight(t *testing.T) {
	arrived := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var r rawRequest
		body, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(body, &r)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == mcp.MethodDiscover {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, r.ID, rawDiscover)
			return
		}
		arrived <- struct{}{}
		<-req.Context().Done()
	})
	ts := httptest.NewServer(h)
	t.Cleanup(func() { closeServer(ts) })
	c := rawClient(t, ts.URL)
	res := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), "slow", nil)
		res <- err
	}()
	<-arrived
	must(t, c.Close())
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("request in flight at Close: err = %v, want ErrClosed", err)
		}
	case <-time.After(waitTimeout / 2):
		t.Fatal("request in flight still running after Close")
	}
}

// TestCloseRefusesBackgroundAnswers: once Close has begun, a legacy
// server's request gets no answer started (which Close would not wait for).
func TestCloseRefusesBackgroundAnswers(t *testing.T) {
	var posts atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(func() { closeServer(ts) })
	c := rawClient(t, ts.URL)
	ls := &legacySession{version: mcp.LegacyVersion}
	c.era.decided.Store(&eraDecision{dialect: ls})
	must(t, c.Close())
	m, err := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), 0)
	must(t, err)
	c.answerServer(context.Background(), m)
	c.life.bg.Wait()
	if n := posts.Load(); n != 0 {
		t.Errorf("%d answers sent after Close", n)
	}
}
