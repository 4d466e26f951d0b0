package oauth_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"tidings/client/oauth"
)

// A command-line host receives the authorization server's redirect on a
// loopback port. Here OpenBrowser plays the user's browser: it follows
// the authorization URL to the server, which redirects it back with a
// code. A real host would run xdg-open or open, or leave OpenBrowser
// nil and let the user click the printed URL.
func ExampleLoopback() {
	l, err := oauth.NewLoopback("127.0.0.1:0", os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	l.OpenBrowser = func(authURL string) error {
		// The authorization server, once the user approves, sends the
		// browser to the redirect URI with a code and the state.
		resp, err := http.Get(l.RedirectURI() + "?code=c0de&state=xyz")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	q, err := l.Authorize(context.Background(), "https://auth.example.com/authorize?client_id=tidings&state=xyz")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("code:", q.Get("code"), "state:", q.Get("state"))
	// Output:
	// Open this address in a browser to authorize: https://auth.example.com/authorize?client_id=tidings&state=xyz
	// code: c0de state: xyz
}
