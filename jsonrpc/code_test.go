package jsonrpc_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"tidings/jsonrpc"
)

// TestWrapKeepsTheCause: an error built with Wrap tells the peer its
// code and text, and keeps its cause for errors.Is and errors.As on this
// side; CodeOf finds the code through further wrapping, and calls any
// other error an internal one.
func TestWrapKeepsTheCause(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/srv/a", Err: fs.ErrNotExist}
	e := jsonrpc.Wrap(jsonrpc.CodeInternalError, "upstream a failed: ", cause)
	if e.Message != "upstream a failed: open /srv/a: file does not exist" {
		t.Errorf("message %q", e.Message)
	}
	wrapped := fmt.Errorf("serving tools/call: %w", e)
	if !errors.Is(wrapped, fs.ErrNotExist) {
		t.Error("errors.Is does not reach the cause")
	}
	if pe, ok := errors.AsType[*fs.PathError](wrapped); !ok || pe.Path != "/srv/a" {
		t.Errorf("errors.As found %v, want the cause", pe)
	}
	for _, c := range []struct {
		err  error
		want jsonrpc.Code
	}{
		{nil, 0},
		{wrapped, jsonrpc.CodeInternalError},
		{fmt.Errorf("x: %w", jsonrpc.NewError(jsonrpc.CodeInvalidParams, "bad", nil)), jsonrpc.CodeInvalidParams},
		{errors.New("plain"), jsonrpc.CodeInternalError},
	} {
		if got := jsonrpc.CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	b := jsonrpc.AppendErrorResponse(nil, jsonrpc.IntID(7), e)
	if string(b) != `{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"upstream a failed: open /srv/a: file does not exist"}}` {
		t.Errorf("the peer is told %s", b)
	}
}

func ExampleCodeOf() {
	err := fmt.Errorf("reading the config: %w", jsonrpc.NewError(jsonrpc.CodeInvalidParams, "limit must be positive", nil))
	fmt.Println(jsonrpc.CodeOf(err), int(jsonrpc.CodeOf(err)))
	fmt.Println(jsonrpc.CodeOf(errors.New("disk full")))
	// Output:
	// invalid params -32602
	// internal error
}
