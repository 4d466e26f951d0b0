// Package stdiobench holds the benchmark of tidings' stdio transport
// against mcp-go's, both serving the same tools over in-process pipes
// (see bench_test.go); it has no code of its own.
package stdiobench
