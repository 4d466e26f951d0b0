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
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/gateway"
	"tidings/internal/sse"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// Server names for reports.
const (
	ServerTidings = "tidings"
	ServerNaive   = "naive"
	// ServerGateway is the project's server behind a gateway: the listens
	// are the gateway's, the changes its upstream's.
	ServerGateway = "gateway"
	// ServerUnparked is the project's server without streamhttp.WithParking:
	// every listen on its own goroutines, as before listens were parked.
	ServerUnparked = "tidings-unparked"
	// ServerServe is the project's server as a Go program serves it:
	// streamhttp.Serve, with the Handler, made without WithParking, on
	// an http.ServeMux (the front door parks its listens).
	ServerServe = "tidings-serve"
)

// target is one server under test, behind its own loopback http.Server.
type target interface {
	// change makes change i (a tools list change) and returns once the
	// server has taken it.
	change(ctx context.Context, i int) error
	// close ends every stream and stops serving.
	close(ctx context.Context) error
	// addrs returns where healthy and stalled listens connect.
	addrs() (addr, stalledAddr string)
}

// front is an in-process http.Server on two loopback ports: healthy
// listens connect to addr, stalled ones to stalledAddr, whose connections
// get the smallest send buffer the kernel allows (see stalledIDBytes).
type front struct {
	hs          *http.Server
	addr        string
	stalledAddr string
	served      chan error // the end of each Serve call
	serves      int        // how many Serve calls run, for shutdown to wait for
}

func startFront(h http.Handler) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(listenPath, h)
	f := &front{
		hs: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 30 * time.Second,
			ErrorLog:          log.New(io.Discard, "", 0),
		},
		addr:        ln.Addr().String(),
		stalledAddr: sln.Addr().String(),
		served:      make(chan error, 2),
		serves:      2,
	}
	go func() { f.served <- f.hs.Serve(ln) }()
	go func() { f.served <- f.hs.Serve(smallSendBuffers{sln}) }()
	return f, nil
}

func (f *front) addrs() (string, string) { return f.addr, f.stalledAddr }

// shutdown waits (within ctx) for every handler to return, then closes
// whatever is left, and waits for its Serve calls to end.
func (f *front) shutdown(ctx context.Context) error {
	err := f.hs.Shutdown(ctx)
	if err != nil {
		_ = f.hs.Close()
		err = fmt.Errorf("http server shutdown: %w", err)
	}
	for range f.serves {
		if e := <-f.served; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}
	return err
}

// smallSendBuffers shrinks the send buffer of every accepted connection.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(stalledBuffer)
	}
	return c, err
}

// tidingsTarget is the project's server: streamhttp over server.Server,
// its listens parked (streamhttp.WithParking) unless it is the unparked
// measurement. Its close ends the listens with the server's Shutdown
// before the http.Server's, which parked listens need.
type tidingsTarget struct {
	srv *server.Server
	*front
}

// churnTool is added by even changes and removed by odd ones.
var churnTool = mcp.Tool{Name: "churn", Description: "Added and removed to make tools list changes."}

func noopTool(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}

func startTidings(writeTimeout time.Duration, hopts ...streamhttp.Option) (*tidingsTarget, error) {
	// Every listener is the one anonymous principal, and there may be
	// more of them than a principal, or a server, may keep by default.
	room := server.Allowance{Listens: MaxListeners}
	srv := server.New(mcp.Implementation{Name: "tidings-bench", Version: "0"},
		server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room}))
	if err := srv.AddTool(mcp.Tool{Name: "base"}, noopTool); err != nil {
		return nil, err
	}
	f, err := startFront(streamhttp.New(srv, append(hopts, streamhttp.WithWriteTimeout(writeTimeout))...))
	if err != nil {
		return nil, err
	}
	return &tidingsTarget{srv: srv, front: f}, nil
}

func (t *tidingsTarget) change(_ context.Context, i int) error {
	if i%2 == 0 {
		return t.srv.AddTool(churnTool, noopTool)
	}
	if t.srv.RemoveTools(churnTool.Name) != 1 {
		return errors.New("the churn tool was not registered")
	}
	return nil
}

func (t *tidingsTarget) close(ctx context.Context) error {
	err := t.srv.Shutdown(ctx)
	return errors.Join(err, t.front.shutdown(ctx))
}

// gatewayTarget is a gateway in front of the project's server, the
// upstream, which it reaches over HTTP on loopback: a change is made on
// the upstream, which tells the gateway's one listen; the gateway re-reads
// the list and tells the listens under test, its own.
type gatewayTarget struct {
	up *tidingsTarget
	g  *gateway.Gateway
	*front
}

// gatewaySettle bounds the wait for the gateway's listen on its upstream.
const gatewaySettle = 10 * time.Second

func startGateway(ctx context.Context, writeTimeout time.Duration) (_ *gatewayTarget, err error) {
	up, err := startTidings(writeTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			err = errors.Join(err, up.close(cctx))
		}
	}()
	room := server.Allowance{Listens: MaxListeners}
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "upstream", URL: "http://" + up.addr + listenPath}}}
	g, err := gateway.New(ctx, cfg, gateway.WithServerOptions(server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room})))
	if err != nil {
		return nil, err
	}
	// The listens under test open once the gateway hears of the
	// upstream's changes, so that none of them is missed.
	deadline := time.NewTimer(gatewaySettle)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for st := g.Stats(); len(st) != 1 || st[0].Listens != 1; st = g.Stats() {
		select {
		case <-tick.C:
		case <-deadline.C:
			g.Close()
			return nil, fmt.Errorf("the gateway's listen on its upstream was not live within %v", gatewaySettle)
		case <-ctx.Done():
			g.Close()
			return nil, ctx.Err()
		}
	}
	f, err := startFront(streamhttp.New(g.Server(), streamhttp.WithWriteTimeout(writeTimeout), streamhttp.WithParking()))
	if err != nil {
		g.Close()
		return nil, err
	}
	return &gatewayTarget{up: up, g: g, front: f}, nil
}

func (t *gatewayTarget) change(ctx context.Context, i int) error { return t.up.change(ctx, i) }

// close ends the gateway's listens, then its upstream listen and client,
// then the upstream.
func (t *gatewayTarget) close(ctx context.Context) error {
	err := t.g.Server().Shutdown(ctx)
	err = errors.Join(err, t.front.shutdown(ctx))
	t.g.Close()
	return errors.Join(err, t.up.close(ctx))
}

// naiveTarget is the baseline.
type naiveTarget struct {
	b *broadcaster
	*front
}

func startNaive() (*naiveTarget, error) {
	b := newBroadcaster()
	f, err := startFront(b)
	if err != nil {
		b.close()
		return nil, err
	}
	return &naiveTarget{b: b, front: f}, nil
}

func (t *naiveTarget) change(ctx context.Context, _ int) error { return t.b.publish(ctx) }

func (t *naiveTarget) close(ctx context.Context) error {
	t.b.stopping()
	err := t.front.shutdown(ctx)
	t.b.close()
	return err
}

// broadcaster is the baseline the hub is measured against: the plainest
// SSE fan-out net/http allows. Each listen writes its ack, registers its
// stream and waits; a single publisher goroutine writes each notification
// to every registered stream in turn, flushing each, and moves to the
// next stream only when that write returns. That is how a sequential
// fan-out behaves: cheap per stream, but one stream that cannot take a
// write holds up every stream after it.
type broadcaster struct {
	mu      sync.Mutex
	streams []*naiveStream
	pub     chan struct{}
	closing chan struct{}
	once    sync.Once
	done    chan struct{}
}

type naiveStream struct {
	w     http.ResponseWriter
	f     http.Flusher
	event []byte // the list_changed event, tagged with the listen's id
}

func newBroadcaster() *broadcaster {
	b := &broadcaster{pub: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *broadcaster) run() {
	defer close(b.done)
	for {
		select {
		case <-b.closing:
			return
		case <-b.pub:
		}
		b.mu.Lock()
		for _, s := range b.streams {
			if _, err := s.w.Write(s.event); err == nil {
				s.f.Flush()
			}
		}
		b.mu.Unlock()
	}
}

func (b *broadcaster) publish(ctx context.Context) error {
	select {
	case b.pub <- struct{}{}:
		return nil
	case <-b.closing:
		return errors.New("broadcaster closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopping makes every handler return (once the publisher lets go of the
// stream list) and the publisher stop after its current round.
func (b *broadcaster) stopping() { b.once.Do(func() { close(b.closing) }) }

// close stops the broadcaster and waits for its publisher. A publisher
// blocked on a write is released when its connection closes.
func (b *broadcaster) close() {
	b.stopping()
	<-b.done
}

func (b *broadcaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, meta, ok := startListen(w, r)
	if !ok {
		return
	}
	ack := jsonrpc.AppendNotification(nil, mcp.NotifyAcknowledged,
		[]byte(`{"_meta":`+meta+`,"notifications":{"toolsListChanged":true}}`))
	s := &naiveStream{w: w, f: f, event: sse.AppendEvent(nil,
		jsonrpc.AppendNotification(nil, mcp.NotifyToolsListChanged, []byte(`{"_meta":`+meta+`}`)))}
	// The stream is on the list before its ack is written, and the ack is
	// written under the lock the publisher holds: a client that has its
	// ack will hear of the next change, which never comes before the ack.
	b.mu.Lock()
	b.streams = append(b.streams, s)
	if _, err := w.Write(sse.AppendEvent(nil, ack)); err == nil {
		f.Flush()
	}
	b.mu.Unlock()
	select {
	case <-r.Context().Done():
	case <-b.closing:
	}
	// The publisher may be writing to w: the handler must not return
	// (which invalidates w) before it has let go of the list.
	b.mu.Lock()
	if i := slices.Index(b.streams, s); i >= 0 {
		b.streams = slices.Delete(b.streams, i, i+1)
	}
	b.mu.Unlock()
}

// memSnap is one process's memory and goroutine count.
type memSnap struct {
	heapInuse, heapAlloc, stackInuse, rss int64
	goroutines                            int
}

// snapshot collects garbage and reads the memory statistics. It collects
// twice: what sync.Pools hold (net/http's buffers, for one) survives one
// collection, and would otherwise let a measurement reuse the previous
// one's freed buffers without counting them.
func snapshot() memSnap {
	runtime.GC()
	// The second collection also hands freed memory back to the system,
	// so that the resident size grows only with what is live.
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSnap{
		heapInuse:  int64(m.HeapInuse),
		heapAlloc:  int64(m.HeapAlloc),
		stackInuse: int64(m.StackInuse),
		rss:        residentBytes(),
		goroutines: runtime.NumGoroutine(),
	}
}

// Footprint is what one listen costs one process: the growth of its
// memory statistics (after a garbage collection) and goroutine count from
// before the listens were opened to after every ack, divided by their
// number. Kernel memory (socket buffers) is not included.
type Footprint struct {
	HeapInuse  float64 `json:"heapInuseBytesPerListen"`
	HeapAlloc  float64 `json:"heapAllocBytesPerListen"`
	StackInuse float64 `json:"stackInuseBytesPerListen"`
	// RSS is the growth of the resident set (Linux; 0 elsewhere):
	// everything the process holds, net/http's buffers and the runtime's
	// own structures included, as the system counts it.
	RSS        float64 `json:"rssBytesPerListen"`
	Goroutines float64 `json:"goroutinesPerListen"`
	// RSSTotal is the process's resident set once every listen is open
	// (0 where it cannot be read).
	RSSTotal int64 `json:"rssBytes,omitzero"`
}

func footprint(before, after memSnap, n int) Footprint {
	d := float64(n)
	return Footprint{
		HeapInuse:  float64(after.heapInuse-before.heapInuse) / d,
		HeapAlloc:  float64(after.heapAlloc-before.heapAlloc) / d,
		StackInuse: float64(after.stackInuse-before.stackInuse) / d,
		RSS:        float64(after.rss-before.rss) / d,
		Goroutines: float64(after.goroutines-before.goroutines) / d,
		RSSTotal:   after.rss,
	}
}

// startListen reads a subscriptions/listen request as the two bare
// servers take it, and starts its event stream: it returns the flusher
// and the _meta that tags the stream's messages, or false once it has
// answered a request that is not one.
func startListen(w http.ResponseWriter, r *http.Request) (f http.Flusher, meta string, ok bool) {
	f, ok = w.(http.Flusher)
	if r.Method != http.MethodPost || !ok {
		http.Error(w, "POST a subscriptions/listen request", http.StatusMethodNotAllowed)
		return nil, "", false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return nil, "", false
	}
	var req struct {
		ID     jsontext.Value `json:"id"`
		Method string         `json:"method"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Method != mcp.MethodListen || len(req.ID) == 0 {
		http.Error(w, "not a subscriptions/listen request", http.StatusBadRequest)
		return nil, "", false
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return f, `{"` + mcp.MetaSubscriptionID + `":` + string(req.ID) + `}`, true
}

// serveTarget is the server behind streamhttp.Serve: ServerServe, on
// two listeners as front's (healthy and stalled listens), and
// ServerTidingsH2, on one whose socket writes it counts.
type serveTarget struct {
	srv         *server.Server
	addr        string
	stalledAddr string
	writes      *atomic.Int64
	stop        context.CancelFunc
	served      chan error
	serves      int
}

// startServe is ServerServe: the Handler, made without WithParking, on a
// ServeMux, as a program that only calls Serve has it.
func startServe(writeTimeout time.Duration) (*serveTarget, error) {
	return startServeOn(writeTimeout, true)
}

// startServeOn serves the project's server with streamhttp.Serve and
// opts: with stalled, on a second listener for the stalled listens and
// the Handler without WithParking (the front door parks its listens);
// without, on one listener whose socket writes are counted.
func startServeOn(writeTimeout time.Duration, stalled bool, opts ...streamhttp.ServeOption) (*serveTarget, error) {
	room := server.Allowance{Listens: max(MaxListeners, MaxHTTP2Listeners)}
	srv := server.New(mcp.Implementation{Name: "tidings-bench", Version: "0"},
		server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room}))
	if err := srv.AddTool(mcp.Tool{Name: "base"}, noopTool); err != nil {
		return nil, err
	}
	hopts := []streamhttp.Option{streamhttp.WithWriteTimeout(writeTimeout)}
	if !stalled {
		hopts = append(hopts, streamhttp.WithParking())
	}
	mux := http.NewServeMux()
	mux.Handle(listenPath, streamhttp.New(srv, hopts...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{ln}
	t := &serveTarget{srv: srv, addr: ln.Addr().String(), stalledAddr: ln.Addr().String()}
	if stalled {
		sln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ln.Close()
			return nil, err
		}
		lns = append(lns, smallSendBuffers{sln})
		t.stalledAddr = sln.Addr().String()
	} else {
		counted := &countingListener{Listener: ln}
		lns[0], t.writes = counted, &counted.writes
	}
	// Every listen comes from 127.0.0.1: no cap per address.
	opts = append([]streamhttp.ServeOption{streamhttp.WithConnLimits(0, 0), streamhttp.WithTimeouts(0, 0, 0, writeTimeout),
		streamhttp.WithServeLogger(slog.New(slog.DiscardHandler))}, opts...)
	ctx, stop := context.WithCancel(context.Background())
	t.stop, t.served, t.serves = stop, make(chan error, len(lns)), len(lns)
	for _, l := range lns {
		go func() { t.served <- streamhttp.Serve(ctx, l, mux, opts...) }()
	}
	return t, nil
}

func (t *serveTarget) addrs() (string, string) { return t.addr, t.stalledAddr }

// socketWrites returns how many writes the server made to its sockets
// (0 unless they are counted).
func (t *serveTarget) socketWrites() int64 {
	if t.writes == nil {
		return 0
	}
	return t.writes.Load()
}

func (t *serveTarget) change(_ context.Context, i int) error {
	if i%2 == 0 {
		return t.srv.AddTool(churnTool, noopTool)
	}
	if t.srv.RemoveTools(churnTool.Name) != 1 {
		return errors.New("the churn tool was not registered")
	}
	return nil
}

// close ends Serve, which ends the listens with the server's Shutdown.
func (t *serveTarget) close(ctx context.Context) error {
	err := t.srv.Shutdown(ctx)
	t.stop()
	for range t.serves {
		err = errors.Join(err, <-t.served)
	}
	return err
}
