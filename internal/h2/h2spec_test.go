package h2_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tidings/internal/h2"
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
	if p, err := filepath.Abs("../../.ci/bin/h2spec"); err == nil {
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

// h2specKnownFailures are the cases a server that shares its port with
// HTTP/1.1 cannot pass without prior knowledge: 3.5/2 sends a line that
// is neither the HTTP/2 preface nor an HTTP/1.1 request, which net/http
// answers as a malformed HTTP/1.1 request (400), where h2spec wants the
// connection closed unanswered. Over TLS (ALPN h2) there is no such
// sharing, and every case must pass.
var h2specKnownFailures = map[bool][]string{false: {"3.5/2"}, true: nil}

// TestH2spec runs the HTTP/2 conformance suite, h2spec, against this
// package's server, over h2c (prior knowledge) and over TLS, and fails
// naming every case that fails.
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
			var addr string
			args := []string{"-o", "2"}
			if overTLS {
				addr = listenH2TLS(t, handler)
				args = append(args, "-t", "-k")
			} else {
				addr, _, _ = listenH2C(t, handler, h2.Config{})
			}
			host, port, _ := net.SplitHostPort(addr)
			out, err := exec.Command(bin, append(args, "-h", host, "-p", port)...).CombinedOutput()
			failed, total, passed := h2specResults(string(out))
			if total == 0 {
				t.Fatalf("h2spec said no summary (%v):\n%s", err, out)
			}
			t.Logf("h2spec over %s: %d tests, %d passed", name, total, passed)
			if unexpected := slices.DeleteFunc(failed, func(id string) bool { return slices.Contains(h2specKnownFailures[overTLS], id) }); len(unexpected) > 0 {
				t.Errorf("h2spec over %s failed %v:\n%s", name, unexpected, out[strings.Index(string(out), "Failures:"):])
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
		if m := h2specSection.FindStringSubmatch(line); m != nil {
			section = m[1]
		} else if m := h2specFailure.FindStringSubmatch(line); m != nil {
			failed = append(failed, section+"/"+m[1])
		}
	}
	return failed, total, passed
}

// listenH2TLS serves h over TLS (ALPN h2) with this package, on a
// loopback listener with a certificate of httptest's, until the test
// ends.
func listenH2TLS(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{}
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetHTTP2(true)
	ts.Config.TLSConfig = ts.TLS
	if _, err := h2.Configure(ts.Config, h2.Config{}); err != nil {
		t.Fatal(err)
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}
