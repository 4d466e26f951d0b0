package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// ---- a sign-in that outlasts the request timeout ----

// These tests run in a synctest bubble: the server is a real tidings
// server served in memory, and time passes only when every goroutine
// waits, so "the user takes three request timeouts to sign in" costs
// nothing and needs no sleep.

// signInTimeout is the request timeout of the clients below.
const signInTimeout = time.Minute

// memHTTP serves requests with h in the caller's goroutine, and fails
// a request whose context ended meanwhile, as a network transport does.
type memHTTP struct{ h http.Handler }

func (m memHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// signInServer is a tidings server that lets through only requests
// with the token "signed-in". Its tool "echo" answers at once; "stall"
// answers only when its request is cancelled.
func signInServer(t *testing.T) http.Handler {
	srv := server.New(mcp.Implementation{Name: "sign-in", Version: "1"}, server.WithLogger(quietLogger()))
	addTools(t, srv, "echo")
	must(t, srv.AddTool(mcp.Tool{Name: "stall"}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	h := streamhttp.New(srv)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer signed-in" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// browserAuthorizer has no token until the user signs in: its Challenge
// reports on challenged and waits for signIn (or its context), as a
// flow waits for the browser's redirect.
type browserAuthorizer struct {
	challenged chan struct{} // receives once per challenge
	signIn     chan struct{} // closed when the user has signed in

	bearer
	asked int
}

func newBrowserAuthorizer() *browserAuthorizer {
	return &browserAuthorizer{challenged: make(chan struct{}, 8), signIn: make(chan struct{})}
}

func (a *browserAuthorizer) Challenge(ctx context.Context, _ *http.Request, _ *http.Response) (bool, error) {
	a.mu.Lock()
	a.asked++
	a.mu.Unlock()
	a.challenged <- struct{}{}
	select {
	case <-a.signIn:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.token = "signed-in"
	return true, nil
}

func (a *browserAuthorizer) challenges() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked
}

// signInClient is a client of h over memHTTP with the request timeout
// signInTimeout.
func signInClient(t *testing.T, h http.Handler, a Authorizer) *Client {
	c := NewHTTP("http://127.0.0.1/mcp", WithLogger(quietLogger()), WithTimeout(signInTimeout),
		WithHTTPClient(&http.Client{Transport: memHTTP{h}}), WithAuthorizer(a))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// result is one call's outcome.
type result[T any] struct {
	v   T
	err error
}

// userSignsIn lets the user take three request timeouts at the browser
// once the client is challenged, checks that the request still waits,
// and signs in.
func userSignsIn[T any](t *testing.T, a *browserAuthorizer, done <-chan result[T]) {
	t.Helper()
	<-a.challenged
	time.Sleep(3 * signInTimeout) // the user at the browser, in the bubble's time
	synctest.Wait()
	select {
	case r := <-done:
		t.Fatalf("the request ended while the user was signing in: %v, %v", r.v, r.err)
	default:
	}
	close(a.signIn)
}

// TestSignInOutlastsRequestTimeout: a call whose first request is
// challenged, and whose Authorizer waits three request timeouts for the
// user to sign in, still succeeds: the timeout counts the exchanges with
// the server, not the wait in Challenge.
func TestSignInOutlastsRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBrowserAuthorizer()
		c := signInClient(t, signInServer(t), a)
		done := make(chan result[*mcp.CallToolResult], 1)
		go func() {
			r, err := c.CallTool(t.Context(), "echo", nil)
			done <- result[*mcp.CallToolResult]{r, err}
		}()
		userSignsIn(t, a, done)
		r := <-done
		if r.err != nil {
			t.Fatalf("CallTool after a long sign-in: %v", r.err)
		}
		if len(r.v.Content) != 1 || r.v.Content[0].Text == nil || *r.v.Content[0].Text != "echo" {
			t.Errorf("CallTool = %+v, want echo's text", r.v)
		}
		if n := a.challenges(); n != 1 {
			t.Errorf("%d challenges, want 1", n)
		}
	})
}

// TestSignInOutlastsRequestTimeoutForCachedList: the same for a cached
// list, whose fetch is shared by its callers and was bounded by the
// request timeout as a whole.
func TestSignInOutlastsRequestTimeoutForCachedList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBrowserAuthorizer()
		c := signInClient(t, signInServer(t), a)
		done := make(chan result[[]mcp.Tool], 1)
		go func() {
			tools, err := c.Tools(t.Context())
			done <- result[[]mcp.Tool]{tools, err}
		}()
		userSignsIn(t, a, done)
		r := <-done
		if r.err != nil {
			t.Fatalf("Tools after a long sign-in: %v", r.err)
		}
		if got := names(r.v); !slices.Equal(got, []string{"echo", "stall"}) {
			t.Errorf("Tools = %v, want echo and stall", got)
		}
	})
}

// TestRequestTimeoutStillBoundsExchanges: once signed in, a server that
// does not answer is still given up on after the request timeout, and
// the caller's context still ends a request waiting in Challenge.
func TestRequestTimeoutStillBoundsExchanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBrowserAuthorizer()
		c := signInClient(t, signInServer(t), a)
		close(a.signIn)
		if _, err := c.CallTool(t.Context(), "echo", nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := c.CallTool(t.Context(), "stall", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call the server never answers: %v, want the request timeout", err)
		}
		if took := time.Since(start); took != signInTimeout {
			t.Errorf("the call gave up after %s, want the request timeout, %s", took, signInTimeout)
		}

		b := newBrowserAuthorizer()
		c2 := signInClient(t, signInServer(t), b)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := c2.CallTool(ctx, "echo", nil)
			done <- err
		}()
		<-b.challenged
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("a call cancelled while waiting for the sign-in: %v, want context.Canceled", err)
		}
	})
}

// TestSharedFetchEndsWithItsLastCaller: a shared fetch goes on while
// any of its callers waits for it, and ends once the last has given up,
// so that with no deadline of its own it cannot outlive them all.
func TestSharedFetchEndsWithItsLastCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(0, time.Now, false)
		fetchEnded := make(chan error, 1)
		release := make(chan struct{})
		fetch := func(ctx context.Context) (fetched, error) {
			select {
			case <-release:
				return fetched{value: "answer", ttl: time.Hour, scope: mcp.ScopePublic, as: anonymousAuth}, nil
			case <-ctx.Done():
				fetchEnded <- ctx.Err()
				return fetched{}, ctx.Err()
			}
		}
		get := func(ctx context.Context, out chan<- result[any]) {
			v, err := c.get(ctx, "k", topicTools, anonymousAuth, fetch)
			out <- result[any]{v, err}
		}

		// Two callers share a fetch; the first gives up, the second gets
		// the answer.
		ctx1, cancel1 := context.WithCancel(t.Context())
		first, second := make(chan result[any], 1), make(chan result[any], 1)
		go get(ctx1, first)
		synctest.Wait() // the fetch is under way
		go get(t.Context(), second)
		synctest.Wait() // the second caller has joined it
		cancel1()
		if r := <-first; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("the caller that gave up got %v, %v", r.v, r.err)
		}
		synctest.Wait()
		select {
		case err := <-fetchEnded:
			t.Fatalf("the fetch ended (%v) while a caller still waited for it", err)
		default:
		}
		close(release)
		if r := <-second; r.err != nil || r.v != "answer" {
			t.Fatalf("the caller that waited got %v, %v", r.v, r.err)
		}

		// A lone caller gives up: its fetch ends with it.
		c.invalidate(topicTools)
		release = make(chan struct{})
		ctx3, cancel3 := context.WithCancel(t.Context())
		third := make(chan result[any], 1)
		go get(ctx3, third)
		synctest.Wait()
		cancel3()
		<-third
		if err := <-fetchEnded; !errors.Is(err, context.Canceled) {
			t.Errorf("the fetch ended with %v, want cancelled", err)
		}
	})
}
