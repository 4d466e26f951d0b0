package brokers_test

import (
	"context"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/internal/testrig/testbroker"
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
	{"local", func(testing.TB) broker { return localBroker{bus.NewLocal(), bus.NewLocalState()} }},
	{"nats", func(t testing.TB) broker { return realBroker{testbroker.StartNATS(t)} }},
	{"redis", func(t testing.TB) broker { return realBroker{testbroker.StartRedis(t)} }},
}

// forEachBus runs fn once per bus kind, each with a broker of its own.
func forEachBus(t *testing.T, fn func(t *testing.T, br broker)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k.new(t)) })
	}
}

// localBroker is an in-process group, with the in-process state its
// replicas share.
type localBroker struct {
	l  *bus.Local
	st *bus.LocalState
}

func (b localBroker) conn(testing.TB, ...bus.Option) bus.Conn { return b.l.Conn() }
func (localBroker) down()                                     {}
func (localBroker) up()                                       {}
func (localBroker) real() bool                                { return false }

// realBroker is a NATS or Redis server.
type realBroker struct{ testbroker.Broker }

func (b realBroker) url() string { return b.URL() }
func (b realBroker) conn(t testing.TB, opts ...bus.Option) bus.Conn {
	return dial(t, b.URL(), opts)
}
func (b realBroker) down()    { b.Down() }
func (b realBroker) up()      { b.Up() }
func (realBroker) real() bool { return true }

func dial(t testing.TB, url string, opts []bus.Option) bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := brokers.Dial(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
