// Package inmem connects a client to a server in the same process, for
// fast, deterministic tests and for embedding: no network, no subprocess,
// the same protocol and framing as a server on stdio.
package inmem

import (
	"context"
	"io"
	"sync"

	"tidings/client"
	"tidings/server"
	"tidings/stdio"
)

// New serves srv on a pair of in-memory pipes and returns the client end
// as a Transport, for client.New. The server runs until the Transport is
// closed (client.Client.Close does that); Close cancels what the server
// is still doing and returns once it has stopped, leaving no goroutine
// behind. opts configure the server end as for stdio.Serve.
func New(srv *server.Server, opts ...stdio.Option) client.Transport {
	inR, inW := io.Pipe()   // client → server
	outR, outW := io.Pipe() // server → client
	ctx, cancel := context.WithCancel(context.Background())
	end := &serverEnd{w: inW, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(end.done)
		end.err = stdio.Serve(ctx, srv, inR, outW, opts...)
		_ = inR.Close()
		// The client's reader sees the end of the server's output.
		_ = outW.Close()
	}()
	return client.NewStreamTransport(outR, end)
}

// serverEnd is the server's input as the client writes it; closing it
// stops the server.
type serverEnd struct {
	w      *io.PipeWriter
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
	err    error // Serve's, once done is closed
}

func (e *serverEnd) Write(p []byte) (int, error) { return e.w.Write(p) }

// Close ends the server's input, cancels what it is still doing and waits
// for Serve to return.
func (e *serverEnd) Close() error {
	e.once.Do(func() {
		_ = e.w.Close()
		e.cancel()
	})
	<-e.done
	return e.err
}
