package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// h2cClient speaks HTTP/2 without TLS, by prior knowledge, and counts
// the connections it opens, at most maxConns at once (0: no bound).
// net/http pools an HTTP/2 connection only once the request that dialed
// it has it, so a request right behind may dial its own: a test that
// counts connections bounds them.
func h2cClient(dials *atomic.Int64, maxConns int) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols), MaxConnsPerHost: maxConns}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr}
}

// listenBody is a listen for resources list changes with request id id.
func listenBody(id string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"method":%q,"params":{"_meta":{%q:%q,%q:{}},"notifications":{"resourcesListChanged":true}}}`,
		id, mcp.MethodListen, mcp.MetaProtocolVersion, mcp.Version, mcp.MetaClientCapabilities)
}

// mcpPost makes a conforming POST to url with body, and with the
// header pairs of hdr, a "Host" pair setting the request's Host.
func mcpPost(ctx context.Context, t *testing.T, c *http.Client, url, method string, body []byte, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" { // net/http sends req.Host, not a Host header
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", method, err)
	}
	return resp
}

// notice is the part of a listen's message the tests check.
type notice struct {
	Method string `json:"method"`
	Params struct {
		Meta struct {
			SubscriptionID jsontext.Value `json:"io.modelcontextprotocol/subscriptionId"`
		} `json:"_meta"`
	} `json:"params"`
}

func nextNotice(t *testing.T, r *sse.Reader) notice {
	t.Helper()
	ev, err := r.Next()
	if err != nil {
		t.Fatalf("reading the listen: %v", err)
	}
	var n notice
	if err := json.Unmarshal(ev.Data, &n); err != nil {
		t.Fatalf("decoding %s: %v", ev.Data, err)
	}
	return n
}

// listenOverH2 opens a listen on c, checks it is HTTP/2 and acked first
// with its id, makes a file appear in dir and checks the change arrives
// tagged with the id; then closes it and checks the server lets go.
func listenOverH2(t *testing.T, c *http.Client, base, dir string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := mcpPost(ctx, t, c, base+"/mcp", mcp.MethodListen, listenBody("h2-listen"))
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the listen went over %s, not HTTP/2", resp.Proto)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("listen: %s: %s", resp.Status, b)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	if n := nextNotice(t, r); n.Method != mcp.NotifyAcknowledged || string(n.Params.Meta.SubscriptionID) != `"h2-listen"` {
		t.Fatalf("first message %+v, want the ack tagged \"h2-listen\"", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := nextNotice(t, r); n.Method != mcp.NotifyResourcesListChanged || string(n.Params.Meta.SubscriptionID) != `"h2-listen"` {
		t.Fatalf("after a file appeared: %+v, want a resources list change tagged \"h2-listen\"", n)
	}
	plain := h2cClient(nil, 0)
	if strings.HasPrefix(base, "https") {
		plain = c
	}
	if v := metric(t, plain, base, "tidings_listens_open"); v != 1 {
		t.Fatalf("tidings_listens_open is %v with one listen open", v)
	}
	// The listen's stream, and the scrape's own when it went over HTTP/2.
	if v := metric(t, plain, base, "tidings_http2_streams_open"); v < 1 {
		t.Fatalf("tidings_http2_streams_open is %v with a listen open over HTTP/2", v)
	}
	if g, w := metric(t, plain, base, "tidings_http2_writes_gathered_total"), metric(t, plain, base, "tidings_http2_socket_writes_total"); g < 1 || w < 1 {
		t.Fatalf("%v writes gathered into %v socket writes: the HTTP/2 connection's writes were not gathered", g, w)
	}
	cancel() // the stream is reset; the server must notice
	testkit.WaitFor(t, wait, "the server to see the listen closed", func() bool {
		return metric(t, plain, base, "tidings_listens_open") == 0
	})
}

func TestServeListenOverH2C(t *testing.T) {
	dir := t.TempDir()
	base, stop := serveInProcess(t, dir)
	defer stop()
	c := h2cClient(nil, 0)
	defer c.CloseIdleConnections()
	listenOverH2(t, c, base, dir)
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (string, string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tidings test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestServeListenOverTLS(t *testing.T) {
	dir, keys := t.TempDir(), t.TempDir()
	certFile, keyFile, pool := selfSigned(t, keys)
	base, stop := serveInProcess(t, dir, "--tls-cert", certFile, "--tls-key", keyFile)
	defer stop()
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve with a certificate listens on %s, not https", base)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	listenOverH2(t, &http.Client{Transport: tr}, base, dir)

	// HTTP/1.1 over TLS is still served.
	tr1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Protocols: new(http.Protocols)}
	tr1.Protocols.SetHTTP1(true)
	defer tr1.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr1}).Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over HTTP/1.1 and TLS: %s %s", resp.Proto, resp.Status)
	}
}

// TestServeH2CChecks: the checks of a request apply to HTTP/2 as to
// HTTP/1.1: a foreign Origin or Host is refused, a body above the limit
// too.
func TestServeH2CChecks(t *testing.T) {
	base, stop := serveInProcess(t, t.TempDir())
	defer stop()
	c := h2cClient(nil, 0)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		body []byte
		hdr  []string
		want int
	}{
		{"foreign origin", listenBody("o"), []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"foreign host", listenBody("h"), []string{"Host", "evil.example"}, http.StatusForbidden},
		{"body too large", bytes.Repeat([]byte(" "), 5<<20), nil, http.StatusRequestEntityTooLarge},
	} {
		resp := mcpPost(ctx, t, c, base+"/mcp", mcp.MethodListen, tc.body, tc.hdr...)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s (%s), want HTTP/2 and %d", tc.name, resp.Proto, resp.Status, b, tc.want)
		}
	}
}

// TestServeH2MaxStreams: one HTTP/2 connection holds at most
// --http2-max-streams listens; the client opens another for more.
func TestServeH2MaxStreams(t *testing.T) {
	base, stop := serveInProcess(t, t.TempDir(), "--http2-max-streams", "2")
	defer stop()
	var dials atomic.Int64
	c := h2cClient(&dials, 2)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		resp := mcpPost(ctx, t, c, base+"/mcp", mcp.MethodListen, listenBody(fmt.Sprint("l", i)))
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
			t.Fatalf("listen %d: %s %s", i, resp.Proto, resp.Status)
		}
		if n := nextNotice(t, sse.NewReader(resp.Body, 1<<20)); n.Method != mcp.NotifyAcknowledged {
			t.Fatalf("listen %d: first message %+v", i, n)
		}
	}
	if d := dials.Load(); d != 2 {
		t.Fatalf("3 listens with at most 2 streams a connection took %d connections, want 2", d)
	}
}

// TestH2Flags: the HTTP/2 and TLS flags refuse what makes no sense,
// naming the flag and the file at fault.
func TestH2Flags(t *testing.T) {
	dir := t.TempDir()
	keys := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, keys)
	missing := filepath.Join(keys, "missing.pem")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http2-max-streams", "-1"}, "--http2-max-streams must be between 1"},
		{[]string{"--http2-write-buffer", "-1"}, "--http2-write-buffer must be 0"},
		{[]string{"--tls-cert", certFile}, "tls-key"},
		{[]string{"--tls-cert", missing, "--tls-key", keyFile}, "--tls-cert: open " + missing},
		{[]string{"--tls-cert", certFile, "--tls-key", missing}, "--tls-key: open " + missing},
		{[]string{"--tls-cert", keyFile, "--tls-key", certFile}, "--tls-cert " + keyFile + " with --tls-key " + certFile},
	} {
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"serve", dir, "--addr", "127.0.0.1:0"}, c.args...))
		var out testkit.SyncBuffer
		cmd.SetErr(&out)
		cmd.SetOut(&out)
		// A serve that takes the flags runs until the context ends.
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := cmd.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v; want an error with %q", c.args, err, c.want)
		}
	}
}

// TestServeEvictsIdleH2AndTLSConnections: the connection caps see
// through TLS and the HTTP/2 gathering to the connection they admitted,
// so an idle HTTP/2 or TLS connection is closed to make room for a new
// one under a full cap, rather than the new one refused.
func TestServeEvictsIdleH2AndTLSConnections(t *testing.T) {
	keys := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, keys)
	// from dials from a loopback address of its own, so that a scrape
	// of /metrics is not counted under the cap of the clients tested.
	from := func(ip string) func(context.Context, string, string) (net.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return d.DialContext
	}
	for _, tc := range []struct {
		name   string
		flags  []string
		client func(ip string) *http.Client
	}{
		{"h2c", nil, func(ip string) *http.Client {
			tr := &http.Transport{Protocols: new(http.Protocols), DialContext: from(ip)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			return &http.Client{Transport: tr}
		}},
		{"tls h2", []string{"--tls-cert", certFile, "--tls-key", keyFile}, func(ip string) *http.Client {
			return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, DialContext: from(ip)}}
		}},
		{"tls http/1.1", []string{"--tls-cert", certFile, "--tls-key", keyFile}, func(ip string) *http.Client {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Protocols: new(http.Protocols), DialContext: from(ip)}
			tr.Protocols.SetHTTP1(true)
			return &http.Client{Transport: tr}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, stop := serveInProcess(t, t.TempDir(), append([]string{"--max-conns-per-addr", "1"}, tc.flags...)...)
			defer stop()
			scraper := tc.client("127.0.0.2")
			defer scraper.CloseIdleConnections()
			for i := range 3 {
				c := tc.client("127.0.0.1")
				resp, err := c.Get(base + "/healthz")
				if err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
				// Read whole, or HTTP/1.1 closes the connection.
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("client %d, its connection the second from one address: %s", i, resp.Status)
				}
				// The connection stays open until the next one takes its
				// place; the server must have seen it idle first.
				defer c.CloseIdleConnections()
				testkit.WaitFor(t, wait, "the connection to be idle", func() bool {
					return metric(t, scraper, base, "tidings_http_connections_idle") >= 1
				})
			}
		})
	}
}

// TestServeRefusalInTheClientsProtocol: a connection refused at a full
// cap is told why in what its client speaks: over TLS, and in HTTP/2 or
// HTTP/1.1, so that the client reads the 503 that names the cap rather
// than failing a handshake or a preface on plain HTTP/1.1 text.
func TestServeRefusalInTheClientsProtocol(t *testing.T) {
	keys := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, keys)
	tlsFlags := []string{"--tls-cert", certFile, "--tls-key", keyFile}
	for _, tc := range []struct {
		name   string
		flags  []string
		client func() *http.Client
		proto  int
	}{
		{"h2c", nil, func() *http.Client { return h2cClient(nil, 0) }, 2},
		{"http/1.1 beside h2c", nil, func() *http.Client { return &http.Client{Transport: &http.Transport{}} }, 1},
		{"tls h2", tlsFlags, func() *http.Client {
			return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
		}, 2},
		{"tls http/1.1", tlsFlags, func() *http.Client {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Protocols: new(http.Protocols)}
			tr.Protocols.SetHTTP1(true)
			return &http.Client{Transport: tr}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, stop := serveInProcess(t, t.TempDir(), append([]string{"--max-conns-per-addr", "1"}, tc.flags...)...)
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			// The one connection allowed holds a listen, so it is never
			// idle and cannot be closed to make room.
			holder := tc.client()
			defer holder.CloseIdleConnections()
			listen := mcpPost(ctx, t, holder, base+"/mcp", mcp.MethodListen, listenBody("held"))
			defer listen.Body.Close()
			if _, err := sse.NewReader(listen.Body, 1<<16).Next(); err != nil {
				t.Fatalf("the listen's ack: %v", err)
			}

			refused := tc.client()
			defer refused.CloseIdleConnections()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := refused.Do(req)
			if err != nil {
				t.Fatalf("a connection past the cap: %v; want a 503 that names the cap", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.ProtoMajor != tc.proto ||
				!strings.Contains(string(body), "too many connections from 127.0.0.1") {
				t.Fatalf("a connection past the cap: %s %s %q; want a 503 over HTTP/%d naming the cap", resp.Proto, resp.Status, body, tc.proto)
			}
		})
	}
}

// TestServeCutsAStalledHTTP2Reader: a reader of a large file over h2c
// that never reads has its stream cut after the write timeout, and the
// cut is counted in /metrics as over HTTP/1.1: the writes are timed
// once, beneath the handler, where the cut is counted.
func TestServeCutsAStalledHTTP2Reader(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), bytes.Repeat([]byte("x"), 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	base, stop := serveInProcess(t, dir, "--max-read-bytes", "16MiB", "--write-timeout", "300ms")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := h2cClient(nil, 0)
	defer c.CloseIdleConnections()
	body := request(t, 1, mcp.MethodResourcesRead, map[string]any{"uri": fileURI(t, dir, "big.txt")})
	resp := mcpPost(ctx, t, c, base+"/mcp", mcp.MethodResourcesRead, body, mcp.HeaderName, fileURI(t, dir, "big.txt"))
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("%s, want HTTP/2", resp.Proto)
	}
	// Nothing is read: the stream's window fills, and the server's write
	// blocks until the timeout cuts it.
	scraper := h2cClient(nil, 0)
	defer scraper.CloseIdleConnections()
	waitMetric(t, scraper, base, "tidings_http_write_timeouts_total", 1)
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Fatal("the stalled stream ended cleanly, want it cut")
	}
}

// TestServeRefusalMetricsOverTLS: refused TLS clients that say nothing
// are held to be told why, up to the bound --max-refusing sets, and
// those past it are closed untold; /metrics shows both, and the bound.
func TestServeRefusalMetricsOverTLS(t *testing.T) {
	keys := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, keys)
	base, stop := serveInProcess(t, t.TempDir(), "--max-conns-per-addr", "1", "--max-refusing", "8", "--tls-cert", certFile, "--tls-key", keyFile)
	defer stop()
	addr := strings.TrimPrefix(base, "https://")
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	scraper := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: d.DialContext}}
	defer scraper.CloseIdleConnections()
	// The first connection is let in and, new, is not closed to make
	// room; the next 14 are refused, the last 6 past the bound.
	for range 15 {
		c := dialFrom(t, "127.0.0.1", addr, nil)
		defer c.Close()
	}
	waitMetric(t, scraper, base, "tidings_http_connections_refused_untold_total", 6)
	if v := metric(t, scraper, base, "tidings_http_connections_refusing"); v < 0 || v > 8 {
		t.Fatalf("%v refusals being told why; want at most 8, the bound", v)
	}
	if v := metric(t, scraper, base, "tidings_http_connections_refusing_max"); v != 8 {
		t.Fatalf("the bound on refusals told why is %v in /metrics, want 8", v)
	}
}
