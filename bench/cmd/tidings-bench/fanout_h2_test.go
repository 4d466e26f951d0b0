//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// TestBenchFanoutHTTP2 runs the built binary with --http2-conns: the
// listens share the connections, every change reaches every one, and
// the report says how they went and what they cost.
func TestBenchFanoutHTTP2(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "fanout", "--listeners", "40", "--http2-conns", "4", "--changes", "2",
		"--timeout", "5s", "--json", "--quiet")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep struct {
		HTTP2Conns    int  `json:"http2Conns"`
		HTTP2Coalesce bool `json:"http2Coalesce"`
		Runs          []struct {
			Server    string `json:"server"`
			Completed int    `json:"completed"`
			Memory    *struct {
				Server struct {
					Goroutines float64 `json:"goroutinesPerListen"`
					RSSTotal   int64   `json:"rssBytes"`
				} `json:"server"`
			} `json:"memory"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if rep.HTTP2Conns != 4 || !rep.HTTP2Coalesce || len(rep.Runs) != 1 {
		t.Fatalf("report: %s", stdout.String())
	}
	r := rep.Runs[0]
	if r.Server != "tidings-h2" || r.Completed != 2 || r.Memory == nil || r.Memory.Server.RSSTotal <= 0 {
		t.Fatalf("run: %+v", r)
	}

	bad := exec.CommandContext(ctx, bin, "fanout", "--http2-conns", "-1")
	if out, err := bad.CombinedOutput(); err == nil || !bytes.Contains(out, []byte("--http2-conns must be positive")) {
		t.Errorf("--http2-conns -1: %v\n%s", err, out)
	}
}
