package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
)

// A challenge's resource_metadata is taken over HTTPS only, unless the
// MCP server itself is reached over plain HTTP or on loopback.
func TestChallengeMetadataURLScheme(t *testing.T) {
	tests := []struct {
		server, fromChallenge string
		taken                 bool
	}{
		{"https://mcp.example.com/mcp", "https://mcp.example.com/.well-known/oauth-protected-resource/mcp", true},
		{"https://mcp.example.com/mcp", "https://meta.example.com/prm", true},
		{"https://mcp.example.com/mcp", "http://mcp.example.com/.well-known/oauth-protected-resource/mcp", false},
		{"https://mcp.example.com/mcp", "http://evil.example/prm", false},
		{"https://mcp.example.com/mcp", "ftp://mcp.example.com/prm", false},
		{"http://mcp.example.com/mcp", "http://mcp.example.com/prm", true},
		{"https://127.0.0.1:8443/mcp", "http://127.0.0.1:8080/prm", true},
		{"https://localhost/mcp", "http://localhost/prm", true},
		{"https://mcp.example.com/mcp", "/prm", true}, // relative: the server's own scheme
	}
	for _, tt := range tests {
		u, _ := url.Parse(tt.server)
		got := resourceMetadataURLs(u, tt.fromChallenge)
		want, _ := u.Parse(tt.fromChallenge)
		if taken := slices.Contains(got, want.String()); taken != tt.taken {
			t.Errorf("server %s, resource_metadata %s: taken=%v, want %v (%v)", tt.server, tt.fromChallenge, taken, tt.taken, got)
		}
	}
}

// recorder is a RoundTripper that records the URLs asked for and fails
// every request.
type recorder struct {
	mu   sync.Mutex
	urls []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.String())
	r.mu.Unlock()
	return nil, errors.New("no network in this test")
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.urls)
}

// An issuer the flow would refuse to use is not asked for its metadata
// either: no request goes to a plain HTTP issuer off loopback.
func TestInsecureIssuerNotFetched(t *testing.T) {
	for _, tt := range []struct {
		issuer    string
		allowHTTP bool
		fetched   bool
	}{
		{"http://as.example", false, false},
		{"http://as.example/tenant1", false, false},
		{"http://as.example", true, true},
		{"http://127.0.0.1:9", false, true},
		{"https://as.example", false, true},
	} {
		rec := &recorder{}
		f := mustFlow(t, Config{Interaction: &consent{}, HTTPClient: &http.Client{Transport: rec}, AllowHTTP: tt.allowHTTP})
		_, err := f.discoverServer(context.Background(), tt.issuer)
		if fetched := len(rec.seen()) > 0; fetched != tt.fetched {
			t.Errorf("%s (AllowHTTP %v): fetched %v, want %v: %v", tt.issuer, tt.allowHTTP, rec.seen(), tt.fetched, err)
		}
		if !tt.fetched && !errors.Is(err, ErrInsecureEndpoint) {
			t.Errorf("%s: err = %v, want ErrInsecureEndpoint", tt.issuer, err)
		}
	}
}
