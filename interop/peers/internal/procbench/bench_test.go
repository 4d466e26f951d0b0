package procbench_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// meta is the _meta of every request: the protocol revision and the
// client's capabilities, so that no server needs a handshake first.
const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// op is one request of the benchmarks.
type op struct {
	name, method, tool, body string
}

var ops = []op{
	{"call", "tools/call", "search_files_07",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_files_07","arguments":{"path":"src","query":"TODO","limit":10},` + meta + `}}`},
	{"list", "tools/list", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`},
}

// server is one benchpeer process answering requests one at a time.
type server interface {
	// roundTrip sends the op's request and returns its answer, whole.
	roundTrip(tb testing.TB, o op) []byte
	stop(tb testing.TB)
}

// stdioPeer is a benchpeer speaking over its stdin and stdout.
type stdioPeer struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Reader
}

func startStdio(tb testing.TB, args ...string) *stdioPeer {
	tb.Helper()
	cmd := exec.Command(peerBin, append(args, "-stdio")...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return &stdioPeer{cmd: cmd, in: in, lines: bufio.NewReaderSize(out, 1<<20)}
}

func (p *stdioPeer) roundTrip(tb testing.TB, o op) []byte {
	if _, err := io.WriteString(p.in, o.body+"\n"); err != nil {
		tb.Fatal(err)
	}
	line, err := p.lines.ReadSlice('\n')
	if err != nil {
		tb.Fatal(err)
	}
	return line
}

func (p *stdioPeer) stop(tb testing.TB) {
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		tb.Errorf("%s: %v", p.cmd.Args, err)
	}
}

// httpPeer is a benchpeer serving Streamable HTTP on loopback, reached
// by a keep-alive client of its own.
type httpPeer struct {
	cmd *exec.Cmd
	url string
	c   *http.Client
}

func startHTTP(tb testing.TB, args ...string) *httpPeer { return startServer(tb, peerBin, args...) }

// startServer starts bin, a server that prints "mcp endpoint: URL" on
// its standard output once it serves (benchpeer, gosdk-server).
func startServer(tb testing.TB, bin string, args ...string) *httpPeer {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "mcp endpoint: ")
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		tb.Fatalf("%s printed %q, %v; want its endpoint", cmd.Args, line, err)
	}
	return &httpPeer{cmd: cmd, url: url, c: newHTTPClient()}
}

// newHTTPClient is a keep-alive client of one server.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
}

func (p *httpPeer) roundTrip(tb testing.TB, o op) []byte {
	req, err := http.NewRequest(http.MethodPost, p.url, strings.NewReader(o.body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header = callHeaders(o)
	resp, err := p.c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: status %d, %v: %s", p.url, resp.StatusCode, err, body)
	}
	return body
}

// callHeaders are the headers of o's request, as a 2026-07-28 client
// sends them.
func callHeaders(o op) http.Header {
	h := http.Header{}
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{"2026-07-28"}
	h["Mcp-Method"] = []string{o.method}
	if o.tool != "" {
		h["Mcp-Name"] = []string{o.tool}
	}
	return h
}

func (p *httpPeer) stop(tb testing.TB) {
	p.c.CloseIdleConnections()
	p.cmd.Process.Signal(os.Interrupt)
	if err := p.cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 {
			tb.Errorf("%s: %v", p.cmd.Args, err)
		}
	}
}

// answerFile writes tidings' own answer to o, for the bare server to
// answer with.
func answerFile(tb testing.TB, ours server, o op) string {
	tb.Helper()
	f := filepath.Join(tb.TempDir(), "answer")
	ans := bytes.TrimRight(ours.roundTrip(tb, o), "\n")
	if !bytes.Contains(ans, []byte(`"result"`)) {
		tb.Fatalf("tidings answered %s with %s", o.name, ans)
	}
	if err := os.WriteFile(f, ans, 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

// race sends the same op to every server, one round trip to each per
// b.Loop, the order turning each time so that none always goes first;
// each server's time is its own round trips', measured in the same
// moments as the others', so that a machine whose other processes come
// and go slows all alike and the ratios hold.
func race(b *testing.B, o op, names []string, servers []server) []time.Duration {
	took := make([]time.Duration, len(servers))
	i := 0
	b.ResetTimer()
	for b.Loop() {
		for k := range servers {
			j := (i + k) % len(servers)
			t0 := time.Now()
			ans := servers[j].roundTrip(b, o)
			took[j] += time.Since(t0)
			if !bytes.Contains(ans, []byte(`"result"`)) {
				b.Fatalf("%s answered %s with %s", names[j], o.name, ans)
			}
		}
		i++
	}
	for j := range took {
		b.ReportMetric(float64(took[j])/float64(i), names[j]+"-ns/op")
	}
	return took
}

// BenchmarkStdioProcesses sends tools/call and tools/list (of 50 tools)
// to three server processes over their stdin and stdout, one round trip
// at a time: tidings, mcp-go v1.2.1 and the bare server that answers
// each line with tidings' own answer. x-mcpgo is mcp-go's time over
// tidings' (how many times mcp-go's rate tidings keeps up); bare-x-mcpgo
// is the same for the bare server, the most any server could show over
// the same pipes.
func BenchmarkStdioProcesses(b *testing.B) {
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			ours := startStdio(b, "-impl", "tidings")
			defer ours.stop(b)
			theirs := startStdio(b, "-impl", "mcpgo")
			defer theirs.stop(b)
			bare := startStdio(b, "-impl", "bare", "-answer", answerFile(b, ours, o))
			defer bare.stop(b)
			took := race(b, o, []string{"tidings", "mcpgo", "bare"}, []server{ours, theirs, bare})
			b.ReportMetric(float64(took[1])/float64(took[0]), "x-mcpgo")
			b.ReportMetric(float64(took[1])/float64(took[2]), "bare-x-mcpgo")
		})
	}
}

// BenchmarkHTTPProcesses sends tools/call and tools/list (of 50 tools)
// over loopback HTTP/1.1 to two server processes, one request at a time
// on a keep-alive connection each: tidings (streamhttp.Serve with the
// handler on a ServeMux, as a Go program serves it) and the bare server
// (net/http writing tidings' own answer). x-bare is the bare server's
// time over tidings' — tidings' share of the floor's rate.
func BenchmarkHTTPProcesses(b *testing.B) {
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			ours := startHTTP(b, "-impl", "tidings")
			defer ours.stop(b)
			bare := startHTTP(b, "-impl", "bare", "-answer", answerFile(b, ours, o))
			defer bare.stop(b)
			took := race(b, o, []string{"tidings", "bare"}, []server{ours, bare})
			b.ReportMetric(float64(took[1])/float64(took[0]), "x-bare")
		})
	}
}

// TestPeersAnswer: every benchpeer the benchmarks start answers both ops
// with a result, over each transport it offers, and the bare ones with
// tidings' answer byte for byte.
func TestPeersAnswer(t *testing.T) {
	for _, o := range ops {
		ours := startStdio(t, "-impl", "tidings")
		theirs := startStdio(t, "-impl", "mcpgo")
		want := bytes.TrimRight(ours.roundTrip(t, o), "\n")
		bare := startStdio(t, "-impl", "bare", "-answer", answerFile(t, ours, o))
		for name, p := range map[string]server{"tidings": ours, "mcpgo": theirs, "bare": bare} {
			if ans := p.roundTrip(t, o); !bytes.Contains(ans, []byte(`"result"`)) {
				t.Errorf("stdio %s answered %s with %s", name, o.name, ans)
			}
		}
		if got := bytes.TrimRight(bare.roundTrip(t, o), "\n"); !bytes.Equal(got, want) {
			t.Errorf("the bare stdio server answered %s, want tidings' %s", got, want)
		}
		for _, p := range []server{ours, theirs, bare} {
			p.stop(t)
		}

		hOurs := startHTTP(t, "-impl", "tidings")
		want = hOurs.roundTrip(t, o)
		hBare := startHTTP(t, "-impl", "bare", "-answer", answerFile(t, hOurs, o))
		if got := hBare.roundTrip(t, o); !bytes.Equal(got, want) {
			t.Errorf("the bare HTTP server answered %s, want tidings' %s", got, want)
		}
		hOurs.stop(t)
		hBare.stop(t)
	}
}
