package client

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tidings/mcp"
)

// TestVersionRefusalFallsBack checks that a -32022 or a DiscoverResult
// whose supported list lacks 2026-07-28 (the go-sdk's default server) is
// taken as a server of an older revision, which gets initialize with the newest revision both
// sides speak, and that a list with none in common is a clear error.
func TestVersionRefusalFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		how  refusal
		want string
	}{
		{"2025-11-25 listed", refuseVersion, mcp.LegacyVersion},
		{"2025-06-18 newest", refuseVersionOld, "2025-06-18"},
		{"server/discover lists older revisions", answerOldDiscover, mcp.LegacyVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLegacyFix(t, tc.how)
			c := f.client(t)
			ctx := t.Context()
			v, err := c.ProtocolVersion(ctx)
			if err != nil || v != tc.want {
				t.Fatalf("ProtocolVersion = %q, %v; want %s", v, err, tc.want)
			}
			if era, _ := c.Era(ctx); era != EraLegacy {
				t.Errorf("Era = %s, want %s", era, EraLegacy)
			}
			tools, err := c.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(tools); !slices.Equal(got, []string{"a", "b", "whoami"}) {
				t.Errorf("tools = %v", got)
			}
			inits := f.rec.requests(mcp.MethodInitialize)
			if len(inits) != 1 || string(inits[0].Params["protocolVersion"]) != `"`+tc.want+`"` {
				t.Fatalf("initialize = %v, want one asking for %s", inits, tc.want)
			}
			for _, r := range f.rec.requests(mcp.MethodToolsList) {
				if got := r.Header.Get(mcp.HeaderProtocolVersion); got != tc.want {
					t.Errorf("tools/list carried %s %q, want %q", mcp.HeaderProtocolVersion, got, tc.want)
				}
			}
			d, err := c.Discover(ctx)
			if err != nil || !slices.Equal(d.SupportedVersions, []string{tc.want}) {
				t.Errorf("Discover = %+v, %v; want the negotiated %s", d, err, tc.want)
			}
		})
	}
	t.Run("none in common", func(t *testing.T) {
		f := newLegacyFix(t, refuseVersionNone)
		c := f.client(t)
		_, err := c.Tools(t.Context())
		ve, ok := errors.AsType[*VersionError](err)
		if !ok {
			t.Fatalf("Tools: %v, want a *VersionError", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "2024-11-05") || !strings.Contains(msg, mcp.Version) || !strings.Contains(msg, mcp.LegacyVersion) {
			t.Errorf("error %q names not both lists", msg)
		}
		if !slices.Equal(ve.Offered, []string{"2024-11-05"}) {
			t.Errorf("Offered = %v", ve.Offered)
		}
		if n := f.rec.count(mcp.MethodInitialize); n != 0 {
			t.Errorf("initialize sent %d times to a server with no revision in common", n)
		}
	})
}

// TestPinnedVersion checks WithProtocolVersion: no probe, the pinned
// revision from the first request on, and a refusal of a server that
// answers with another.
func TestPinnedVersion(t *testing.T) {
	t.Run("older", func(t *testing.T) {
		f := newLegacyFix(t, refuseJSON)
		c := f.client(t, WithProtocolVersion("2025-06-18"))
		if _, err := c.Tools(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := f.rec.count(mcp.MethodDiscover); n != 0 {
			t.Errorf("server/discover sent %d times, want none when pinned", n)
		}
		if v, _ := c.ProtocolVersion(t.Context()); v != "2025-06-18" {
			t.Errorf("ProtocolVersion = %q", v)
		}
		inits := f.rec.requests(mcp.MethodInitialize)
		if len(inits) != 1 || string(inits[0].Params["protocolVersion"]) != `"2025-06-18"` {
			t.Errorf("initialize = %v", inits)
		}
	})
	t.Run("2025-03-26 declares no elicitation", func(t *testing.T) {
		f := newLegacyFix(t, refuseJSON)
		c := f.client(t, WithProtocolVersion("2025-03-26"), WithElicitation(nil))
		if _, err := c.Tools(t.Context()); err != nil {
			t.Fatal(err)
		}
		inits := f.rec.requests(mcp.MethodInitialize)
		if len(inits) != 1 || strings.Contains(string(inits[0].Params["capabilities"]), "elicitation") {
			t.Errorf("initialize = %v, want one without elicitation", inits)
		}
	})
	t.Run("modern", func(t *testing.T) {
		f := newFixture(t, nil, fixtureOpts{})
		addTools(t, f.srv, "a")
		c := f.client(t, WithProtocolVersion(mcp.Version))
		if _, err := c.Tools(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := f.rec.count(mcp.MethodDiscover); n != 0 {
			t.Errorf("server/discover sent %d times, want none when pinned", n)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		c := NewHTTP("http://127.0.0.1:1/mcp", WithProtocolVersion("2024-11-05"))
		defer c.Close()
		if _, err := c.Tools(t.Context()); err == nil || !strings.Contains(err.Error(), `"2024-11-05" is not one this client speaks`) {
			t.Errorf("Tools: %v", err)
		}
	})
}

// TestProbeAnswersFirstDiscover checks that connecting costs one
// server/discover: the era probe's answer serves the first Discover.
func TestProbeAnswersFirstDiscover(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	c := f.client(t)
	ctx := t.Context()
	if _, err := c.Era(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := c.Discover(ctx)
	if err != nil || d.ServerInfo == nil || d.ServerInfo.Name != "fixture" {
		t.Fatalf("Discover = %+v, %v", d, err)
	}
	if n := f.rec.count(mcp.MethodDiscover); n != 1 {
		t.Errorf("server/discover sent %d times, want once", n)
	}
	// The probe's answer is taken once, and only for the credentials it
	// was got with.
	e := &eraState{}
	e.keepProbe(&probed{as: contextOf([]string{"Bearer a"})})
	if e.takeProbe(contextOf([]string{"Bearer b"})) != nil {
		t.Error("another principal took the probe's answer")
	}
	if e.takeProbe(contextOf([]string{"Bearer a"})) == nil || e.takeProbe(contextOf([]string{"Bearer a"})) != nil {
		t.Error("the probe's answer is not taken exactly once")
	}
}

// TestConnectErrorsInWords checks that a request that never reaches a
// server says why, with the URL, instead of "context canceled".
func TestConnectErrorsInWords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	t.Run("refused", func(t *testing.T) {
		c := NewHTTP(closed, WithLogger(quietLogger()))
		defer c.Close()
		_, err := c.Tools(t.Context())
		ce, ok := errors.AsType[*ConnectError](err)
		if !ok || ce.URL != closed || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Tools: %v, want a ConnectError for %s", err, closed)
		}
		if msg := err.Error(); !strings.Contains(msg, "connection refused") || !strings.Contains(msg, closed) || strings.Contains(msg, "context canceled") {
			t.Errorf("message %q", msg)
		}
	})
	t.Run("password", func(t *testing.T) {
		withPassword := "http://user:hunter2@" + strings.TrimPrefix(closed, "http://")
		c := NewHTTP(withPassword, WithLogger(quietLogger()))
		defer c.Close()
		_, err := c.Tools(t.Context())
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "user:xxxxx@") {
			t.Fatalf("Tools: %v, want the URL named without its password", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		hold := make(chan struct{})
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}))
		defer ts.Close()
		defer close(hold)
		c := NewHTTP(ts.URL, WithLogger(quietLogger()), WithTimeout(100*time.Millisecond))
		defer c.Close()
		_, err := c.Tools(t.Context())
		if _, ok := errors.AsType[*ConnectError](err); !ok || !strings.Contains(err.Error(), "no answer within 100ms") {
			t.Fatalf("Tools: %v, want no answer within 100ms", err)
		}
	})
	t.Run("TLS to plain HTTP", func(t *testing.T) {
		f := newFixture(t, nil, fixtureOpts{})
		u := "https://" + strings.TrimPrefix(f.url, "http://")
		c := NewHTTP(u, WithLogger(quietLogger()))
		defer c.Close()
		_, err := c.Tools(t.Context())
		if _, ok := errors.AsType[*ConnectError](err); !ok || !strings.Contains(err.Error(), "TLS handshake failed") {
			t.Fatalf("Tools: %v, want a TLS failure", err)
		}
	})
	t.Run("unknown host", func(t *testing.T) {
		c := NewHTTP("http://no-such-host.invalid/mcp", WithLogger(quietLogger()))
		defer c.Close()
		_, err := c.Tools(t.Context())
		if _, ok := errors.AsType[*ConnectError](err); !ok || !strings.Contains(err.Error(), "host no-such-host.invalid") {
			t.Fatalf("Tools: %v, want a ConnectError naming the host", err)
		}
	})
}

// TestNotFoundSuggestsMCPPath checks that a URL answering 404 to both
// eras, on a server whose /mcp answers, suggests that URL.
func TestNotFoundSuggestsMCPPath(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	mux := http.NewServeMux()
	mux.Handle("/mcp", f.rec)
	base := newFixtureHandler(t, mux)
	for _, u := range []string{base, base + "/", base + "/api", base + "/mcp/extra"} {
		c := NewHTTP(u, WithLogger(quietLogger()))
		_, err := c.Tools(t.Context())
		c.Close()
		nf, ok := errors.AsType[*NotFoundError](err)
		if !ok || nf.Alternative == "" {
			t.Errorf("%s: %v, want a NotFoundError with an alternative", u, err)
			continue
		}
		if he, ok := errors.AsType[*HTTPError](err); !ok || he.Status != http.StatusNotFound {
			t.Errorf("%s: the HTTP 404 is not in the chain: %v", u, err)
		}
		if !strings.Contains(err.Error(), "did you mean "+nf.Alternative+"?") {
			t.Errorf("%s: message %q", u, err)
		}
		if nf.Alternative != base+"/mcp" && nf.Alternative != base+"/api/mcp" {
			t.Errorf("%s: Alternative = %s", u, nf.Alternative)
		}
	}
	// Nothing to suggest where no /mcp answers either.
	c := NewHTTP(newFixtureHandler(t, http.NotFoundHandler()), WithLogger(quietLogger()))
	defer c.Close()
	_, err := c.Tools(t.Context())
	if nf, ok := errors.AsType[*NotFoundError](err); !ok || nf.Alternative != "" {
		t.Errorf("plain 404 server: %v, want a NotFoundError without an alternative", err)
	}
}
