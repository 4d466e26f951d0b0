package peers_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveTools are the tools `tidings serve` offers.
var serveTools = []string{"file_info", "list_directory", "search_files"}

// served is a running `tidings serve` of a folder holding one file.
type served struct {
	url  string
	file string // the file's path
	hc   *http.Client
}

// startServe runs `tidings serve` on a fresh folder holding notes.txt and
// waits until it is ready.
func startServe(t *testing.T) served {
	t.Helper()
	dir := t.TempDir()
	s := served{file: filepath.Join(dir, "notes.txt")}
	if err := os.WriteFile(s.file, []byte("first draft\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "tidings", "serve", dir, "--addr", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if !p.stderr.waitFor(ctx, p.exited, func(all []string) bool {
		for _, l := range all {
			if _, rest, ok := strings.Cut(l, `msg="listening on `); ok {
				s.url, _, _ = strings.Cut(rest, `"`)
				return true
			}
		}
		return false
	}) {
		t.Fatalf("tidings serve logged no listening address within %v; stderr:\n%s", checkTimeout, p.stderr)
	}
	// Each test's HTTP connections are its own, and closed at its end.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s.hc = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	ready := strings.TrimSuffix(s.url, "/mcp") + "/readyz"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := s.hc.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not answer 200 within %v; stderr:\n%s", ready, checkTimeout, p.stderr)
		case <-tick.C:
		}
	}
}

// writeUntilUpdated writes new content to the file, again every 100ms,
// until updates delivers uri, and returns the content written last. The
// stream that carries the notification is opened by the SDKs in the
// background (a listen, or the GET stream of a session), so a write before
// it is up may go unannounced; each write after must be.
func writeUntilUpdated(t *testing.T, ctx context.Context, s served, uri string, updates <-chan string) string {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var content string
	var others []string
	for n := 1; ; n++ {
		content = fmt.Sprintf("second draft, take %d\n", n)
		if err := os.WriteFile(s.file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	wait:
		for {
			select {
			case got := <-updates:
				if got == uri {
					t.Logf("%s announced after %d write(s)", uri, n)
					return content
				}
				others = append(others, got)
			case <-tick.C:
				break wait
			case <-ctx.Done():
				t.Fatalf("no notifications/resources/updated for %s within %v of subscribing and writing the file %d times (updates for other URIs: %q)",
					uri, checkTimeout, n, others)
			}
		}
	}
}

// TestPeerClients runs each SDK's client against `tidings serve`, at the
// protocol version it picks itself (2026-07-28, found with server/discover)
// and pinned to 2025-11-25 (the initialize handshake): it lists the
// resources, reads the file, subscribes to it, hears of a write to it, reads
// the new content and lists the tools.
func TestPeerClients(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		run           func(t *testing.T, s served, pin string) string
	}{
		{"gosdk", "2026-07-28", runGoSDKClient},
		{"gosdk-2025-11-25", "2025-11-25", runGoSDKClient},
		{"mcpgo", "2026-07-28", runMCPGoClient},
		{"mcpgo-2025-11-25", "2025-11-25", runMCPGoClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pin := ""
			if strings.Contains(tc.name, tc.version) {
				pin = tc.version
			}
			if got := tc.run(t, startServe(t), pin); got != tc.version {
				t.Errorf("negotiated protocol version %q, want %q", got, tc.version)
			}
		})
	}
}

// runGoSDKClient runs the checks with the official Go SDK's client; pin,
// when set, is the protocol version it asks for. It returns the version
// negotiated.
func runGoSDKClient(t *testing.T, s served, pin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	updates := make(chan string, 64)
	c := gosdk.NewClient(&gosdk.Implementation{Name: "peers-test", Version: "1.0.0"}, &gosdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *gosdk.ResourceUpdatedNotificationRequest) {
			select {
			case updates <- req.Params.URI:
			default:
			}
		},
	})
	cs, err := c.Connect(ctx, &gosdk.StreamableClientTransport{Endpoint: s.url, HTTPClient: s.hc},
		&gosdk.ClientSessionOptions{ProtocolVersion: pin})
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer cs.Close()
	version := cs.InitializeResult().ProtocolVersion

	list, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	var uri string
	for _, r := range list.Resources {
		if strings.HasSuffix(r.URI, "/notes.txt") {
			uri = r.URI
		}
	}
	if uri == "" {
		t.Fatalf("resources/list has no notes.txt: %+v", list.Resources)
	}
	read := func(want string) {
		t.Helper()
		res, err := cs.ReadResource(ctx, &gosdk.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("resources/read %s: %v", uri, err)
		}
		if len(res.Contents) != 1 || res.Contents[0].Text != want {
			t.Fatalf("resources/read %s = %+v, want the text %q", uri, res.Contents, want)
		}
	}
	read("first draft\n")
	if err := cs.Subscribe(ctx, &gosdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribing to %s: %v", uri, err)
	}
	read(writeUntilUpdated(t, ctx, s, uri, updates))

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, serveTools) {
		t.Errorf("tools/list = %q, want %q", names, serveTools)
	}
	return version
}

// runMCPGoClient runs the checks with mcp-go's client; pin, when set, is
// the protocol version it asks for. It returns the version negotiated.
func runMCPGoClient(t *testing.T, s served, pin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	topts := []mcpgotransport.StreamableHTTPCOption{
		mcpgotransport.WithHTTPBasicClient(s.hc),
		mcpgotransport.WithHTTPLogger(slog.New(slog.DiscardHandler)),
	}
	var copts []mcpgoclient.ClientOption
	if pin != "" {
		// Before 2026-07-28 notifications come on the session's GET stream.
		//lint:ignore SA1019 the 2025-11-25 protocol, deprecated since, is what this leg tests.
		topts = append(topts, mcpgotransport.WithContinuousListening())
		copts = append(copts, mcpgoclient.WithProtocolVersion(pin))
	}
	tr, err := mcpgotransport.NewStreamableHTTP(s.url, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := mcpgoclient.NewClient(tr, copts...)
	defer c.Close()
	updates := make(chan string, 64)
	acked := make(chan struct{}, 1)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		switch n.Method {
		case mcpgo.MethodNotificationResourceUpdated:
			uri, _ := n.Params.AdditionalFields["uri"].(string)
			select {
			case updates <- uri:
			default:
			}
		case mcpgo.MethodNotificationSubscriptionsAcknowledged:
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	})
	if err := c.Start(ctx); err != nil {
		t.Fatalf("starting: %v", err)
	}
	init, err := c.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ClientInfo: mcpgo.Implementation{Name: "peers-test", Version: "1.0.0"},
	}})
	if err != nil {
		t.Fatalf("initializing: %v", err)
	}

	list, err := c.ListResources(ctx, mcpgo.ListResourcesRequest{})
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	var uri string
	for _, r := range list.Resources {
		if strings.HasSuffix(r.URI, "/notes.txt") {
			uri = r.URI
		}
	}
	if uri == "" {
		t.Fatalf("resources/list has no notes.txt: %+v", list.Resources)
	}
	read := func(want string) {
		t.Helper()
		res, err := c.ReadResource(ctx, mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: uri}})
		if err != nil {
			t.Fatalf("resources/read %s: %v", uri, err)
		}
		var text string
		if len(res.Contents) == 1 {
			if tc, ok := mcpgo.AsTextResourceContents(res.Contents[0]); ok {
				text = tc.Text
			}
		}
		if text != want {
			t.Fatalf("resources/read %s = %+v, want the text %q", uri, res.Contents, want)
		}
	}
	read("first draft\n")
	if pin != "" {
		//lint:ignore SA1019 resources/subscribe, gone at 2026-07-28, is what this leg tests.
		if err := c.Subscribe(ctx, mcpgo.SubscribeRequest{Params: mcpgo.SubscribeParams{URI: uri}}); err != nil {
			t.Fatalf("resources/subscribe %s: %v", uri, err)
		}
	} else {
		// At 2026-07-28 a resource is subscribed to by a listen naming it.
		filter := mcpgo.SubscriptionFilter{ResourceSubscriptions: []string{uri}}
		stop, err := c.ListenAsync(ctx, filter, func(err error) { t.Errorf("subscriptions/listen: %v", err) })
		if err != nil {
			t.Fatalf("subscriptions/listen: %v", err)
		}
		defer stop()
		select {
		case <-acked:
		case <-ctx.Done():
			t.Fatalf("no notifications/subscriptions/acknowledged within %v", checkTimeout)
		}
	}
	read(writeUntilUpdated(t, ctx, s, uri, updates))

	tools, err := c.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, serveTools) {
		t.Errorf("tools/list = %q, want %q", names, serveTools)
	}
	return init.ProtocolVersion
}
