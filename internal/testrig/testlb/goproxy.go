package testlb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"tidings/internal/testrig/testkit"
)

// maxReplay is the largest request body the Go proxy keeps to send again
// to the next upstream: the streamhttp handler's own limit, so that any
// request it accepts can be replayed.
const maxReplay = 4 << 20

// goProxy is an httputil.ReverseProxy that picks the upstream of each
// request round robin, in its Transport, and moves on to the next one
// when an upstream refuses the connection.
type goProxy struct {
	ts        *httptest.Server
	transport *http.Transport
	log       *testkit.SyncBuffer
	logger    *log.Logger
	next      atomic.Uint64 // the round-robin counter

	mu    sync.Mutex
	hosts []string // replaced whole, never changed in place

	stopOnce sync.Once
	stopped  chan struct{}
}

// RunReverseProxy runs a Go httputil.ReverseProxy in front of upstreams
// (http://host:port addresses) on an httptest server listening on
// opts.Addr, set up as the streamhttp package documents. Stop it with
// [LB.Stop]. It is the non-test form of [StartReverseProxy], for commands
// that run a balancer.
func RunReverseProxy(opts Options, upstreams ...string) (*LB, error) {
	hosts, err := parseUpstreams(upstreams)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.addr())
	if err != nil {
		return nil, fmt.Errorf("testlb: goproxy: %w", err)
	}
	g := &goProxy{
		transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Minute,
		},
		log:     &testkit.SyncBuffer{},
		hosts:   hosts,
		stopped: make(chan struct{}),
	}
	g.logger = log.New(g.log, "", log.LstdFlags|log.Lmicroseconds)
	rp := &httputil.ReverseProxy{
		// The upstream is chosen in RoundTrip, where a refused connection
		// can be retried on the next one.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.SetXForwarded()
		},
		Transport:     g,
		FlushInterval: -1,
		ErrorLog:      g.logger,
	}
	g.ts = httptest.NewUnstartedServer(g.handler(rp))
	_ = g.ts.Listener.Close()
	g.ts.Listener = ln
	g.ts.Config.ErrorLog = g.logger
	g.ts.Start()
	return &LB{kind: "goproxy", url: g.ts.URL, b: g}, nil
}

// handler enables full duplex, so that the server does not close the
// request body under the proxy once the answer has begun, and keeps the
// body so that it can be sent again.
func (g *goProxy) handler(rp *httputil.ReverseProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/2 always is full duplex, and says so with ErrNotSupported.
		_ = http.NewResponseController(w).EnableFullDuplex()
		if err := keepBody(r); err != nil {
			g.logger.Printf("testlb: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// keepBody reads r's body, up to maxReplay bytes, and sets GetBody so
// that the Transport and RoundTrip can send it again. A longer body is
// passed on as it comes, and cannot be replayed.
func keepBody(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxReplay+1))
	if err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	if len(data) > maxReplay {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
		return nil
	}
	r.ContentLength = int64(len(data))
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	return nil
}

// RoundTrip sends req to the next upstream in turn, and on to the ones
// after it while they refuse the connection and req's body can be sent
// again. A request that failed on a kept-alive connection, before any
// answer came, goes on to the next upstream too, as nginx does with its
// cached upstream connections: the upstream behind it closed the
// connection (a replica killed while the connection sat idle in the pool
// leaves it so), and the write or the read of the answer fails. Any other
// request that reached an upstream is not sent twice.
func (g *goProxy) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	hosts := g.hosts
	g.mu.Unlock()
	start := g.next.Add(1) - 1
	var err error
	for i := range len(hosts) {
		out := req
		if i > 0 {
			out = req.Clone(req.Context())
			if req.GetBody != nil {
				if out.Body, err = req.GetBody(); err != nil {
					return nil, fmt.Errorf("testlb: replaying the request body: %w", err)
				}
			}
		}
		host := hosts[(start+uint64(i))%uint64(len(hosts))]
		out.URL.Host, out.Host = host, ""
		var reused bool
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		var resp *http.Response
		resp, err = g.transport.RoundTrip(out)
		replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
		if err == nil || !replayable || req.Context().Err() != nil || !(refused(err) || reused) {
			return resp, err
		}
		g.logger.Printf("testlb: upstream %s: %v; trying the next", host, err)
	}
	return nil, fmt.Errorf("testlb: every upstream refused the connection: %w", err)
}

// refused tells whether err is a failure to connect: nothing of the
// request reached the upstream, so it may go to another.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (g *goProxy) setUpstreams(hosts []string) error {
	g.mu.Lock()
	g.hosts = hosts
	g.mu.Unlock()
	return nil
}

// stop closes the listener and every client connection, which ends the
// requests being proxied, then waits for their handlers and drops the
// idle upstream connections. Kill does the same.
func (g *goProxy) stop(bool) {
	g.stopOnce.Do(func() {
		g.ts.CloseClientConnections()
		g.ts.Close()
		g.transport.CloseIdleConnections()
		close(g.stopped)
	})
}

func (g *goProxy) done() <-chan struct{} { return g.stopped }

func (g *goProxy) errorLog() string { return g.log.String() }
