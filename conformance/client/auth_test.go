package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"
)

// The suite's authorization endpoint redirects at once; redirectReader
// takes the redirect only when it goes to the registered redirect URI
// itself, not to a longer path or another host that starts the same.
func TestRedirectReaderMatchesTheRedirectURI(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		location string
		ok       bool
	}{
		{redirectURI + "?code=c&state=s", true},
		{redirectURI, true},
		{redirectURI + "evil?code=c", false},
		{redirectURI + "/more?code=c", false},
		{"http://localhost:3000/callback.evil.example/?code=c", false},
		{"http://localhost:30001/callback?code=c", false},
		{"https://localhost:3000/callback?code=c", false},
		{"http://user@localhost:3000/callback?code=c", false},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, tt.location, http.StatusFound)
		}))
		q, err := redirectReader{}.Authorize(t.Context(), srv.URL+"/authorize")
		srv.Close()
		if tt.ok && (err != nil || (len(q) > 0 && q.Get("code") != "c")) {
			t.Errorf("%s: refused: %v", tt.location, err)
		}
		if !tt.ok && err == nil {
			t.Errorf("%s: taken as the redirect URI", tt.location)
		}
	}
}
