package redisbus

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"tidings/bus"
	"tidings/internal/testrig/testbroker"
)

// openTasksAt opens the store at url for an internal test.
func openTasksAt(t *testing.T, url string) bus.TaskStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	s, err := OpenTasks(ctx, url, bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRedisTasksKeepTheirTTL: a task's key has its expiry set at Create,
// and keeps it through an Update.
func TestRedisTasksKeepTheirTTL(t *testing.T) {
	t.Parallel()
	br := testbroker.StartRedis(t)
	s := openTasksAt(t, br.URL()).(*redisTasks)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	exp := time.Now().Add(time.Hour)
	if err := s.Create(ctx, "t1", []byte("v1"), exp); err != nil {
		t.Fatal(err)
	}
	at := func() time.Time {
		t.Helper()
		ms, err := s.client.PExpireTime(ctx, s.prefix+"t1").Result()
		if err != nil {
			t.Fatal(err)
		}
		if ms <= 0 {
			t.Fatalf("the key has no expiry (%v)", ms)
		}
		return time.UnixMilli(ms.Milliseconds())
	}
	if got := at(); got.Before(exp) || got.Sub(exp) >= time.Millisecond {
		t.Fatalf("the key expires at %v, want %v", got, exp)
	}
	_, rev, err := s.Get(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "t1", []byte("v2"), rev); err != nil {
		t.Fatal(err)
	}
	if got := at(); got.Before(exp) || got.Sub(exp) >= time.Millisecond {
		t.Fatalf("after an update the key expires at %v, want %v", got, exp)
	}
}
