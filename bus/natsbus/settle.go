package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus/internal/brokerkit"
)

// setupWait bounds opening a store's bucket when ctx has no deadline. A
// cluster that has just formed, or is loaded, can take longer than one
// request's wait to place a bucket's replicas: a server started with
// it should wait for it, not fail.
const setupWait = 30 * time.Second

// askWait is how long the first attempt to open a bucket waits for
// JetStream; each attempt after one that went unanswered waits twice as
// long as the one before.
const askWait = 5 * time.Second

// openPatiently runs open, which sets up a store's bucket and may be
// run again, within ctx (within setupWait if ctx has no deadline): each
// attempt within a wait that starts at first and doubles, and again,
// after cfg's backoff, for as long as JetStream has not answered (a
// request timed out, or JetStream said it is not available yet, as
// while a cluster elects its leaders). Any other error ends it. The
// error once ctx has ended says that JetStream never answered, and why.
func openPatiently(ctx context.Context, cfg brokerkit.Config, first time.Duration, open func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, setupWait)
		defer cancel()
	}
	start, wait := time.Now(), first
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, wait)
		err := open(actx)
		cancel()
		if err == nil || !unanswered(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("JetStream did not answer in %d attempts over %v (a cluster still electing its leaders, or one too loaded to place the bucket's replicas): %w",
				attempt, time.Since(start).Round(time.Millisecond), err)
		}
		cfg.Logger.Warn("natsbus: JetStream did not answer; asking again", "attempt", attempt, "waited", wait, "err", err)
		wait *= 2
		t := time.NewTimer(cfg.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("JetStream did not answer in %d attempts over %v: %w", attempt, time.Since(start).Round(time.Millisecond), err)
		case <-t.C:
		}
	}
}

// unanswered reports whether err says that JetStream did not answer in
// time, or not yet: asking again later may succeed.
func unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return true
	}
	var ae *jetstream.APIError
	// 503 is what JetStream says while it has no leader to place a stream
	// ("JetStream system temporarily unavailable"), and also when it is
	// not enabled at all, which waiting does not mend.
	return errors.As(err, &ae) && ae.Code == 503 &&
		ae.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled && ae.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
}

// deliverWait bounds the retries of a write that no stream heard when
// its ctx has no deadline.
const deliverWait = 5 * time.Second

// untilHeard runs write, and runs it again for as long as it fails
// because no stream answered its subject (jetstream.ErrNoStreamResponse:
// the message reached no stream, so writing it again cannot write it
// twice) and ctx allows, within deliverWait if ctx has no deadline.
// That is what a write sees for a moment after its bucket was made on a
// cluster, before every server has learnt which of them hold its
// stream, and while the stream elects a new leader: a pause to wait out,
// not a failure. The client library already asks twice more within half
// a second, which a loaded cluster can outlast. The pause between tries
// doubles from 50ms up to 1s.
func untilHeard(ctx context.Context, log *slog.Logger, write func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deliverWait)
		defer cancel()
	}
	start, pause := time.Now(), 50*time.Millisecond
	unheard := func(attempts int, err error) error {
		return fmt.Errorf("no stream heard the write in %d attempts over %v (its bucket's stream has no leader, or this server has not learnt where it is): %w",
			attempts, time.Since(start).Round(time.Millisecond), err)
	}
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, jetstream.ErrNoStreamResponse):
			if attempt > 1 && ctx.Err() != nil {
				// Ended while asking again, as the client library does.
				return unheard(attempt, fmt.Errorf("%w, then %w", jetstream.ErrNoStreamResponse, err))
			}
			return err
		}
		log.Debug("natsbus: no stream heard the write; writing again", "attempt", attempt, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return unheard(attempt, err)
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}
