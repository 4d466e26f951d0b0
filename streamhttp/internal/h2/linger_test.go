package h2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"tidings/streamhttp/internal/h2"
)

// TestFailedConnectionEndsWithFINNotReset: a client whose frame ends the
// connection with an error, and which had sent more after it, reads the
// server's GOAWAY and then the end of the stream. A server that closed
// its socket with the client's bytes unread would reset the connection
// instead, and a reset can overtake the GOAWAY still in the server's
// send queue; the server reads what the client still sends, its writing
// side shut, before it closes.
func TestFailedConnectionEndsWithFINNotReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hs := &http.Server{}
	srv, err := h2.Configure(hs, h2.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeConn(context.Background(), sc, http.NotFoundHandler())
	}()

	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings()
	// The connection's send window is 65,535: this overflows it, which
	// is a connection error (RFC 9113, 6.9.1).
	_ = fr.WriteWindowUpdate(0, 1<<31-1)
	// What the client sent before it heard: bytes the server never
	// parses, left unread unless the server reads them.
	out.Write(bytes.Repeat([]byte{0}, 64<<10))
	if _, err := cli.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The client sends nothing more; the server, reading on, sees its
	// end and closes.
	if err := cli.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return after the client's end")
	}

	rf := http2.NewFramer(nil, cli)
	var goAway *http2.GoAwayFrame
	for {
		f, err := rf.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the connection ended with %v, want the end of the stream (GOAWAY seen: %v)", err, goAway != nil)
			}
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goAway = g
		}
	}
	if goAway == nil || goAway.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("GOAWAY read: %v, want one with FLOW_CONTROL_ERROR", goAway)
	}
}
