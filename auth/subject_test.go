package auth_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tidings/auth"
)

// TestSubjectTokenIsForExchangeOnly: the handler behind Require finds the
// caller's token only through SubjectTokenFromContext, which hands it out
// by ForExchange alone: printed, logged or encoded, it is redacted.
func TestSubjectTokenIsForExchangeOnly(t *testing.T) {
	e := newEnv(t)
	g, err := auth.New(e.as.Issuer(), e.resource)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.as.Token(t)
	var st *auth.SubjectToken
	h := g.Require(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		st, _ = auth.SubjectTokenFromContext(r.Context())
	}))
	req := httptest.NewRequest(http.MethodPost, e.resource, bytes.NewReader(nil))
	req.Header.Set("Authorization", "Bearer "+tok)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if st == nil || st.ForExchange() != tok {
		t.Fatal("the handler did not get the caller's token for exchange")
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("caller", "token", st)
	b, err := json.Marshal(map[string]any{"token": st})
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{fmt.Sprint(st), fmt.Sprintf("%v %+v %#v %s %q", st, st, st, st, st), logged.String(), string(b),
		fmt.Sprintf("%v", struct{ T *auth.SubjectToken }{st}), fmt.Errorf("wrapped: %v", st).Error()} {
		if strings.Contains(shown, tok) || !strings.Contains(shown, "[redacted]") {
			t.Errorf("the token shows: %s", shown)
		}
	}
	if _, ok := auth.SubjectTokenFromContext(req.Context()); ok {
		t.Error("a request that did not pass Require has a subject token")
	}
}
