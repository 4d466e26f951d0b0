package writecut_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"tidings/streamhttp/internal/writecut"
)

// serveH2C serves h on loopback over HTTP/2 without TLS and returns a
// client of it.
func serveH2C(t *testing.T, h http.HandlerFunc) (string, *http.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	hs.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = hs.Close()
		<-served
	})
	return "http://" + ln.Addr().String() + "/", &http.Client{Transport: tr}
}

const timeout = 200 * time.Millisecond

// TestIdleStreamLives: a stream idle for longer than the timeout between
// two writes is not cut, as it would be by a write deadline left in
// place over HTTP/2.
func TestIdleStreamLives(t *testing.T) {
	errs := make(chan error, 1)
	url, c := serveH2C(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		cut := writecut.New(rc, timeout, nil)
		defer cut.Close()
		write := func(s string) error {
			cut.Begin()
			defer cut.End()
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
			return rc.Flush()
		}
		if err := write("first\n"); err != nil {
			errs <- err
			return
		}
		// The idle time between two changes is the point of the test.
		time.Sleep(3 * timeout)
		errs <- write("second\n")
	})
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "first\nsecond\n" {
		t.Fatalf("read %q, %v: the idle stream was cut", b, err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("the write after the idle time: %v", err)
	}
}

// TestBlockedWriteIsCut: a write that blocks because the client stopped
// reading (its flow-control window is full) is cut within the timeout.
func TestBlockedWriteIsCut(t *testing.T) {
	type result struct {
		err  error
		cut  bool
		took time.Duration
	}
	got := make(chan result, 1)
	url, c := serveH2C(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		cut := writecut.New(rc, timeout, nil)
		defer cut.Close()
		chunk := make([]byte, 64<<10)
		for {
			start := time.Now()
			cut.Begin()
			_, err := w.Write(chunk)
			if err == nil {
				err = rc.Flush()
			}
			cut.End()
			if err != nil {
				got <- result{err, cut.Cut(), time.Since(start)}
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	select {
	case r := <-got:
		if !r.cut || r.took > 10*timeout {
			t.Fatalf("the blocked write ended after %v with %v, cut %v", r.took, r.err, r.cut)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a client that does not read was never cut")
	}
}
