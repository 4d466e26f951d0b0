package redisbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tidings/bus"
	"tidings/bus/redisbus"
	"tidings/internal/testrig/testbroker"
)

// TestRedisRefusedPublishIsNotASilentSubscription: a replica whose
// publishes the broker refuses (here an ACL user without PUBLISH) hears
// nothing of its own, yet its subscription is fine. That silence must
// not be taken for a stuck subscription: renewing it would count a
// reconnect and re-notify every listener, again and again.
func TestRedisRefusedPublishIsNotASilentSubscription(t *testing.T) {
	rb := testbroker.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opt, err := redis.ParseURL(strings.Split(rb.URL(), "?")[0])
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opt)
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "listener", "on", ">pw", "~*", "&*", "+@all", "-publish").Err(); err != nil {
		t.Fatal(err)
	}
	u := strings.Replace(rb.URL(), "redis://", "redis://listener:pw@", 1)
	opts := []bus.Option{bus.WithHeartbeat(20 * time.Millisecond)}
	c, err := redisbus.Dial(ctx, u, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b := bus.New(c, opts...)
	defer b.Close()
	// The subscription's idle limit is one second here (three
	// heartbeats, at least a second); watch through three of them.
	// This is an absence, so it can only be watched for a while.
	until := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(until) {
		if st := b.Stats(); !st.Connected || st.Reconnects != 0 || st.Resyncs != 0 {
			t.Fatalf("refused publishes were taken for a stuck subscription: %+v", st)
		}
		<-time.After(20 * time.Millisecond)
	}
}
