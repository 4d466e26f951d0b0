package redisbus_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/redisbus"
	"tidings/internal/testrig/testbroker"
)

// TestWriteWithoutItsReplicaFails: with wait=1 and no replica to
// acknowledge it, a task's Create and Update and a state's Set are
// written on the server but fail with ErrUnreplicated after
// wait_timeout, where they would be reported done; a write refused
// (the id is taken, the revision moved) is told at once.
func TestWriteWithoutItsReplicaFails(t *testing.T) {
	t.Parallel()
	rb := testbroker.StartRedis(t)
	url := rb.URL() + "&wait=1&wait_timeout=100ms"
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	tasks, err := redisbus.OpenTasks(ctx, url, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	state, err := redisbus.OpenState(ctx, url, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()

	unreplicated := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, redisbus.ErrUnreplicated) {
			t.Fatalf("%s: %v, want ErrUnreplicated", what, err)
		}
	}
	start := time.Now()
	unreplicated("create", tasks.Create(ctx, "t1", []byte("v1"), time.Now().Add(time.Hour)))
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("create failed after %v, before wait_timeout", d)
	}
	rec, rev, err := tasks.Get(ctx, "t1")
	if err != nil || string(rec) != "v1" || rev != 1 {
		t.Fatalf("get: %q, %d, %v; want the write on the server", rec, rev, err)
	}
	_, err = tasks.Update(ctx, "t1", []byte("v2"), 1)
	unreplicated("update", err)
	unreplicated("set", state.Set(ctx, "k", true))

	start = time.Now()
	if err := tasks.Create(ctx, "t1", []byte("v3"), time.Now().Add(time.Hour)); !errors.Is(err, bus.ErrTaskExists) {
		t.Fatalf("create of a taken id: %v", err)
	}
	if _, err := tasks.Update(ctx, "t1", []byte("v3"), 1); !errors.Is(err, bus.ErrTaskConflict) {
		t.Fatalf("update of an old revision: %v", err)
	}
	if d := time.Since(start); d >= 100*time.Millisecond {
		t.Errorf("refused writes took %v: they waited for replicas", d)
	}
}
