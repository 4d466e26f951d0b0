package brokers_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
)

// TestDialRefuses: a URL that names no bus this package has, or a bad
// subject or parameter, or a list of NATS seeds that could be read more
// than one way, is refused before anything is dialled.
func TestDialRefuses(t *testing.T) {
	for url, want := range map[string]string{
		"kafka://127.0.0.1:9092":                               "unknown scheme",
		"inproc://name":                                        "unknown scheme",
		"nats://127.0.0.1:1/a.*":                               "subject",
		"nats://127.0.0.1:1/a..b":                              "subject",
		"nats://127.0.0.1:1/a?queue=x":                         "no parameters",
		"redis://127.0.0.1:1/0?chanel=x":                       "chanel",
		"://nope":                                              "missing protocol scheme",
		"nats://user:secret@127.0.0.1:1/a b>":                  "subject",
		"nats://127.0.0.1:1/a,nats://127.0.0.1:2/a":            "seed 1 of 2: a subject or parameters before the last seed",
		"nats://user:secret@127.0.0.1:1,tls://127.0.0.1:2/a":   "seed 2 of 2: the seeds mix nats:// and tls://",
		"nats://user:secret@127.0.0.1:1,127.0.0.1:2/a":         "seed 2 of 2: it is not a nats:// or tls:// URL",
		"nats://127.0.0.1:1,nats://127.0.0.1:2/a?replicas=9":   "not a replica count from 1 to 5",
		"nats://user:sec,ret@127.0.0.1:1,nats://127.0.0.1:2/a": "the URL does not parse",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := brokers.Dial(ctx, url)
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s: dialled", url)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to mention %q", url, err, want)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "ret@") {
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
		b, err := brokers.Open(ctx, nb.url())
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
		c, err := brokers.Dial(context.Background(), nb.url())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		br.down()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if b, err := brokers.Open(ctx, nb.url()); err == nil {
			b.Close()
			t.Error("opened a bus on a broker that is down")
		}
	})
}

// TestOpenState: OpenState reaches the state in the broker a bus URL
// names; what one connection sets, another loads, keys of any spelling
// included; a URL of no store, a subject no bucket can be named after,
// and a broker that is down are errors.
func TestOpenState(t *testing.T) {
	for url, want := range map[string]string{
		"kafka://127.0.0.1:9092":           "unknown scheme",
		"nats://127.0.0.1:1/a-ü":           "bucket",
		"nats://user:secret@127.0.0.1:1/a": "127.0.0.1:1",
		"redis://127.0.0.1:1/0?chanel=x":   "chanel",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := brokers.OpenState(ctx, url)
		cancel()
		if err == nil {
			st.Close()
			t.Errorf("%s: opened", url)
			continue
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v, want it to mention %q and no password", url, err, want)
		}
	}
	forEachBus(t, func(t *testing.T, br broker) {
		if !br.real() {
			t.Skip("the local state has no URL")
		}
		keys := map[string]bool{"tool:a": false, "resource:file:///a b/ü?x=1#y": false, "prompt:": true}
		a, b := state(t, br), state(t, br)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		for k, on := range keys {
			if err := a.Set(ctx, k, !on); err != nil {
				t.Fatal(err)
			}
			if err := a.Set(ctx, k, on); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, keys) {
			t.Errorf("loaded %v, want %v", got, keys)
		}
		br.down()
		if err := a.Set(ctx, "tool:a", true); err == nil {
			t.Error("Set with the broker down succeeded")
		}
		if _, err := b.Load(ctx); err == nil {
			t.Error("Load with the broker down succeeded")
		}
		for _, st := range []bus.State{a, b} {
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		}
		short, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		if st, err := brokers.OpenState(short, br.(realBroker).URL()); err == nil {
			st.Close()
			t.Error("opened the state of a broker that is down")
		}
	})
}

// TestOpenTasksRefuses: a URL of no store, a subject no bucket can be
// named after, a bad parameter and a broker that is not there are errors,
// which say which and show no password.
func TestOpenTasksRefuses(t *testing.T) {
	for url, want := range map[string]string{
		"kafka://127.0.0.1:9092":           "unknown scheme",
		"nats://127.0.0.1:1/a-ü":           "bucket",
		"nats://127.0.0.1:1/a.*":           "subject",
		"nats://user:secret@127.0.0.1:1/a": "127.0.0.1:1",
		"redis://user:secret@127.0.0.1:1":  "127.0.0.1:1",
		"redis://127.0.0.1:1/0?chanel=x":   "chanel",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := brokers.OpenTasks(ctx, url)
		cancel()
		if err == nil {
			st.Close()
			t.Errorf("%s: opened", url)
			continue
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v, want it to mention %q and no password", url, err, want)
		}
	}
}

// badURLs are broker URLs with the password hunter2 that do not parse,
// name a bad database, or point at nothing listening.
var badURLs = []string{
	"redis://user:hunter2@[::1",
	"redis://user:hunter2%zz@127.0.0.1:1",
	"redis://user:hunter2/x@127.0.0.1:1",
	"nats://user:hunter2/x@127.0.0.1:1",
	"redis://user:hunter2@127.0.0.1:1/notadb",
	"redis://user:hunter2@127.0.0.1:1",
	"rediss://user:hunter2@127.0.0.1:1",
	"nats://user:hunter2@127.0.0.1:1/a",
	"tls://user:hunter2@127.0.0.1:1/a",
	"redis+sentinel://user:hunter2@127.0.0.1:1,127.0.0.1:2/m",
	"redis+sentinel://user:hunter2/x@127.0.0.1:1/m",
	"redis+sentinel://127.0.0.1:1/m?sentinel_password=hunter2",
	"rediss+sentinel://user:hunter2@127.0.0.1:1/m/notadb",
}

// TestErrorsHideThePassword: no error of Dial, Open, OpenState or OpenTasks shows a
// password given in the URL, whether the URL does not parse or the broker
// is not there.
func TestErrorsHideThePassword(t *testing.T) {
	for _, u := range badURLs {
		for name, open := range map[string]func(context.Context) error{
			"Dial": func(ctx context.Context) error {
				c, err := brokers.Dial(ctx, u)
				if err == nil {
					c.Close()
				}
				return err
			},
			"Open": func(ctx context.Context) error {
				b, err := brokers.Open(ctx, u)
				if err == nil {
					b.Close()
				}
				return err
			},
			"OpenState": func(ctx context.Context) error {
				s, err := brokers.OpenState(ctx, u)
				if err == nil {
					s.Close()
				}
				return err
			},
			"OpenTasks": func(ctx context.Context) error {
				s, err := brokers.OpenTasks(ctx, u)
				if err == nil {
					s.Close()
				}
				return err
			},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := open(ctx)
			cancel()
			switch {
			case err == nil:
				t.Errorf("%s(%s) succeeded", name, u)
			case strings.Contains(err.Error(), "hunter2"):
				t.Errorf("%s(%s) shows the password: %v", name, u, err)
			}
		}
	}
}
