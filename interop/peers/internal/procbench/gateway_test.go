package procbench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkPeer is a go-sdk client session, the same client whether it reaches
// the go-sdk server directly or through the gateway, calling echo.
type sdkPeer struct {
	cs *gosdk.ClientSession
}

func connectSDK(tb testing.TB, url string) *sdkPeer {
	tb.Helper()
	c := gosdk.NewClient(&gosdk.Implementation{Name: "procbench", Version: "1.0.0"}, nil)
	cs, err := c.Connect(context.Background(), &gosdk.StreamableClientTransport{Endpoint: url, HTTPClient: newHTTPClient()}, nil)
	if err != nil {
		tb.Fatalf("go-sdk client at %s: %v", url, err)
	}
	return &sdkPeer{cs: cs}
}

// echo calls the go-sdk server's echo tool.
func (p *sdkPeer) echo() error {
	res, err := p.cs.CallTool(context.Background(), &gosdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err == nil && res.IsError {
		err = fmt.Errorf("echo answered an error: %+v", res.Content)
	}
	return err
}

func (p *sdkPeer) roundTrip(tb testing.TB, _ op) []byte {
	if err := p.echo(); err != nil {
		tb.Fatalf("go-sdk client: %v", err)
	}
	return []byte(`"result"`)
}

func (p *sdkPeer) stop(tb testing.TB) {
	if err := p.cs.Close(); err != nil {
		tb.Errorf("closing the go-sdk session: %v", err)
	}
}

// BenchmarkGatewayProcesses calls a tool one call at a time through a
// `tidings gateway` process and directly, each server a process of its
// own: a tidings server (benchpeer) reached by a keep-alive HTTP client
// posting the same request both ways (2026-07-28), and a go-sdk server
// reached by the go-sdk client both ways (2025-11-25, sessions). x-direct
// is the direct call's time over the call through the gateway: the share
// of direct speed a caller keeps behind it. (gateway's
// BenchmarkReverseProxyToolsCall measures, in one process, the bound of
// any hop's share: net/http's ReverseProxy in the gateway's place.)
func BenchmarkGatewayProcesses(b *testing.B) {
	rig := startGatewayRig(b)
	call := ops[0]
	b.Run("tidings", func(b *testing.B) {
		took := race(b, call, []string{"gateway", "direct"}, []server{rig.gateway, rig.direct})
		b.ReportMetric(float64(took[1])/float64(took[0]), "x-direct")
	})
	b.Run("gosdk", func(b *testing.B) {
		through, straight := rig.throughSDK(b), connectSDK(b, rig.sdk.url)
		defer through.stop(b)
		defer straight.stop(b)
		took := race(b, call, []string{"gateway", "direct"}, []server{through, straight})
		b.ReportMetric(float64(took[1])/float64(took[0]), "x-direct")
	})
}

// TestGatewayProcessesAnswer runs what BenchmarkGatewayProcesses
// measures once: each call answers through the gateway and directly.
func TestGatewayProcessesAnswer(t *testing.T) {
	rig := startGatewayRig(t)
	for _, s := range []server{rig.gateway, rig.direct} {
		if ans := s.roundTrip(t, ops[0]); !strings.Contains(string(ans), `"result"`) {
			t.Errorf("the call was answered %s", ans)
		}
	}
	for _, s := range []*sdkPeer{rig.throughSDK(t), connectSDK(t, rig.sdk.url)} {
		s.roundTrip(t, ops[0])
		s.stop(t)
	}
}

// gatewayRig is a tidings server and a go-sdk server, each a process,
// behind a `tidings gateway` process that serves their tools under
// their own names.
type gatewayRig struct {
	direct, sdk, gateway *httpPeer
}

// startGatewayRig starts the three processes, and waits until the
// gateway calls the tidings server's tool; they are stopped when the
// test or benchmark ends.
func startGatewayRig(tb testing.TB) *gatewayRig {
	tb.Helper()
	r := &gatewayRig{direct: startHTTP(tb, "-impl", "tidings")}
	tb.Cleanup(func() { r.direct.stop(tb) })
	r.sdk = startServer(tb, sdkBin, "-addr", "127.0.0.1:0", "-flicker", "0")
	tb.Cleanup(func() { r.sdk.stop(tb) })
	cfg := filepath.Join(tb.TempDir(), "gateway.yaml")
	yaml := fmt.Sprintf("upstreams:\n  - id: files\n    url: %s\n    prefix: \"\"\n  - id: gosdk\n    url: %s\n    prefix: \"\"\n", r.direct.url, r.sdk.url)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	r.gateway = startGateway(tb, cfg)
	tb.Cleanup(func() { r.gateway.stop(tb) })
	call := ops[0]
	waitFor(tb, "the gateway to call the tidings server's tool", func() bool {
		req, _ := http.NewRequest(http.MethodPost, r.gateway.url, strings.NewReader(call.body))
		req.Header = callHeaders(call)
		resp, err := r.gateway.c.Do(req)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"result"`)
	})
	return r
}

// startGateway starts `tidings gateway` with the configuration file cfg
// and returns it once it logs the address it listens on (ten seconds
// at most). What it logs after is read and dropped, so that it never
// blocks on a full pipe.
func startGateway(tb testing.TB, cfg string) *httpPeer {
	tb.Helper()
	cmd := exec.Command(tidingsBin, "gateway", "--config", cfg, "--addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		defer close(listening)
		r := bufio.NewReader(stderr)
		for {
			line, err := r.ReadString('\n')
			if _, rest, ok := strings.Cut(line, `msg="listening on `); ok {
				url, _, _ := strings.Cut(rest, `"`)
				listening <- url
				_, _ = r.WriteTo(io.Discard)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case url, ok := <-listening:
		if ok {
			return &httpPeer{cmd: cmd, url: url, c: newHTTPClient()}
		}
	case <-time.After(10 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	tb.Fatalf("%s logged no listening address within 10s", cmd.Args)
	return nil
}

// throughSDK is a go-sdk client session with the gateway, once the
// gateway calls the go-sdk server's tool.
func (r *gatewayRig) throughSDK(tb testing.TB) *sdkPeer {
	p := connectSDK(tb, r.gateway.url)
	waitFor(tb, "the gateway to call the go-sdk server's tool", func() bool { return p.echo() == nil })
	return p
}

// waitFor polls try every 20ms until it holds, ten seconds at most: the
// gateway reads its upstreams' tool lists once it has started.
func waitFor(tb testing.TB, what string, try func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !try() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
