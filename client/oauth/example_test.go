package oauth_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"

	"tidings/client"
	"tidings/client/oauth"
)

// paste is an Interaction for a host without a browser: it prints the
// authorization URL and reads back the address the browser was sent to.
type paste struct{}

func (paste) RedirectURI() string { return "http://localhost:8976/callback" }

func (paste) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	fmt.Println("Open this address, sign in, then paste the address you land on:")
	fmt.Println(authURL)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimSpace(line))
	if err != nil {
		return nil, err
	}
	return u.Query(), nil
}

// A Flow handles everything from the first 401 on: it finds the MCP
// server's authorization server, identifies the client to it (here by a
// client ID metadata document where accepted, else by registering), sends
// the user through the Interaction, and keeps the token. A host gives it
// to package client as the client's Authorizer, and closes it when done.
func Example() {
	flow, err := oauth.New(oauth.Config{
		Interaction:       paste{},
		ClientName:        "Example MCP host",
		ClientMetadataURL: "https://host.example/oauth/client-metadata.json",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer flow.Close()
	c := client.NewHTTP("https://mcp.example.com/mcp", client.WithAuthorizer(flow))
	defer c.Close()
	tools, err := c.Tools(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name)
	}
}

// The Authorizer contract by hand, for a host with an HTTP stack of its
// own: Authorize, send, and on a 401 or 403 ask Challenge whether to
// send again.
func Example_byHand() {
	flow, err := oauth.New(oauth.Config{Interaction: paste{}})
	if err != nil {
		log.Fatal(err)
	}
	defer flow.Close()
	ctx := context.Background()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for attempt := 0; attempt < 4; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://mcp.example.com/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if err := flow.Authorize(ctx, req); err != nil {
			log.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			fmt.Println(resp.Status)
			return
		}
		retry, err := flow.Challenge(ctx, req, resp)
		if err != nil {
			log.Fatal(err)
		}
		if !retry {
			fmt.Println("refused:", resp.Status)
			return
		}
	}
}
