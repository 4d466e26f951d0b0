package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// TestTaskStatusLines: off a terminal, the task id is printed once and
// then one line per state, with what the server wrote made printable; on
// a terminal, each state rewrites one line, cut to the width, and the
// line is finished at the end.
func TestTaskStatusLines(t *testing.T) {
	states := []mcp.Task{
		{TaskID: "t-1", Status: mcp.TaskWorking},
		{TaskID: "t-1", Status: mcp.TaskWorking, StatusMessage: "step 1 of 2"},
		{TaskID: "t-1", Status: mcp.TaskWorking, StatusMessage: "step 2\x1b]52;c;evil\a"},
		{TaskID: "t-1", Status: mcp.TaskCompleted},
	}
	var b bytes.Buffer
	s := newTaskStatus(&b)
	for _, st := range states {
		s.show(st)
	}
	s.end()
	want := "task t-1\nworking\nworking: step 1 of 2\nworking: step 2\uFFFD]52;c;evil\uFFFD\ncompleted\n"
	if b.String() != want {
		t.Errorf("pipe output = %q, want %q", b.String(), want)
	}

	b.Reset()
	s = &taskStatus{w: &b, tty: true, cols: 12}
	for _, st := range states[:2] {
		s.show(st)
	}
	s.end()
	want = "task t-1\n\r\x1b[Kworking\r\x1b[Kworking: s…\n"
	if b.String() != want {
		t.Errorf("terminal output = %q, want %q", b.String(), want)
	}

	b.Reset()
	s = newTaskStatus(&b)
	total := 4.0
	s.progress(1, &total, "reading")
	s.progress(2.5, nil, "")
	s.end()
	if want := "progress 1/4: reading\nprogress 2.5\n"; b.String() != want {
		t.Errorf("progress output = %q, want %q", b.String(), want)
	}

	b.Reset()
	s = newTaskStatus(&b)
	s.end()
	if b.Len() != 0 {
		t.Errorf("a call without a task printed %q", b.String())
	}
}

// TestCallToASilentCommandSaysWhy: tidings call of a command that is not
// a stdio server (tidings serve without --stdio) says within seconds what
// may be wrong, where it waited silent for the whole timeout.
func TestCallToASilentCommandSaysWhy(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "call", "--timeout", "6s", "tools", "--", bin, "serve", t.TempDir(), "--addr", "127.0.0.1:0")
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testkit.WaitFor(t, 5*time.Second, "the notice on stderr", func() bool {
		return strings.Contains(stderr.String(), "is it an MCP server over stdio? (tidings serve needs --stdio.)")
	})
	if err := <-done; err == nil {
		t.Errorf("tidings call of a server that never answers succeeded:\n%s", stderr.String())
	}
}
