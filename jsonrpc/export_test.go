package jsonrpc

// CheckDepth lets the fuzz test tell a refusal for depth from one for
// syntax.
var CheckDepth = checkDepth

// DecodeRequest and DecodeStrict let the fuzz test hold the fast reading
// of a request to the strict one.
var (
	DecodeRequest = decodeRequest
	DecodeStrict  = decodeStrict
)
