package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file is multi-round-trip requests (MRTR): a handler that needs
// input returns InputRequired; on the 2026-07-28 wire the client gets an
// input_required result with a sealed requestState and retries, while on
// an earlier era's session the server asks the client itself and runs the
// handler again.

// maxInputRounds bounds how often one session request asks its client
// for input before giving up.
const maxInputRounds = 8

// withInput runs a handler. Where the era lets the server ask the client
// (req.askInput is set), an InputRequired is answered by asking and the
// handler runs again with the answers — so one handler serves both eras.
func withInput[T any](ctx context.Context, req *Request, call func() (T, error)) (T, error) {
	for round := 0; ; round++ {
		v, err := call()
		if req.askInput == nil || err == nil || round >= maxInputRounds {
			return v, err
		}
		// Asked only of an error: errors.As's target escapes, and
		// every call would pay for it.
		ir, ok := errors.AsType[*InputRequired](err)
		if !ok {
			return v, err
		}
		var zero T
		missing, need, cerr := missingCapabilities(req.Capabilities, ir.Requests)
		if cerr != nil {
			return zero, cerr
		}
		if need {
			return zero, missingCapabilityError(missing)
		}
		answers, aerr := req.askInput(ctx, ir.Requests)
		if aerr != nil {
			return zero, aerr
		}
		req.InputResponses, req.state = answers, ir.State
	}
}

// stateBinding is what a requestState is sealed to: the method, the name
// (tool, prompt or URI), the principal, and the arguments — canonicalised,
// so that a client which re-encodes the same arguments still matches,
// while a state cannot be replayed with other arguments.
func stateBinding(method, name, principal string, args jsontext.Value) string {
	var sum [sha256.Size]byte
	if len(args) > 0 {
		canon := jsontext.Value(append([]byte(nil), args...))
		if canon.Canonicalize() == nil {
			sum = sha256.Sum256(canon)
		} else {
			sum = sha256.Sum256(args)
		}
	}
	// Each part is length-prefixed, so that no name or principal can
	// make two different requests bind alike.
	var b []byte
	for _, part := range []string{method, name, principal, string(sum[:])} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	return string(b)
}

// openState verifies the requestState of a retried call.
func (s *Server) openState(c *engine.Call, req *Request, name string, args jsontext.Value) *engine.Reply {
	if c.P.RequestState == nil {
		return nil
	}
	st, err := s.seal.open(purposeState, *c.P.RequestState, stateBinding(req.Method, name, req.Principal, args), s.cfg.now())
	if err != nil {
		r := invalid(req.ID, "Invalid requestState")
		return &r
	}
	req.state = st
	return nil
}

// inputRequired turns a handler's InputRequired into the interim result,
// refusing to ask for kinds of input the client did not declare.
func (s *Server) inputRequired(req *Request, name string, args jsontext.Value, ir *InputRequired) engine.Reply {
	if req.askInput != nil {
		// The era has no interim results: input was asked for directly,
		// and a handler still asking after maxInputRounds has failed.
		return engine.Fail(req.ID, jsonrpc.CodeInternalError,
			"Internal error: the handler still needs input after "+strconv.Itoa(maxInputRounds)+" rounds", nil)
	}
	missing, need, err := missingCapabilities(req.Capabilities, ir.Requests)
	if err != nil {
		return s.internal(req.ID, err)
	}
	if need {
		return engine.ErrorReply(req.ID, missingCapabilityError(missing))
	}
	res := struct {
		InputRequests map[string]mcp.InputRequest `json:"inputRequests,omitempty"`
		RequestState  string                      `json:"requestState,omitempty"`
	}{InputRequests: ir.Requests}
	if ir.State != nil {
		res.RequestState = s.seal.seal(purposeState, ir.State, stateBinding(req.Method, name, req.Principal, args), s.cfg.now().Add(s.cfg.stateTTL))
	}
	if len(res.InputRequests) == 0 && res.RequestState == "" {
		return s.internal(req.ID, errors.New("InputRequired with neither requests nor state"))
	}
	return s.reply(req, res, engine.Tail{ResultType: mcp.ResultInputRequired})
}

// handlerError maps an error returned by a prompt, resource or completion
// handler to a reply. Only prompts/get and resources/read (like
// tools/call) may answer with input_required (MRTR-1); for any other
// method an InputRequired is the handler's fault. A request whose context
// has ended gets no answer: it was cancelled, or its connection is gone.
func (s *Server) handlerError(ctx context.Context, req *Request, name string, args jsontext.Value, err error) engine.Reply {
	var ir *InputRequired
	if errors.As(err, &ir) {
		if m, _ := engine.Lookup(req.Method); !m.AsksInput {
			return s.internal(req.ID, fmt.Errorf("%s handler asked for input, which only tools/call, prompts/get and resources/read may", req.Method))
		}
		return s.inputRequired(req, name, args, ir)
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return engine.ErrorReply(req.ID, je)
	}
	if ctx.Err() != nil {
		return engine.Reply{Outcome: engine.Silent}
	}
	return s.internal(req.ID, err)
}
