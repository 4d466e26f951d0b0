package redisbus

import (
	"context"
	"log/slog"
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
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	for name, fn := range open {
		for url, want := range map[string]string{
			"nats://user:secret@127.0.0.1:1/a":    "not redis or rediss",
			"127.0.0.1:6379":                      "first path segment",
			"redis://user:secret@127.0.0.1:1/x/y": "invalid URL path",
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := fn(ctx, url, quiet)
			cancel()
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%q): %v, want an error that mentions %q and not the password", name, url, err, want)
			}
		}
	}
}
