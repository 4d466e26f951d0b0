package oauth

import (
	"context"
	"errors"
	"net/url"
)

// Interaction is the user's part of the authorization code grant: showing
// the authorization server's page and bringing back where it redirected.
// A command-line host prints the URL and receives the redirect on a
// loopback port ([Loopback]); a host without a browser on the same
// machine asks the user to paste the address they were sent to
// ([Prompt]). Keeping it behind an interface lets a GUI host open its
// own window instead.
type Interaction interface {
	// RedirectURI is the redirect URI the flow registers with the
	// authorization server and sends with every authorization request.
	// It must not change over the Interaction's life: a registered
	// client is bound to it.
	RedirectURI() string
	// Authorize sends the user to authURL and waits for the
	// authorization server's redirect to RedirectURI. It returns the
	// redirect's query parameters (code, state, iss, or error and
	// error_description) as they came; checking them is the flow's job.
	// It gives up when ctx ends.
	Authorize(ctx context.Context, authURL string) (url.Values, error)
}

// Store keeps what a flow learns — the clients it registered with each
// authorization server, the tokens it holds for each resource — so a
// later run need not send the user through the browser again. Values are
// opaque JSON documents owned by the flow; keys are short printable
// strings. Implementations must be safe for concurrent use.
type Store interface {
	// Load returns the value saved under key, or an error wrapping
	// ErrNotStored when there is none.
	Load(ctx context.Context, key string) ([]byte, error)
	// Save stores value under key, replacing what was there.
	Save(ctx context.Context, key string, value []byte) error
	// Delete forgets key. Deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error
}

// ErrNotStored is what a Store's Load wraps when nothing is saved under
// the key.
var ErrNotStored = errors.New("oauth: nothing stored under this key")
