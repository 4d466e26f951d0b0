package h2_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/streamhttp/internal/h2"
)

// seedFrames frames what build writes, as a client sends it after its
// preface; enc encodes a header block (with one HPACK state for all).
func seedFrames(build func(fr *http2.Framer, enc func(fs ...hpack.HeaderField) []byte)) []byte {
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	he := hpack.NewEncoder(&hb)
	enc := func(fs ...hpack.HeaderField) []byte {
		hb.Reset()
		for _, f := range fs {
			_ = he.WriteField(f)
		}
		return bytes.Clone(hb.Bytes())
	}
	build(fr, enc)
	return buf.Bytes()
}

// serveConnSeeds are valid openings of a connection, for the fuzzer to
// start from.
func serveConnSeeds() [][]byte {
	get := reqFields("GET", "/")
	post := reqFields("POST", "/echo", "content-length", "5")
	return [][]byte{
		seedFrames(func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			_ = fr.WriteSettings()
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
		}),
		seedFrames(func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(post...), EndHeaders: true})
			_ = fr.WriteData(1, false, []byte("hel"))
			_ = fr.WriteData(1, true, []byte("lo"))
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
		}),
		seedFrames(func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			_ = fr.WriteSettings()
			_ = fr.WriteSettingsAck()
			_ = fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
			_ = fr.WriteWindowUpdate(0, 1<<20)
		}),
		seedFrames(func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			_ = fr.WriteSettings()
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
			_ = fr.WriteWindowUpdate(1, 1000)
			_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(post...), EndHeaders: true})
			_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		}),
		seedFrames(func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
			block := enc(reqFields("GET", "/", "x-a", strings.Repeat("a", 100))...)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:10], EndStream: true})
			_ = fr.WriteContinuation(1, true, block[10:])
			_ = fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 10})
			_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		}),
	}
}

// FuzzServeConn: whatever bytes follow a client's preface, ServeConn
// neither panics nor hangs: once the client has sent them and closed
// its end, ServeConn returns, and every handler it started has returned.
func FuzzServeConn(f *testing.F) {
	for _, seed := range serveConnSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		inBubble(t, func(t *testing.T) {
			var running atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				running.Add(1)
				defer running.Add(-1)
				_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
				_, _ = io.WriteString(w, "ok")
			})
			cli, srv, done := servePipe(t, h, h2.Config{MaxStreams: 16, MaxHeaderBytes: 16 << 10}, nil)
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				_, _ = io.Copy(io.Discard, cli) // the server's writes never block
			}()
			// The write ends when the server has read it all, or closed.
			_, _ = cli.Write(append([]byte(http2.ClientPreface), in...))
			_ = cli.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ServeConn did not return 10s after the client closed")
			}
			<-drained
			synctest.Wait()
			if n, r := srv.Stats().Streams, running.Load(); n != 0 || r != 0 {
				t.Fatalf("ServeConn returned, and once all was quiet %d streams were still held, %d handlers still running", n, r)
			}
		})
	})
}

// FuzzRequestHeaders: a request with any one extra header field (any
// name, any value, sent through HPACK) is served or refused, never
// panics the server nor hangs it: the stream is answered, or reset, or
// the connection ended with a GOAWAY. A handler that runs sees only a
// field HTTP/2 allows: a lowercase token name, a value without NUL, CR
// or LF nor whitespace at either end, no connection-specific field, TE
// only "trailers"; and it sees it as sent. A connection that was not
// ended still answers a PING.
func FuzzRequestHeaders(f *testing.F) {
	for _, kv := range [][2]string{
		{"x-foo", "bar"}, {"X-Upper", "1"}, {"connection", "keep-alive"}, {"keep-alive", "1"},
		{"te", "gzip"}, {"te", "trailers"}, {":path", "/dup"}, {":protocol", "websocket"},
		{":status", "200"}, {"content-length", "5"}, {"content-length", "0"}, {"cookie", "a=b"},
		{"host", "other.test"}, {"x", "a\x00b"}, {"x", "a\r\nb: c"}, {"", "v"}, {"x-sp", " padded "},
		{"x-long", strings.Repeat("v", 20000)}, {"x:colon", "v"}, {"x y", "v"}, {"\u00e9", "\u00e9"},
	} {
		f.Add(kv[0], kv[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		inBubble(t, func(t *testing.T) {
			seen := make(chan http.Header, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Clone()
				_, _ = io.WriteString(w, "ok")
			})
			cli, srv, _ := servePipe(t, h, h2.Config{MaxHeaderBytes: 16 << 10}, nil)
			c := newClient(t, cli)
			c.handshake()
			werr := c.writeHeaders(1, true, append(reqFields("GET", "/"), hpack.HeaderField{Name: name, Value: value}))
			got := c.expect("an answer, a reset or a GOAWAY", func(f rframe) bool {
				return f.Err != nil || f.Type == http2.FrameGoAway ||
					(f.Stream == 1 && (f.Type == http2.FrameHeaders || f.Type == http2.FrameRSTStream))
			})
			var hdr http.Header
			select {
			case hdr = <-seen:
			default:
			}
			switch {
			case got.Type == http2.FrameHeaders && got.status() != "431":
				if hdr == nil {
					t.Fatalf("answered %s without the handler", got.status())
				}
				if !validWireName(name) || !httpguts.ValidHeaderFieldValue(value) || strings.Trim(value, " \t") != value {
					t.Errorf("the handler was served the field %q: %q", name, value)
				}
				switch name {
				case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
					t.Errorf("the handler was served the connection-specific field %q", name)
				case "te":
					if value != "trailers" {
						t.Errorf("the handler was served te: %q", value)
					}
				case "host":
				default:
					if vv := hdr[http.CanonicalHeaderKey(name)]; len(vv) != 1 || vv[0] != value {
						t.Errorf("the handler saw %q as %q, sent %q", name, vv, value)
					}
				}
			case hdr != nil:
				t.Errorf("the handler ran for a request answered %v", got)
			}
			if werr == nil && got.Err == nil && got.Type != http2.FrameGoAway {
				c.ping()
			}
			_ = cli.Close()
			synctest.Wait()
			if n := srv.Stats().Streams; n != 0 {
				t.Fatalf("%d streams still held once the closed connection was quiet", n)
			}
		})
	})
}

// validWireName reports whether name is a regular field's name as
// HTTP/2 carries it: a non-empty token, without uppercase letters.
func validWireName(name string) bool {
	return httpguts.ValidHeaderFieldName(name) && strings.ToLower(name) == name
}
