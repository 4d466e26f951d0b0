package gateway_test

import (
	"strings"
	"testing"
	"time"

	"tidings/gateway"
)

func TestParseConfig(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte(`
upstreams:
  - id: files
    url: http://127.0.0.1:9001/mcp
  - id: weather
    command: [./weather, --stdio]
    prefix: ""
    exclude: ["debug_*"]
    auth:
      header: X-Api-Key
      header_file: /run/secrets/weather
callers:
  - scope: admin
  - upstreams: [files]
max_ttl: 90s
page_size: 20
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Upstreams) != 2 || cfg.Upstreams[1].Prefix == nil || *cfg.Upstreams[1].Prefix != "" ||
		cfg.Upstreams[1].Command[1] != "--stdio" || time.Duration(cfg.MaxTTL) != 90*time.Second || cfg.PageSize != 20 {
		t.Fatalf("parsed %+v", cfg)
	}
}

// TestConfigMistakesAreNamed: each mistake is refused with an error that
// says what is wrong and where.
func TestConfigMistakesAreNamed(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown member", "upstreams: [{id: a, url: http://x/mcp, prefx: b}]", `line 1, column 40: unknown member "prefx"`},
		{"case matters", "Upstreams: [{id: a, url: http://x/mcp}]", `line 1, column 1: unknown member "Upstreams"`},
		{"none", "max_ttl: 1m", "no upstreams"},
		{"bad id", "upstreams: [{id: A_b, url: http://x/mcp}]", `upstream 1 ("A_b"): the id has 'A' at byte 0`},
		{"twice", "upstreams: [{id: a, url: http://x/mcp}, {id: a, url: http://y/mcp}]", `upstream 2 ("a"): the id is used twice`},
		{"twice, placed", "upstreams:\n  - id: a\n    url: http://x/mcp\n  - id: a\n    url: http://y/mcp\n", `line 4, column 5: upstream 2 ("a"): the id is used twice`},
		{"two unknown members, one line", "upstreams:\n  - id: a\n    url: http://x/mcp\n    urll: y\ncaller: []\n",
			`line 4, column 5: unknown member "urll" (members are lower case, with '_' between words); line 5, column 1: unknown member "caller"`},
		{"a rule, placed", "upstreams: [{id: a, url: http://x/mcp}]\ncallers:\n  - upstreams: [b]\n", `line 3, column 5: caller rule 1: no upstream has the id "b"`},
		{"both", "upstreams: [{id: a, url: http://x/mcp, command: [x]}]", "give exactly one of url and command"},
		{"neither", "upstreams: [{id: a}]", "give exactly one of url and command"},
		{"bad glob", "upstreams: [{id: a, url: http://x/mcp, exclude: ['[']}]", `bad pattern "["`},
		{"two credentials", "upstreams: [{id: a, url: http://x/mcp, auth: {bearer_file: f, header: X, header_file: g}}]", "give one of bearer_file"},
		{"client credentials", "upstreams: [{id: a, url: http://x/mcp, auth: {client_credentials: {issuer: i}}}]", "needs issuer, client_id and client_secret_file"},
		{"client credentials over stdio", "upstreams: [{id: a, command: [x], auth: {client_credentials: {issuer: i, client_id: c, client_secret_file: f}}}]", "for an upstream over HTTP"},
		{"token exchange", "upstreams: [{id: a, url: http://x/mcp, auth: {token_exchange: {issuer: https://as}}}]", "token_exchange needs issuer, client_id and client_secret_file"},
		{"token exchange over stdio", "upstreams: [{id: a, command: [x], auth: {token_exchange: {issuer: https://as, client_id: c, client_secret_file: f}}}]", "token_exchange is for an upstream over HTTP"},
		{"token exchange and a bearer", "upstreams: [{id: a, url: http://x/mcp, auth: {bearer_file: f, token_exchange: {issuer: https://as, client_id: c, client_secret_file: f}}}]", "give one of bearer_file, header with header_file, client_credentials and token_exchange"},
		{"token exchange in clear", "upstreams: [{id: a, url: http://x/mcp, auth: {token_exchange: {issuer: http://as.example.com, client_id: c, client_secret_file: f}}}]", `upstream 1 ("a"): auth: token_exchange: the issuer "http://as.example.com" must be an https URL, or http on a loopback address`},
		{"token exchange resource", "upstreams: [{id: a, url: http://x/mcp, auth: {token_exchange: {issuer: https://as, client_id: c, client_secret_file: f, resource: mail}}}]", `the resource "mail" must be an absolute URI`},
		{"exchanged tokens", "upstreams: [{id: a, url: http://x/mcp}]\nmax_exchanged_tokens: -1", "max_exchanged_tokens is -1"},
		{"header alone", "upstreams: [{id: a, url: http://x/mcp, auth: {header: X}}]", "go together"},
		{"protocol", "upstreams: [{id: a, url: http://x/mcp, protocol: 2024-11-05}]", `protocol "2024-11-05" is not a revision`},
		{"rule upstream", "upstreams: [{id: a, url: http://x/mcp}]\ncallers: [{upstreams: [b]}]", `caller rule 1: no upstream has the id "b"`},
		{"duration", "upstreams: [{id: a, url: http://x/mcp}]\nmax_ttl: soon", `line 2, column 10: "soon" is not a duration`},
		{"page size", "upstreams: [{id: a, url: http://x/mcp}]\npage_size: -1", "page_size is -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}

// FuzzParseConfig: no file makes the parser panic, and what it accepts
// checks.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("upstreams: [{id: a, url: http://x/mcp}]"))
	f.Add([]byte("upstreams:\n  - id: a\n    command: [x, y]\n    prefix: ''\ncallers: [{scope: s}]\nmax_ttl: 1m\n"))
	f.Add([]byte("&a [*a, *a]"))
	f.Add([]byte("upstreams: [{id: a, url: http://x/mcp, include: ['[']}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := gateway.ParseConfig(b)
		if err != nil {
			return
		}
		if err := cfg.Check(); err != nil {
			t.Fatalf("ParseConfig accepted a configuration that does not check: %v", err)
		}
	})
}
