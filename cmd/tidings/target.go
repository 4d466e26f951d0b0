package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/mcp"
)

// target is the server a client command talks to: a Streamable HTTP URL,
// or a stdio server to spawn.
type target struct {
	url     string
	command []string
}

// String names the target for people.
func (t target) String() string {
	if t.url != "" {
		return t.url
	}
	return strings.Join(t.command, " ")
}

// splitTarget separates the target from the rest of the arguments. Without
// "--" the first argument is the URL; with "--" everything after it is the
// command to spawn and everything before it is the rest. So the two forms
// can never be confused, whatever the rest looks like.
func splitTarget(cmd *cobra.Command, args []string) (target, []string, error) {
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		if dash == len(args) {
			return target{}, nil, errors.New("no server command after --")
		}
		if dash > 0 && isHTTPURL(args[0]) {
			return target{}, nil, fmt.Errorf("both a URL (%s) and a command after -- given; pass one", args[0])
		}
		return target{command: args[dash:]}, args[:dash], nil
	}
	if len(args) == 0 {
		return target{}, nil, errors.New("no server given: pass a URL, or a command after --")
	}
	if !isHTTPURL(args[0]) {
		return target{}, nil, fmt.Errorf("%q is not an http(s) URL; to spawn a stdio server, put its command after --", args[0])
	}
	return target{url: args[0]}, args[1:], nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// clientFlags are the connection flags the client commands share.
type clientFlags struct {
	headers []string
	timeout time.Duration
}

func (f *clientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.headers, "header", "H", nil, `send this HTTP header on every request, as "Name: value" (repeatable)`)
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long one request may take")
}

// dial connects to the target. A spawned server's stderr goes to stderr,
// and it is stopped by the client's Close.
func dial(ctx context.Context, t target, f clientFlags, stderr io.Writer) (*client.Client, error) {
	opts := []client.Option{
		client.WithClientInfo(mcp.Implementation{Name: "tidings", Version: version()}),
		client.WithTimeout(f.timeout),
		client.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--header %q: want \"Name: value\"", h)
		}
		opts = append(opts, client.WithHeader(name, strings.TrimSpace(value)))
	}
	if t.url != "" {
		return client.NewHTTP(t.url, opts...), nil
	}
	opts = append(opts, client.WithStderr(stderr))
	c, err := client.NewCommand(ctx, t.command[0], t.command[1:], opts...)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", t.command[0], err)
	}
	return c, nil
}

// exitError ends the process with a given status once its message (if
// any) has been written; main reports nothing more.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
