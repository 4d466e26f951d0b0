package main

import (
	"crypto/tls"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"tidings/streamhttp"
)

// h2Flags are the serve flags of HTTP/2 and TLS.
type h2Flags struct {
	tlsCert, tlsKey string
	maxStreams      int
	writeBuffer     int
}

const (
	// defaultMaxStreams bounds the streams, listens among them, that one
	// HTTP/2 connection holds at once: a client with more opens another
	// connection, which the connection caps count.
	defaultMaxStreams = streamhttp.DefaultHTTP2MaxStreams
	// maxStreamsCap keeps --http2-max-streams within what one
	// connection's flow control and a listen's memory make sensible.
	maxStreamsCap = 1 << 20
)

// h2Help is the part of serve's help that speaks of HTTP/2 and TLS.
const h2Help = `HTTP/2 is served alongside HTTP/1.1: without TLS as h2c, to clients
that speak it by prior knowledge (net/http's server does not take the
Upgrade: h2c route), and with --tls-cert and --tls-key over TLS, where
ALPN chooses h2 or http/1.1. One HTTP/2 connection holds at most
--http2-max-streams requests at once, listens among them: that is the
per-connection bound on listens over HTTP/2, and beyond it the client is
told to open another connection, which --max-conns-per-addr and
--max-conns count as any other. --max-listens-per-principal and
--max-listens count the listens of every connection alike, and each
write of a stream is bound by --write-timeout as over HTTP/1.1. A
listen is parked on its stream and holds no goroutine; each connection
has one writer, and what all its streams have to send when it wakes
leaves in one write. --http2-write-buffer bounds what is gathered into
one write to the socket (over TLS, the records of that write); 0 writes
each record as it is sealed. /metrics counts the streams, the parked
listens, the refused streams and the gathered writes (tidings_http2_*).`

// register adds the flags to cmd; none applies to --stdio.
func (h *h2Flags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&h.tlsCert, "tls-cert", "", "serve TLS (HTTP/2 and HTTP/1.1) with this PEM certificate chain; needs --tls-key")
	f.StringVar(&h.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.IntVar(&h.maxStreams, "http2-max-streams", defaultMaxStreams, "most requests (listens among them) one HTTP/2 connection holds at once; 0 means the default")
	f.IntVar(&h.writeBuffer, "http2-write-buffer", streamhttp.DefaultHTTP2WriteBuffer, "most bytes of an HTTP/2 connection's frames gathered into one write to the socket; 0 writes each TLS record or frame batch as it comes")
	for _, name := range []string{"tls-cert", "tls-key", "http2-max-streams", "http2-write-buffer"} {
		cmd.MarkFlagsMutuallyExclusive("stdio", name)
	}
	cmd.MarkFlagsRequiredTogether("tls-cert", "tls-key")
}

// check refuses flags that make no sense, and puts the default in place
// of a stream limit of 0, as connLimits does for its timeouts.
func (h *h2Flags) check() error {
	if h.maxStreams == 0 {
		h.maxStreams = defaultMaxStreams
	}
	switch {
	case h.maxStreams < 1 || h.maxStreams > maxStreamsCap:
		return fmt.Errorf("--http2-max-streams must be between 1 and %d, not %d", maxStreamsCap, h.maxStreams)
	case h.writeBuffer < 0:
		return fmt.Errorf("--http2-write-buffer must be 0 (no gathering) or positive, not %d", h.writeBuffer)
	case (h.tlsCert == "") != (h.tlsKey == ""):
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	return nil
}

// scheme is the URL scheme the server is reached by.
func (h *h2Flags) scheme() string {
	if h.tlsCert != "" {
		return "https"
	}
	return "http"
}

// tlsConfig reads the certificate and key, naming the file at fault;
// streamhttp.Serve adds the rest (ALPN, gathering the writes of the
// connections that chose HTTP/2).
func (h *h2Flags) tlsConfig() (*tls.Config, error) {
	cert, err := os.ReadFile(h.tlsCert)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	key, err := os.ReadFile(h.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s with --tls-key %s: %w", h.tlsCert, h.tlsKey, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, nil
}
