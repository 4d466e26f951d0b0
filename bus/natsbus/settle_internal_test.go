package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus"
	"tidings/internal/testrig/testbroker"
)

// TestOpenPatientlyAsksAgain: a bucket whose first requests go
// unanswered in time (here, by waits far too short for any answer, as
// on a cluster still electing its leaders) is asked for again, each time
// with a longer wait, until JetStream answers; the store opens.
func TestOpenPatientlyAsksAgain(t *testing.T) {
	b := testbroker.StartNATS(t)
	nc, err := nats.Connect(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings(append(quiet(), bus.WithBackoff(time.Millisecond, 2*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attempts := 0
	var kv jetstream.KeyValue
	err = openPatiently(ctx, cfg, time.Microsecond, func(ctx context.Context) (err error) {
		attempts++
		kv, err = bucketOf(ctx, js, replicaPlan{n: 1, servers: 1}, cfg.Logger, jetstream.KeyValueConfig{Bucket: "slow"})
		return err
	})
	if err != nil {
		t.Fatalf("after %d attempts: %v", attempts, err)
	}
	if attempts < 2 {
		t.Fatalf("%d attempt: a wait of 1µs was answered", attempts)
	}
	if kv.Bucket() != "slow" {
		t.Fatalf("bucket %q", kv.Bucket())
	}
}

// TestOpenPatientlyStops: an answer that is a refusal is not asked
// again, and a JetStream that never answers is given up on once ctx
// ends, with an error that says so.
func TestOpenPatientlyStops(t *testing.T) {
	cfg := settings(append(quiet(), bus.WithBackoff(time.Millisecond, 2*time.Millisecond)))
	refused := errors.New("refused")
	attempts := 0
	err := openPatiently(context.Background(), cfg, time.Second, func(context.Context) error { attempts++; return refused })
	if !errors.Is(err, refused) || attempts != 1 {
		t.Fatalf("a refusal: %v after %d attempts", err, attempts)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	attempts = 0
	err = openPatiently(ctx, cfg, time.Millisecond, func(ctx context.Context) error {
		attempts++
		<-ctx.Done()
		return fmt.Errorf("stream create: %w", ctx.Err())
	})
	if err == nil || attempts < 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("never answered: %v after %d attempts", err, attempts)
	}
	if want := "JetStream did not answer"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestUnanswered: what counts as JetStream not having answered yet.
func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, false},
		{jetstream.ErrJetStreamNotEnabled, false},
		{jetstream.ErrJetStreamNotEnabledForAccount, false},
		{context.Canceled, false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
