package procbench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// gatewayBins are the tidings CLI and the go-sdk server the gateway
// benchmark runs, built once, at its first run, beside benchpeer (whose
// directory TestMain removes).
var gatewayBins = sync.OnceValues(func() (string, error) {
	dir := filepath.Dir(peerBin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, b := range []struct{ wd, pkg, out string }{
		{"../..", "./cmd/gosdk-server", "gosdk-server"},
		{"../../../..", "./cmd/tidings", "tidings"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = b.wd
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return dir, nil
})

// proc is a process the gateway benchmark started, stopped with SIGINT.
type proc struct{ cmd *exec.Cmd }

func (p proc) stop(tb testing.TB) {
	p.cmd.Process.Signal(os.Interrupt)
	if err := p.cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 {
			tb.Errorf("%s: %v", p.cmd.Args, err)
		}
	}
}

// startLogging starts name with args and returns the first thing it
// logs that find recognises, within ten seconds.
func startLogging(tb testing.TB, name string, args []string, fromStderr bool, find func(line string) (string, bool)) (proc, string) {
	tb.Helper()
	cmd := exec.Command(name, args...)
	var r *bufio.Reader
	if fromStderr {
		pipe, err := cmd.StderrPipe()
		if err != nil {
			tb.Fatal(err)
		}
		r = bufio.NewReader(pipe)
	} else {
		cmd.Stderr = os.Stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		r = bufio.NewReader(pipe)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		defer close(found)
		for {
			line, err := r.ReadString('\n')
			if v, ok := find(strings.TrimSpace(line)); ok {
				found <- v
				// What it writes after is read and dropped, so that it
				// never blocks on a full pipe.
				_, _ = r.WriteTo(discard{})
				return
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case v, ok := <-found:
		if ok {
			return proc{cmd}, v
		}
	case <-time.After(10 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	tb.Fatalf("%s said nothing expected within 10s", cmd.Args)
	return proc{}, ""
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// sdkPeer is a go-sdk client session, the same client whether it reaches
// the go-sdk server directly or through the gateway, calling echo.
type sdkPeer struct {
	cs   *gosdk.ClientSession
	tool string
}

func connectSDK(tb testing.TB, url, tool string) *sdkPeer {
	tb.Helper()
	c := gosdk.NewClient(&gosdk.Implementation{Name: "procbench", Version: "1.0.0"}, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	cs, err := c.Connect(context.Background(), &gosdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		tb.Fatalf("go-sdk client at %s: %v", url, err)
	}
	return &sdkPeer{cs: cs, tool: tool}
}

func (p *sdkPeer) roundTrip(tb testing.TB, _ op) []byte {
	res, err := p.cs.CallTool(context.Background(), &gosdk.CallToolParams{Name: p.tool, Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError {
		tb.Fatalf("go-sdk client calling %s: %v %+v", p.tool, err, res)
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
		through := rig.throughHTTP(b)
		defer through.c.CloseIdleConnections()
		took := race(b, call, []string{"gateway", "direct"}, []server{through, rig.direct})
		b.ReportMetric(float64(took[1])/float64(took[0]), "x-direct")
	})
	b.Run("gosdk", func(b *testing.B) {
		through, straight := rig.throughSDK(b), connectSDK(b, rig.sdkURL, "echo")
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
	through := rig.throughHTTP(t)
	defer through.c.CloseIdleConnections()
	for _, s := range []server{through, rig.direct} {
		if ans := s.roundTrip(t, ops[0]); !strings.Contains(string(ans), `"result"`) {
			t.Errorf("the call was answered %s", ans)
		}
	}
	for _, s := range []*sdkPeer{rig.throughSDK(t), connectSDK(t, rig.sdkURL, "echo")} {
		s.roundTrip(t, ops[0])
		s.stop(t)
	}
}

// gatewayRig is a tidings server and a go-sdk server, each a process,
// behind a `tidings gateway` process that serves their tools under
// their own names.
type gatewayRig struct {
	direct        *httpPeer
	sdkURL, gwURL string
}

// startGatewayRig starts the three processes; they are stopped when the
// test or benchmark ends.
func startGatewayRig(tb testing.TB) *gatewayRig {
	tb.Helper()
	dir, err := gatewayBins()
	if err != nil {
		tb.Fatal(err)
	}
	r := &gatewayRig{direct: startHTTP(tb, "-impl", "tidings")}
	tb.Cleanup(func() { r.direct.stop(tb) })
	sdk, sdkURL := startLogging(tb, filepath.Join(dir, "gosdk-server"), []string{"-addr", "127.0.0.1:0", "-flicker", "0"}, false,
		func(l string) (string, bool) { return strings.CutPrefix(l, "mcp endpoint: ") })
	tb.Cleanup(func() { sdk.stop(tb) })
	r.sdkURL = sdkURL
	cfg := filepath.Join(tb.TempDir(), "gateway.yaml")
	yaml := fmt.Sprintf("upstreams:\n  - id: files\n    url: %s\n    prefix: \"\"\n  - id: gosdk\n    url: %s\n    prefix: \"\"\n", r.direct.url, sdkURL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	gw, gwURL := startLogging(tb, filepath.Join(dir, "tidings"), []string{"gateway", "--config", cfg, "--addr", "127.0.0.1:0"}, true,
		func(l string) (string, bool) {
			_, rest, ok := strings.Cut(l, `msg="listening on `)
			url, _, _ := strings.Cut(rest, `"`)
			return url, ok
		})
	tb.Cleanup(func() { gw.stop(tb) })
	r.gwURL = gwURL
	return r
}

// throughHTTP is a keep-alive HTTP client of the gateway, once the
// gateway calls the tidings server's tool.
func (r *gatewayRig) throughHTTP(tb testing.TB) *httpPeer {
	p := &httpPeer{url: r.gwURL, c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}}
	call := ops[0]
	waitFor(tb, "the gateway to call the tidings server's tool", func() bool {
		req, _ := http.NewRequest(http.MethodPost, r.gwURL, strings.NewReader(call.body))
		req.Header = callHeaders(call)
		resp, err := p.c.Do(req)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"result"`)
	})
	return p
}

// throughSDK is a go-sdk client session with the gateway, once the
// gateway calls the go-sdk server's tool.
func (r *gatewayRig) throughSDK(tb testing.TB) *sdkPeer {
	p := connectSDK(tb, r.gwURL, "echo")
	waitFor(tb, "the gateway to call the go-sdk server's tool", func() bool {
		res, err := p.cs.CallTool(context.Background(), &gosdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
		return err == nil && !res.IsError
	})
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
