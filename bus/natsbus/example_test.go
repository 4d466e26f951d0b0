package natsbus_test

import (
	"context"
	"log"
	"os"
	"time"

	"tidings/bus"
	"tidings/bus/natsbus"
	"tidings/mcp"
	"tidings/server"
)

// ExampleDial joins a replica to the others through one broker it names
// itself, so that the program links that broker's client alone: the
// connection becomes a bus with bus.New, and the same URL opens the
// state the replicas share. The options, the secret that signs the bus
// among them, go to both.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const url = "nats://127.0.0.1:4222/tidings.docs"
	secret := []byte(os.Getenv("DOCS_SECRET"))
	opts := []bus.Option{bus.WithSecret(secret)}
	conn, err := natsbus.Dial(ctx, url, opts...)
	if err != nil {
		log.Fatal(err)
	}
	state, err := natsbus.OpenState(ctx, url, opts...)
	if err != nil {
		log.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "docs", Version: "1.0.0"},
		server.WithBus(bus.New(conn, opts...)), server.WithSharedState(state), server.WithSecret(secret))
	defer srv.Shutdown(context.Background()) // closes the bus and the state
}
