package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestTaskLeaseOldRecord: a record written without a lease, as a replica
// of before leases writes it during a rolling upgrade, never lapses: read
// long after, changed or followed by a listen, the task still runs, and
// nothing is failed. A record with a lease is read and written with it.
func TestTaskLeaseOldRecord(t *testing.T) {
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	clock := now
	s := New(mcp.Implementation{Name: "t", Version: "1"}, WithCapabilities(Tasks), WithTaskLease(time.Second),
		WithClock(func() time.Time { return clock }), WithLogger(slog.New(slog.DiscardHandler)))
	defer func() { _ = s.Shutdown(context.Background()) }()
	ctx := context.Background()
	// What a replica without leases writes: every field it knows of.
	old := `{"v":1,"owner":"` + s.ownerHash("alice") + `","status":"working","created":"2026-07-28T12:00:00Z",` +
		`"updated":"2026-07-28T12:00:00Z","ttlMs":3600000,"pollMs":1000}`
	if err := s.taskStore.Create(ctx, "old", []byte(old), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(59 * time.Minute)
	rec, err := s.loadTask(ctx, "old", "alice")
	if err != nil || rec.Status != mcp.TaskWorking || !rec.Lease.IsZero() {
		t.Fatalf("an hour less a minute on: %+v, %v; want it working, without a lease", rec, err)
	}
	if rec.lapsed(clock) {
		t.Error("a record without a lease lapsed")
	}
	rec, err = s.changeTask(ctx, "old", "alice", func(rec *taskRecord) bool { rec.Message = "still here"; return true })
	if err != nil || rec.Status != mcp.TaskWorking || rec.Message != "still here" {
		t.Fatalf("changed: %+v, %v", rec, err)
	}
	s.leases.follow(ctx, "old", "alice", rec)
	s.leases.mu.Lock()
	n := len(s.leases.tasks)
	s.leases.mu.Unlock()
	if n != 0 {
		t.Errorf("a listen watches the lease of a task without one (%d watched)", n)
	}

	leased := &taskRecord{Status: mcp.TaskWorking, Lease: now.Add(time.Second)}
	for _, c := range []struct {
		status mcp.TaskStatus
		at     time.Time
		want   bool
	}{
		{mcp.TaskWorking, now, false},
		{mcp.TaskWorking, now.Add(time.Second - 1), false},
		{mcp.TaskWorking, now.Add(time.Second), true},
		{mcp.TaskInputRequired, now.Add(time.Hour), true},
		{mcp.TaskCompleted, now.Add(time.Hour), false},
		{mcp.TaskFailed, now.Add(time.Hour), false},
		{mcp.TaskCancelled, now.Add(time.Hour), false},
	} {
		leased.Status = c.status
		if got := leased.lapsed(c.at); got != c.want {
			t.Errorf("a %s task whose lease ends at %v, at %v: lapsed %v, want %v", c.status, leased.Lease, c.at, got, c.want)
		}
	}
	b, err := leased.encode()
	if err != nil {
		t.Fatal(err)
	}
	var back taskRecord
	if err := jsonrpc.UnmarshalParams(b, &back); err != nil || !back.Lease.Equal(leased.Lease) {
		t.Errorf("the lease does not survive the record's encoding: %s", b)
	}
}
