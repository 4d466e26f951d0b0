package streamhttp

import (
	"bytes"
	"errors"
	"io"
	"net/textproto"
	"strings"
	"testing"
	"testing/iotest"

	"tidings/mcp"
)

// TestProtocolVersionKey: the key the handler reads the version header
// by is its canonical form, or the header would never be found.
func TestProtocolVersionKey(t *testing.T) {
	if got := textproto.CanonicalMIMEHeaderKey(mcp.HeaderProtocolVersion); got != protocolVersionKey {
		t.Errorf("protocolVersionKey = %q, want the canonical %q", protocolVersionKey, got)
	}
}

// TestReadBody: a body is read whole up to the limit and refused past
// it, whether it declares its size, declares the wrong one, or comes in
// pieces; one that declares its size is read into one buffer.
func TestReadBody(t *testing.T) {
	const max = 1000
	for _, c := range []struct {
		name    string
		size    int
		decl    int64
		tooBig  bool
		onebyte bool
	}{
		{name: "declared", size: 700, decl: 700},
		{name: "undeclared", size: 700, decl: -1},
		{name: "empty", size: 0, decl: 0},
		{name: "at the limit", size: max, decl: max},
		{name: "at the limit undeclared", size: max, decl: -1, onebyte: true},
		{name: "past the limit", size: max + 1, decl: max + 1, tooBig: true},
		{name: "past the limit undeclared", size: 5000, decl: -1, tooBig: true},
		{name: "declared short", size: 900, decl: 10, onebyte: true},
		{name: "declared past the limit but short", size: 10, decl: 5000},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := bytes.Repeat([]byte("x"), c.size)
			var r io.Reader = bytes.NewReader(want)
			if c.onebyte {
				r = iotest.OneByteReader(r)
			}
			got, err := readBody(r, c.decl, max)
			if c.tooBig {
				if !errors.Is(err, errTooLarge) {
					t.Fatalf("err = %v, want errTooLarge", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, %v; want %d", len(got), err, c.size)
			}
		})
	}
	body := strings.Repeat("y", 700)
	r := strings.NewReader(body)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(body)
		if _, err := readBody(r, int64(len(body)), max); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("a body of declared size took %.0f allocations, want 1", allocs)
	}
	if _, err := readBody(iotest.ErrReader(errors.New("boom")), -1, max); err == nil {
		t.Error("a failed read was not reported")
	}
}
