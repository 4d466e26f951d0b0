package bus_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"tidings/bus"
	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// Example joins two replicas of one server with an in-process bus: a
// client watching a resource through replica B hears of a change made
// through replica A, and reads the new content. The replicas share the
// content itself (here a variable; in a deployment, their store); the bus
// only carries the news that it changed.
func Example() {
	var motd atomic.Pointer[string]
	hello := "hello"
	motd.Store(&hello)
	group := bus.NewLocal()
	replica := func() (*server.Server, *httptest.Server) {
		srv := server.New(mcp.Implementation{Name: "notes", Version: "1.0.0"}, server.WithBus(bus.New(group.Conn())))
		_ = srv.AddResource(mcp.Resource{URI: "note://motd"}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", *motd.Load())}}, nil
		})
		return srv, httptest.NewServer(streamhttp.New(srv))
	}
	a, tsA := replica()
	b, tsB := replica()
	defer func() {
		for _, r := range []struct {
			srv *server.Server
			ts  *httptest.Server
		}{{a, tsA}, {b, tsB}} {
			_ = r.srv.Shutdown(context.Background()) // ends the listens and closes the bus
			r.ts.Close()
		}
	}()

	c := client.NewHTTP(tsB.URL)
	defer c.Close()
	events := make(chan client.Event, 8)
	w := c.Watch(context.Background(), client.WatchOptions{URIs: []string{"note://motd"}, OnEvent: func(e client.Event) {
		if e.Kind == client.ResourceUpdated {
			events <- e
		}
	}})
	defer w.Close()
	next := func() client.Event {
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			return client.Event{}
		}
	}
	fmt.Println("first read:", next().Added)

	bye := "goodbye"
	motd.Store(&bye)
	a.ResourceUpdated("note://motd") // through replica A
	fmt.Println("changed:", next().Changed)
	res, err := c.ReadResource(context.Background(), "note://motd")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*res.Contents[0].Text)
	// Output:
	// first read: [note://motd]
	// changed: [note://motd]
	// goodbye
}
