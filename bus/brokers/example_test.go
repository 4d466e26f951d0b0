package brokers_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/mcp"
	"tidings/server"
)

// ExampleOpen joins a replica to the others through a NATS server; every
// replica behind the balancer is started the same way, with the same
// secret, which signs what it says on the bus as well as its sessions.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret := []byte(os.Getenv("DOCS_SECRET"))
	b, err := brokers.Open(ctx, "nats://127.0.0.1:4222/tidings.docs", bus.WithSecret(secret))
	if err != nil {
		log.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "docs", Version: "1.0.0"},
		server.WithBus(b), server.WithSecret(secret))
	defer srv.Shutdown(context.Background()) // closes the bus too
	fmt.Println(b.Stats().Connected)
}
