// Package brokerkit holds what the bus and its broker adapters (natsbus,
// redisbus) share without showing it to users of package bus: the
// settings the options fill in, the URL parser whose errors never show a
// password, the limits and checks every task store applies, and the
// errors a store and a connection report. Package bus re-exports the
// errors, so that errors.Is sees one value whichever package returned it.
package brokerkit

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Config is what the options of package bus (bus.Option) set, read by
// bus.New and by each broker's connection, state and task store.
type Config struct {
	// Heartbeat is how often a bus tells its peers its latest number
	// (bus.WithHeartbeat); a Redis connection also takes three of them
	// of silence for a stuck subscription.
	Heartbeat time.Duration
	// Queue bounds the events waiting to be sent (bus.WithQueue).
	Queue int
	// Logger is where losses, reconnects and drops are logged.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the delay between reconnects
	// (bus.WithBackoff; see Backoff).
	MinBackoff, MaxBackoff time.Duration
	// SendTimeout bounds one Send of a bus.
	SendTimeout time.Duration
	// Key signs and checks messages (see bus.WithSecret); nil for none.
	Key []byte
}

// Apply returns the defaults with opts applied, in order. It takes any
// slice of option functions, so that []bus.Option, whose elements are
// func(*Config) underneath, is passed as it is.
func Apply[O ~func(*Config)](opts []O) Config {
	c := Config{
		Heartbeat:   5 * time.Second,
		Queue:       1024,
		MinBackoff:  100 * time.Millisecond,
		MaxBackoff:  10 * time.Second,
		SendTimeout: 2 * time.Second,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Backoff returns the delay before reconnect attempt n (from 1): it
// doubles from MinBackoff up to MaxBackoff, drawn at random from its
// upper half so that replicas that lost the broker together do not
// return in step.
func (c *Config) Backoff(n int) time.Duration {
	d := c.MinBackoff
	for i := 1; i < n && d < c.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// ErrClosed is what a closed connection returns from Send and Run.
var ErrClosed = errors.New("bus: connection closed")

// StateValue is how a shared state's value is stored: one byte, readable
// in the broker's own tools.
func StateValue(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// ParseStateValue reads a stored value; ok is false for anything else,
// which a state's Load leaves out rather than guess at.
func ParseStateValue(v string) (on, ok bool) {
	switch v {
	case "1":
		return true, true
	case "0":
		return false, true
	}
	return false, false
}
