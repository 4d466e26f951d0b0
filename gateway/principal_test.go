package gateway

import (
	"net/http/httptest"
	"testing"

	"tidings/auth"
)

// TestPrincipalTellsScopesApart: one subject's tokens of different
// scopes are different principals, whatever the order of their scopes;
// a request without a token has none.
func TestPrincipalTellsScopesApart(t *testing.T) {
	of := func(scopes ...string) string {
		return principalOf(&auth.Info{Issuer: "https://as", Subject: "alice", Scopes: scopes})
	}
	read, both, swapped, none := of("read"), of("read", "admin"), of("admin", "read", "admin"), of()
	// A scope holding what would spell two scopes is still one.
	spelled := of("admin,4:read")
	if read == both || both != swapped || none == read || spelled == both || spelled == read {
		t.Fatalf("principals: read %q, both %q, swapped %q, none %q, spelled %q", read, both, swapped, none, spelled)
	}
	if none != (&auth.Info{Issuer: "https://as", Subject: "alice"}).Principal() {
		t.Fatalf("a token without scopes is named %q, not as auth names it", none)
	}
	if p := Principal(httptest.NewRequest("POST", "/mcp", nil)); p != "" {
		t.Fatalf("no token: principal %q", p)
	}
}
