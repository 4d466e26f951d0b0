// Package procbench holds the benchmarks of tidings' hot paths between
// real processes (see bench_test.go): the benchmark is the client, and
// each server — tidings, mcp-go, and a bare one that only answers with
// pre-encoded bytes — is a cmd/benchpeer process of its own, over pipes
// (stdio) or loopback HTTP, as a host reaches the servers it runs; and
// a tool call through a `tidings gateway` process against the same call
// made directly, of a tidings server and of a go-sdk server
// (gateway_test.go). It has no code of its own.
package procbench
