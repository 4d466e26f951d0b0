package testlb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/internal/sse"
	"tidings/internal/testrig/testlb"
)

// balancer is one kind of LB under test.
type balancer struct {
	name  string
	start func(testing.TB, ...string) *testlb.LB
}

// balancers are the two kinds of LB.
func balancers() []balancer {
	return []balancer{{"nginx", testlb.StartNginx}, {"goproxy", testlb.StartReverseProxy}}
}

// replica is an upstream that answers with its own name: POST /name
// echoes the body after the name; GET /events streams one event, waits
// for release (or the client to go), then sends a second.
type replica struct {
	name string
	ts   *httptest.Server
	kill sync.Once
}

func startReplicas(t *testing.T, release <-chan struct{}, names ...string) []*replica {
	t.Helper()
	var rs []*replica
	for _, name := range names {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /name", func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%s %s", name, body)
		})
		mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: first from %s\n\n", name)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: second from %s\n\n", name)
		})
		r := &replica{name: name, ts: httptest.NewServer(mux)}
		t.Cleanup(r.stop)
		rs = append(rs, r)
	}
	return rs
}

// stop kills the replica: its listener and every connection close.
func (r *replica) stop() {
	r.kill.Do(func() {
		r.ts.CloseClientConnections()
		r.ts.Close()
	})
}

func urls(rs []*replica) []string {
	var us []string
	for _, r := range rs {
		us = append(us, r.ts.URL)
	}
	return us
}

// newClient returns a client of its own, whose connections go with t.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// names POSTs n requests, one after the other, and returns how many each
// replica answered.
func names(t *testing.T, c *http.Client, lb *testlb.LB, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := range n {
		body := fmt.Sprintf("request %d", i)
		resp, err := c.Post(lb.URL()+"/name", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, %q, %v", i, resp.StatusCode, data, err)
		}
		name, echo, _ := strings.Cut(string(data), " ")
		if echo != body {
			t.Fatalf("request %d: %s echoed %q, want %q", i, name, echo, body)
		}
		got[name]++
	}
	return got
}

func wantCounts(t *testing.T, got map[string]int, want map[string]int) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests per replica = %v, want %v", got, want)
	}
}

// TestRoundRobin: requests one after another go to each replica in turn.
func TestRoundRobin(t *testing.T) {
	for _, b := range balancers() {
		t.Run(b.name, func(t *testing.T) {
			rs := startReplicas(t, nil, "a", "b", "c")
			lb := b.start(t, urls(rs)...)
			wantCounts(t, names(t, newClient(t), lb, 9), map[string]int{"a": 3, "b": 3, "c": 3})
		})
	}
}

// TestStreamUnbuffered: an event reaches the client while the replica's
// handler is still running, held until the client has it.
func TestStreamUnbuffered(t *testing.T) {
	for _, b := range balancers() {
		t.Run(b.name, func(t *testing.T) {
			release := make(chan struct{})
			rs := startReplicas(t, release, "a", "b", "c")
			lb := b.start(t, urls(rs)...)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, lb.URL()+"/events", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := newClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
			}
			r := sse.NewReader(resp.Body, 0)
			first, err := r.Next()
			if err != nil {
				t.Fatalf("the first event did not arrive while the handler was held: %v", err)
			}
			from, ok := strings.CutPrefix(string(first.Data), "first from ")
			if !ok {
				t.Fatalf("first event %q", first.Data)
			}
			close(release)
			second, err := r.Next()
			if err != nil || string(second.Data) != "second from "+from {
				t.Fatalf("second event %q, %v; want %q", second.Data, err, "second from "+from)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after the second event: %v, want EOF", err)
			}
		})
	}
}

// TestKilledReplica: once a replica is gone, every request reaches one of
// the others.
func TestKilledReplica(t *testing.T) {
	for _, b := range balancers() {
		t.Run(b.name, func(t *testing.T) {
			rs := startReplicas(t, nil, "a", "b", "c")
			lb := b.start(t, urls(rs)...)
			c := newClient(t)
			wantCounts(t, names(t, c, lb, 3), map[string]int{"a": 1, "b": 1, "c": 1})
			rs[1].stop()
			got := names(t, c, lb, 12)
			if got["b"] != 0 || got["a"] == 0 || got["c"] == 0 || got["a"]+got["c"] != 12 {
				t.Errorf("requests per replica after b was killed = %v, want all 12 on a and c", got)
			}
		})
	}
}

// TestSetUpstreams: a replica taken out of the set gets no requests; put
// back, it gets its share again.
func TestSetUpstreams(t *testing.T) {
	for _, b := range balancers() {
		t.Run(b.name, func(t *testing.T) {
			rs := startReplicas(t, nil, "a", "b", "c")
			lb := b.start(t, urls(rs)...)
			c := newClient(t)
			if err := lb.SetUpstreams(rs[0].ts.URL, rs[2].ts.URL); err != nil {
				t.Fatal(err)
			}
			wantCounts(t, names(t, c, lb, 6), map[string]int{"a": 3, "c": 3})
			if err := lb.SetUpstreams(urls(rs)...); err != nil {
				t.Fatal(err)
			}
			wantCounts(t, names(t, c, lb, 9), map[string]int{"a": 3, "b": 3, "c": 3})
			if err := lb.SetUpstreams(rs[0].ts.URL + "/mcp"); err == nil {
				t.Error("SetUpstreams took an upstream with a path")
			}
		})
	}
}

// TestKill: a killed balancer cuts its streams and refuses connections.
func TestKill(t *testing.T) {
	for _, b := range balancers() {
		t.Run(b.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			rs := startReplicas(t, release, "a")
			lb := b.start(t, urls(rs)...)
			c := newClient(t)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, lb.URL()+"/events", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := sse.NewReader(resp.Body, 0)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			lb.Kill()
			select {
			case <-lb.Done():
			default:
				t.Error("Done is open after Kill")
			}
			if ev, err := r.Next(); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("stream after Kill: event %q, %v; want it cut", ev.Data, err)
			}
			if resp, err := c.Post(lb.URL()+"/name", "text/plain", nil); err == nil {
				resp.Body.Close()
				t.Errorf("a request after Kill: status %d, want a refused connection", resp.StatusCode)
			}
		})
	}
}

// TestBadUpstreams: addresses the balancers cannot use are refused.
func TestBadUpstreams(t *testing.T) {
	for _, ups := range [][]string{nil, {"127.0.0.1:80"}, {"https://127.0.0.1:1"}, {"http://127.0.0.1"}, {"http://127.0.0.1:1/mcp"}} {
		if lb, err := testlb.RunReverseProxy(testlb.Options{}, ups...); err == nil {
			lb.Stop()
			t.Errorf("RunReverseProxy(%q) succeeded", ups)
		}
	}
}

// TestKeptConnectionClosed: an upstream that closes a kept-alive
// connection as the next request arrives on it, as a replica killed while
// the proxy held its connection idle does, costs the client nothing: the
// Go proxy sends the request on to the next upstream.
func TestKeptConnectionClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { answerOnce(conn, "dying") })
		}
	})
	rs := startReplicas(t, nil, "b")
	lb := testlb.StartReverseProxy(t, "http://"+ln.Addr().String(), rs[0].ts.URL)
	got := names(t, newClient(t), lb, 6)
	if got["dying"] == 0 || got["dying"]+got["b"] != 6 {
		t.Errorf("requests per replica = %v, want each answered, by dying (on a new connection) or by b", got)
	}
	if !strings.Contains(lb.ErrorLog(), "trying the next") {
		t.Errorf("the proxy never met a kept connection closed under it; its log:\n%s", lb.ErrorLog())
	}
}

// answerOnce answers the first request on conn as a replica named name,
// keeping the connection open, and closes it when the second arrives.
func answerOnce(conn net.Conn, name string) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	answer := fmt.Sprintf("%s %s", name, body)
	if _, err := fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer); err != nil {
		return
	}
	_, _ = http.ReadRequest(br) // and close the connection under it
}
