package oauth_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"tidings/client/oauth"
)

// A FileStore keeps what a flow saves in one private JSON file, where a
// later run of the program finds it.
func ExampleFileStore() {
	dir, err := os.MkdirTemp("", "tidings-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tidings", "oauth.json") // oauth.DefaultStorePath() in a real host

	ctx := context.Background()
	s := oauth.NewFileStore(path)
	if err := s.Save(ctx, "tokens https://mcp.example.com/", []byte(`{"access_token":"at-1","refresh_token":"rt-1"}`)); err != nil {
		log.Fatal(err)
	}

	// Another run, or another process, reads it back.
	v, err := oauth.NewFileStore(path).Load(ctx, "tokens https://mcp.example.com/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", v)
	if _, err := s.Load(ctx, "tokens https://other.example.com/"); errors.Is(err, oauth.ErrNotStored) {
		fmt.Println("nothing for other.example.com yet")
	}

	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", b)
	// Output:
	// {"access_token":"at-1","refresh_token":"rt-1"}
	// nothing for other.example.com yet
	// {
	//   "version": 1,
	//   "entries": {
	//     "tokens https://mcp.example.com/": {
	//       "json": {
	//         "access_token": "at-1",
	//         "refresh_token": "rt-1"
	//       }
	//     }
	//   }
	// }
}
