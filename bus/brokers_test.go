package bus_test

import (
	"context"
	"testing"
	"time"

	"tidings/bus"
	"tidings/internal/brokertest"
)

// broker is a message broker a test can take down and bring back.
type broker interface {
	// conn dials a new connection to it.
	conn(t testing.TB, opts ...bus.Option) bus.Conn
	// down takes it down and up brings it back on the same address; a
	// bus without a broker server (real false) does nothing.
	down()
	up()
	real() bool
}

// kind is one bus implementation the tests run over.
type kind struct {
	name string
	new  func(t testing.TB) broker
}

// kinds are the buses every cross-replica test runs over.
var kinds = []kind{
	{"local", func(testing.TB) broker { return localBroker{bus.NewLocal()} }},
	{"nats", func(t testing.TB) broker { return startNATS(t) }},
	{"redis", func(t testing.TB) broker { return startRedis(t) }},
}

// forEachBus runs fn once per bus kind, each with a broker of its own.
func forEachBus(t *testing.T, fn func(t *testing.T, br broker)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k.new(t)) })
	}
}

type localBroker struct{ l *bus.Local }

func (b localBroker) conn(testing.TB, ...bus.Option) bus.Conn { return b.l.Conn() }
func (localBroker) down()                                     {}
func (localBroker) up()                                       {}
func (localBroker) real() bool                                { return false }

// natsBroker is a NATS server run in the test process on a loopback port.
type natsBroker struct{ *brokertest.NATS }

func startNATS(t testing.TB) natsBroker { return natsBroker{brokertest.StartNATS(t)} }

func (b natsBroker) url() string                                    { return b.URL() }
func (b natsBroker) down()                                          { b.Down() }
func (b natsBroker) up()                                            { b.Up() }
func (b natsBroker) conn(t testing.TB, opts ...bus.Option) bus.Conn { return dial(t, b.url(), opts) }
func (natsBroker) real() bool                                       { return true }

// redisBroker is a redis-server process on a loopback port, persisting
// nothing; the tests skip without one unless TIDINGS_REDIS=1.
type redisBroker struct{ *brokertest.Redis }

func startRedis(t testing.TB) redisBroker { return redisBroker{brokertest.StartRedis(t)} }

func (b redisBroker) url() string                                    { return b.URL() }
func (b redisBroker) down()                                          { b.Down() }
func (b redisBroker) up()                                            { b.Up() }
func (b redisBroker) conn(t testing.TB, opts ...bus.Option) bus.Conn { return dial(t, b.url(), opts) }
func (redisBroker) real() bool                                       { return true }

func dial(t testing.TB, url string, opts []bus.Option) bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Dial(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
