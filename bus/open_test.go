package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"tidings/bus"
)

// TestDialRefuses: a URL that names no bus this package has, or a bad
// subject or parameter, is refused before anything is dialled.
func TestDialRefuses(t *testing.T) {
	for url, want := range map[string]string{
		"kafka://127.0.0.1:9092":              "unknown scheme",
		"inproc://name":                       "unknown scheme",
		"nats://127.0.0.1:1/a.*":              "subject",
		"nats://127.0.0.1:1/a..b":             "subject",
		"nats://127.0.0.1:1/a?queue=x":        "no parameters",
		"redis://127.0.0.1:1/0?chanel=x":      "chanel",
		"://nope":                             "missing protocol scheme",
		"nats://user:secret@127.0.0.1:1/a b>": "subject",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := bus.Dial(ctx, url)
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s: dialled", url)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to mention %q", url, err, want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", url, err)
		}
	}
}

// TestOpen: Open dials a URL and starts a bus over it; a broker that is
// not there is an error once ctx ends.
func TestOpen(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		nb, ok := br.(interface{ url() string })
		if !ok {
			t.Skip("the local bus has no URL")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := bus.Open(ctx, nb.url())
		if err != nil {
			t.Fatal(err)
		}
		if st := b.Stats(); !st.Connected || len(st.Origin) != 32 {
			t.Errorf("stats %+v", st)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		// Without a deadline, Dial bounds itself.
		c, err := bus.Dial(context.Background(), nb.url())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		br.down()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if b, err := bus.Open(ctx, nb.url()); err == nil {
			b.Close()
			t.Error("opened a bus on a broker that is down")
		}
	})
}
