package h2_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tidings/streamhttp/internal/h2"
)

// h2cServer serves h over HTTP/2 without TLS with this package, and
// returns its URL and a client that speaks HTTP/2 to it.
func h2cServer(t *testing.T, h http.Handler, cfg h2.Config) (string, *http.Client, *h2.Server) {
	t.Helper()
	addr, _, srv := listenH2C(t, h, cfg)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return "http://" + addr, &http.Client{Transport: tr}, srv
}

// echo answers with what it was sent and how.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Proto", r.Proto)
	w.Header().Set("X-Type", fmt.Sprintf("%T", w))
	w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
	w.Header().Set("X-Host", r.Host)
	_, _ = w.Write(body)
}

// TestServesRequestsAndBodies: requests with and without bodies, a
// body over the stream's window, and an answer over the client's
// window, all over one connection.
func TestServesRequestsAndBodies(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for range 64 { // 4 MiB
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	url, client, _ := h2cServer(t, mux, h2.Config{})

	resp, err := client.Get(url + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.Header.Get("X-Type") != "*h2.responseWriter" || len(b) != 0 || resp.Header.Get("Date") == "" {
		t.Fatalf("GET: proto %d, headers %v, body %q", resp.ProtoMajor, resp.Header, b)
	}

	big := bytes.Repeat([]byte("x"), 3<<20)
	resp, err = client.Post(url+"/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, big) || resp.Header.Get("X-Length") != fmt.Sprint(len(big)) {
		t.Fatalf("POST of %d bytes came back as %d, length header %q", len(big), len(b), resp.Header.Get("X-Length"))
	}

	resp, err = client.Get(url + "/big")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != 4<<20 {
		t.Fatalf("read %d bytes of 4 MiB: %v", n, err)
	}
}

// TestServesOverTLS: ALPN h2 reaches this package's server.
func TestServesOverTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(echo))
	ts.EnableHTTP2 = true
	if _, err := h2.Configure(ts.Config, h2.Config{}); err != nil {
		t.Fatal(err)
	}
	ts.StartTLS()
	defer ts.Close()
	client := ts.Client()
	defer client.CloseIdleConnections()
	resp, err := client.Post(ts.URL, "text/plain", strings.NewReader("over TLS"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "over TLS" || resp.ProtoMajor != 2 || resp.Header.Get("X-Type") != "*h2.responseWriter" {
		t.Fatalf("got %q over %s by %s", b, resp.Proto, resp.Header.Get("X-Type"))
	}
}
