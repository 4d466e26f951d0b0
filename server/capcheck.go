package server

import (
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// missingCapabilities returns the client capabilities that the input
// requests need and caps does not declare, and whether any are missing.
// Elicitation is checked per mode and sampling with tools needs
// sampling.tools, so that the -32021 a client receives names exactly what
// it would have to declare. A method that is not an input request, or
// params that cannot be read, are the handler's fault and reported as an
// error.
func missingCapabilities(caps mcp.ClientCaps, reqs map[string]mcp.InputRequest) (mcp.ClientCaps, bool, error) {
	var missing mcp.ClientCaps
	need := false
	empty := func() *jsontext.Value { v := jsontext.Value("{}"); return &v }
	for key, r := range reqs {
		switch r.Method {
		case mcp.MethodElicit:
			var p struct {
				Mode *string `json:"mode"`
			}
			if err := jsonrpc.UnmarshalParams(r.Params, &p); err != nil {
				return mcp.ClientCaps{}, false, fmt.Errorf("input request %q: %w", key, err)
			}
			mode := "form"
			if p.Mode != nil {
				mode = *p.Mode
			}
			switch mode {
			case "form":
				if !caps.Elicitation.SupportsForm() {
					if missing.Elicitation == nil {
						missing.Elicitation = &mcp.ElicitationCaps{}
					}
					missing.Elicitation.Form = empty()
					need = true
				}
			case "url":
				if !caps.Elicitation.SupportsURL() {
					if missing.Elicitation == nil {
						missing.Elicitation = &mcp.ElicitationCaps{}
					}
					missing.Elicitation.URL = empty()
					need = true
				}
			default:
				return mcp.ClientCaps{}, false, fmt.Errorf("input request %q: unknown elicitation mode %q", key, mode)
			}
		case mcp.MethodCreateMessage:
			var p struct {
				Tools jsontext.Value `json:"tools"`
			}
			if err := jsonrpc.UnmarshalParams(r.Params, &p); err != nil {
				return mcp.ClientCaps{}, false, fmt.Errorf("input request %q: %w", key, err)
			}
			if caps.Sampling == nil {
				if missing.Sampling == nil {
					missing.Sampling = &mcp.SamplingCaps{}
				}
				need = true
			}
			if len(p.Tools) > 0 && (caps.Sampling == nil || caps.Sampling.Tools == nil) {
				if missing.Sampling == nil {
					missing.Sampling = &mcp.SamplingCaps{}
				}
				missing.Sampling.Tools = empty()
				need = true
			}
		case mcp.MethodRootsList:
			if caps.Roots == nil {
				missing.Roots = empty()
				need = true
			}
		default:
			return mcp.ClientCaps{}, false, fmt.Errorf("input request method %q is not allowed", r.Method)
		}
	}
	return missing, need, nil
}

// missingCapabilityError is the -32021 error naming what the client must
// declare.
func missingCapabilityError(missing mcp.ClientCaps) *jsonrpc.Error {
	return jsonrpc.NewError(mcp.CodeMissingRequiredCapability, "Missing required client capability",
		map[string]any{"requiredCapabilities": missing})
}
