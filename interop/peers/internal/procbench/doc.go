// Package procbench holds the benchmarks of tidings' hot paths between
// real processes (see bench_test.go): the benchmark is the client, and
// each server — tidings, mcp-go, and a bare one that only answers with
// pre-encoded bytes — is a cmd/benchpeer process of its own, over pipes
// (stdio) or loopback HTTP, as a host reaches the servers it runs. It
// has no code of its own.
package procbench
