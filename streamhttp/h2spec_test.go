package streamhttp_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"tidings/streamhttp"
)

// h2specCommand finds the h2spec binary: $TIDINGS_H2SPEC, else h2spec on
// the PATH, else .ci/bin/h2spec at the root of the repository, where
// scripts/test-all installs it.
func h2specCommand(t *testing.T) string {
	if p := os.Getenv("TIDINGS_H2SPEC"); p != "" {
		return p
	}
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	if p, err := filepath.Abs("../.ci/bin/h2spec"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "h2spec not found: GOBIN=$PWD/.ci/bin go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
	if os.Getenv("TIDINGS_H2SPEC_REQUIRED") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestH2spec runs the HTTP/2 conformance suite, h2spec, against Serve —
// the server tidings serve runs — over h2c (prior knowledge, on a port
// shared with HTTP/1.1) and over TLS, and fails naming every case that
// fails: all 145 must pass on both.
func TestH2spec(t *testing.T) {
	bin := h2specCommand(t)
	// An answer larger than a flow-control window's first frame, which
	// the flow-control cases (6.9.2) need to run at all.
	body := []byte(strings.Repeat("ok", 32<<10))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(body)
	})
	for _, overTLS := range []bool{false, true} {
		name := "h2c"
		if overTLS {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"-o", "2"}
			var opts []streamhttp.ServeOption
			if overTLS {
				cert := httptest.NewTLSServer(http.NotFoundHandler())
				cert.Close()
				opts = append(opts, streamhttp.WithTLS(&tls.Config{Certificates: cert.TLS.Certificates}))
				args = append(args, "-t", "-k")
			}
			addr := serveOn(t, handler, opts...)
			host, port, _ := net.SplitHostPort(addr)
			out, err := exec.Command(bin, append(args, "-h", host, "-p", port)...).CombinedOutput()
			failed, total, passed := h2specResults(string(out))
			if total == 0 {
				t.Fatalf("h2spec said no summary (%v):\n%s", err, out)
			}
			t.Logf("h2spec over %s: %d tests, %d passed", name, total, passed)
			if len(failed) > 0 || passed != total {
				t.Errorf("h2spec over %s failed %v:\n%s", name, failed, out)
			}
		})
	}
}

var (
	h2specSection = regexp.MustCompile(`^\s*(\d+(?:\.\d+)*)\. `)
	h2specFailure = regexp.MustCompile(`^\s*× (\d+): `)
	h2specSummary = regexp.MustCompile(`(\d+) tests, (\d+) passed, \d+ skipped, \d+ failed`)
)

// h2specResults reads h2spec's report: the failed cases, as "3.5/2"
// (their section and number), and the summary's counts.
func h2specResults(out string) (failed []string, total, passed int) {
	if m := h2specSummary.FindStringSubmatch(out); m != nil {
		total, _ = strconv.Atoi(m[1])
		passed, _ = strconv.Atoi(m[2])
	}
	i := strings.Index(out, "Failures:")
	if i < 0 {
		return nil, total, passed
	}
	section := ""
	for _, line := range strings.Split(out[i:], "\n") {
		switch m := h2specFailure.FindStringSubmatch(line); {
		case h2specSection.MatchString(line):
			section = h2specSection.FindStringSubmatch(line)[1]
		case m != nil:
			failed = append(failed, section+"/"+m[1])
		}
	}
	return failed, total, passed
}

// serveOn serves h with Serve on a loopback port until the test ends,
// and returns the address.
func serveOn(t *testing.T, h http.Handler, opts ...streamhttp.ServeOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- streamhttp.Serve(ctx, ln, h, append(opts, streamhttp.WithServeLogger(slog.New(slog.DiscardHandler)))...)
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	return ln.Addr().String()
}
