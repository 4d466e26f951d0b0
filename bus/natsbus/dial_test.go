package natsbus

import (
	"context"
	"strings"
	"testing"
	"time"

	"tidings/bus"
)

// TestRefusesOtherSchemes: each constructor refuses a URL that names
// another broker, or none, saying which schemes it takes, before
// anything is dialled, and without showing the password.
func TestRefusesOtherSchemes(t *testing.T) {
	open := map[string]func(context.Context, string, ...bus.Option) (any, error){
		"Dial":      func(ctx context.Context, u string, o ...bus.Option) (any, error) { return Dial(ctx, u, o...) },
		"OpenState": func(ctx context.Context, u string, o ...bus.Option) (any, error) { return OpenState(ctx, u, o...) },
		"OpenTasks": func(ctx context.Context, u string, o ...bus.Option) (any, error) { return OpenTasks(ctx, u, o...) },
	}
	for name, fn := range open {
		for url, want := range map[string]string{
			"redis://user:secret@127.0.0.1:1/0": "not nats or tls",
			"127.0.0.1:4222":                    "first path segment",
			"nats://user:secret@127.0.0.1:1/a*": "subject",
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := fn(ctx, url, quiet()...)
			cancel()
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%q): %v, want an error that mentions %q and not the password", name, url, err, want)
			}
		}
	}
}
