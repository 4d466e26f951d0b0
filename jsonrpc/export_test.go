package jsonrpc

// CheckDepth lets the fuzz test tell a refusal for depth from one for
// syntax.
var CheckDepth = checkDepth
