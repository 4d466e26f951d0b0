//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"tidings/internal/sse"
	"tidings/internal/testrig/testas"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestGatewayListensHoldOneUpstreamListenEach runs tidings gateway in
// process, with OAuth, in front of two upstream servers, and opens 1,000
// listens on it: 100 for each of 10 callers, each caller a subject of its
// own with tokens of the test authorization server, and each listen its
// own HTTP request on its own connection, all from 127.0.0.1. /metrics
// then counts the 1,000 listens on the gateway and one listen on each
// upstream, and each upstream holds exactly one. The per-caller cap is
// set to 100, so the listens fit only as 10 callers; a 101st of one
// caller is refused.
func TestGatewayListensHoldOneUpstreamListenEach(t *testing.T) {
	const (
		callers   = 10
		perCaller = 100
		total     = callers * perCaller
	)
	// Both ends of every listen are in this process.
	raiseOwnFileLimit(t, 2*total+1024)
	as := testas.Start(t, "")
	a, b := startGatewayUpstream(t, "read"), startGatewayUpstream(t, "write")
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gateway.yaml")
	cfg := fmt.Sprintf("upstreams:\n  - id: a\n    url: %s\n  - id: b\n    url: %s\n", a.url, b.url)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := gatewayInProcess(t, "--config", cfgFile, "--auth-issuer", as.Issuer(),
		"--max-conns-per-addr", "0", "--max-listens-per-principal", fmt.Sprint(perCaller))
	defer stop()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: wait}
	defer hc.CloseIdleConnections()
	for _, id := range []string{"a", "b"} {
		waitMetric(t, hc, base, `tidings_gateway_upstream_listens{upstream="`+id+`"}`, 1)
	}

	tokens := make([]string, callers)
	for i := range tokens {
		tokens[i] = mintToken(t, as, fmt.Sprintf("user-%d", i), base+"/mcp")
	}
	addr := strings.TrimPrefix(base, "http://")
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(i int, token string) (net.Conn, []byte, error) {
		c, err := net.DialTimeout("tcp", addr, wait)
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		first, err := openListen(c, addr, token, i)
		return c, first, err
	}
	start := time.Now()
	jobs := make(chan int)
	errs := make(chan error, total)
	var openers sync.WaitGroup
	for range 32 {
		openers.Go(func() {
			for i := range jobs {
				if _, first, err := open(i, tokens[i%callers]); err != nil {
					errs <- fmt.Errorf("listen %d of caller %d: %w", i, i%callers, err)
				} else if !bytes.Contains(first, []byte(mcp.NotifyAcknowledged)) {
					errs <- fmt.Errorf("listen %d of caller %d: %.300s", i, i%callers, first)
				}
			}
		})
	}
	for i := range total {
		jobs <- i
	}
	close(jobs)
	openers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d listens of %d callers open in %v", total, callers, time.Since(start).Round(time.Millisecond))

	// One more of a caller who holds its 100: refused, naming the cap.
	if _, first, err := open(total, tokens[0]); err != nil || !bytes.Contains(first, []byte(`"listensPerPrincipal"`)) {
		t.Fatalf("a 101st listen of one caller: %v %.300s; want a refusal naming listensPerPrincipal", err, first)
	}

	for series, want := range map[string]float64{
		"tidings_listens_open":                                       total,
		`tidings_gateway_upstream_listens{upstream="a"}`:             1,
		`tidings_gateway_upstream_listens{upstream="b"}`:             1,
		`tidings_gateway_upstream_up{upstream="a"}`:                  1,
		`tidings_gateway_upstream_up{upstream="b"}`:                  1,
		`tidings_listen_refusals_total{limit="listensPerPrincipal"}`: 1,
	} {
		if got := metric(t, hc, base, series); got != want {
			t.Errorf("/metrics: %s %v, want %v", series, got, want)
		}
	}
	for _, u := range []*gatewayUpstream{a, b} {
		if n := u.srv.ListenStats().Listens; n != 1 {
			t.Errorf("upstream %s holds %d listens, want 1", u.url, n)
		}
	}
}

// gatewayUpstream is a tidings server behind the gateway, over HTTP on
// loopback.
type gatewayUpstream struct {
	srv *server.Server
	url string
}

// startGatewayUpstream serves a server with one tool until the test ends.
func startGatewayUpstream(t *testing.T, tool string) *gatewayUpstream {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "upstream-" + tool, Version: "1"}, server.WithLogger(slog.New(slog.DiscardHandler)))
	if err := srv.AddTool(mcp.Tool{Name: tool}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(streamhttp.New(srv))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return &gatewayUpstream{srv: srv, url: hs.URL + "/mcp"}
}

// gatewayInProcess runs tidings gateway on a free loopback port with the
// flags given and returns its base URL once it serves; stop ends it and
// waits.
func gatewayInProcess(t *testing.T, flags ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errOut := &testkit.SyncBuffer{}
	cmd := newRootCmd()
	cmd.SetArgs(append([]string{"gateway", "--addr", "127.0.0.1:0"}, flags...))
	cmd.SetErr(errOut)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v\n%s", err, errOut.String())
		}
	}
	var url string
	exited := false
	testkit.WaitFor(t, wait, "the gateway's listening line", func() bool {
		select {
		case err := <-done:
			done <- err // for stop
			exited = true
			return true
		default:
		}
		if m := listening.FindStringSubmatch(errOut.String()); m != nil {
			url = strings.TrimSuffix(m[1], "/mcp")
		}
		return url != ""
	})
	if exited {
		stop()
		t.Fatalf("the gateway ended at its start:\n%s", errOut.String())
	}
	return url, stop
}

// mintToken signs a JWT access token for subject and audience with the
// authorization server's current key, as the server itself would issue
// one: its own token endpoint issues every token to one subject.
func mintToken(t *testing.T, as *testas.Server, subject, audience string) string {
	t.Helper()
	kid, key := as.SigningKey()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(map[string]any{
		"iss": as.Issuer(), "sub": subject, "aud": []string{audience},
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// openListen sends a listen for tools list changes with token on c and
// returns its first message: the ack, or the error that refused it.
func openListen(c net.Conn, addr, token string, id int) ([]byte, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	defer c.SetDeadline(time.Time{})
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"_meta":{%q:%q,%q:{}},"notifications":{"toolsListChanged":true}}}`,
		id, mcp.MethodListen, mcp.MetaProtocolVersion, mcp.Version, mcp.MetaClientCapabilities)
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n", addr, token)
	req.WriteString("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")
	fmt.Fprintf(&req, "%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n", mcp.HeaderProtocolVersion, mcp.Version, mcp.HeaderMethod, mcp.MethodListen, len(body))
	req.Write(body)
	if _, err := c.Write(req.Bytes()); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, msg)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		// A refusal is a JSON-RPC error, answered as JSON.
		return io.ReadAll(io.LimitReader(resp.Body, 4096))
	}
	ev, err := sse.NewReader(resp.Body, 0).Next()
	if err != nil {
		return nil, fmt.Errorf("reading the first message: %w", err)
	}
	return ev.Data, nil
}
