package streamhttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"tidings/mcp"
	"tidings/streamhttp"
)

type nopRW struct{ h http.Header }

func (w *nopRW) Header() http.Header        { return w.h }
func (w *nopRW) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopRW) WriteHeader(int)             {}

func BenchmarkZZHandlerOnly(b *testing.B) {
	h := streamhttp.New(benchServer(b))
	body := request(1, mcp.MethodToolsList, "")
	hdr := headers(mcp.MethodToolsList, "")
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", bytes.NewReader(body))
		req.Header = hdr
		w := &nopRW{h: http.Header{}}
		h.ServeHTTP(w, req)
	}
}
