package h2sched_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"tidings/internal/h2sched"
)

// TestStreamsAreServedByTheConfiguredServer: a request over HTTP/2
// without TLS is answered by x/net's server, whose scheduler Configure
// chose, and not by net/http's own (whose response writer is another
// type).
func TestStreamsAreServedByTheConfiguredServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %T", r.Proto, w)
	}), Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	if err := h2sched.Configure(hs); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer func() {
		tr.CloseIdleConnections()
		_ = hs.Close()
		<-served
	}()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "HTTP/2.0 *http2.responseWriter"; got != want {
		t.Fatalf("served as %q, want %q", got, want)
	}
}
