package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	js := jetStreamAt(t, b.URL())
	cfg := settings(append(quiet(), bus.WithBackoff(time.Millisecond, 2*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attempts := 0
	var kv jetstream.KeyValue
	err := openPatiently(ctx, cfg, time.Microsecond, func(ctx context.Context) (err error) {
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

// told is a slog.Handler that sends on heard each record whose message
// is msg, and drops the rest.
type told struct {
	msg   string
	heard chan struct{}
}

func (h told) Enabled(context.Context, slog.Level) bool { return true }
func (h told) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h told) WithGroup(string) slog.Handler            { return h }
func (h told) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.heard <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestWritesWaitForTheirStream: a write that no stream hears, as for a
// moment after a bucket is made on a cluster or while its stream elects
// a leader (here, the bucket's stream is gone until it is made again),
// is written again until the stream hears it, both the state's and the
// tasks'; and one whose stream never comes back fails once its context
// ends, saying that no stream heard it.
func TestWritesWaitForTheirStream(t *testing.T) {
	b := testbroker.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	h := told{msg: "natsbus: no stream heard the write; writing again", heard: make(chan struct{}, 1)}
	opts := []bus.Option{bus.WithHeartbeat(time.Hour), bus.WithLogger(slog.New(h))}
	state, err := OpenState(ctx, b.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	tasks, err := OpenTasks(ctx, b.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	js := jetStreamAt(t, b.URL())

	for _, c := range []struct {
		stream string
		write  func(context.Context) error
		remake func() error
	}{
		{"KV_tidings_2Etest", func(ctx context.Context) error { return state.Set(ctx, "k", true) }, func() error {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tidings_2Etest"})
			return err
		}},
		{"KV_tidings_2Etest_tasks", func(ctx context.Context) error {
			return tasks.Create(ctx, "t", []byte("{}"), time.Now().Add(time.Hour))
		}, func() error {
			_, err := js.CreateStream(ctx, tasksStream("tidings_2Etest_tasks", 1))
			return err
		}},
	} {
		if err := js.DeleteStream(ctx, c.stream); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.write(ctx) }()
		select {
		case <-h.heard:
		case err := <-done:
			t.Fatalf("%s: a write with its stream gone returned at once: %v", c.stream, err)
		}
		if err := c.remake(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: the write once its stream was back: %v", c.stream, err)
		}

		if err := js.DeleteStream(ctx, c.stream); err != nil {
			t.Fatal(err)
		}
		short, stop := context.WithTimeout(ctx, 2*time.Second)
		err := c.write(short)
		stop()
		if !errors.Is(err, jetstream.ErrNoStreamResponse) || !strings.Contains(err.Error(), "no stream heard the write") {
			t.Fatalf("%s: a write whose stream never came back: %v", c.stream, err)
		}
		<-h.heard // the logs of the short write
		if err := c.remake(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUntilHeardStopsAtOtherErrors: only a write no stream heard is
// written again.
func TestUntilHeardStopsAtOtherErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	refused := errors.New("refused")
	attempts := 0
	if err := untilHeard(context.Background(), log, func(context.Context) error { attempts++; return refused }); !errors.Is(err, refused) || attempts != 1 {
		t.Fatalf("a refusal: %v after %d attempts", err, attempts)
	}
	attempts = 0
	err := untilHeard(context.Background(), log, func(context.Context) error {
		if attempts++; attempts < 3 {
			return jetstream.ErrNoStreamResponse
		}
		return nil
	})
	if err != nil || attempts != 3 {
		t.Fatalf("unheard twice: %v after %d attempts", err, attempts)
	}
}
