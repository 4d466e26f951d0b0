// Command lb runs one of testlb's load balancers in front of upstreams
// until it gets SIGTERM or SIGINT, for scripts that test many replicas
// from outside Go (scripts/conformance-cluster):
//
//	lb -nginx -addr 127.0.0.1:0 -dir /tmp/lb http://127.0.0.1:4001 http://127.0.0.1:4002
//	lb -goproxy -addr 127.0.0.1:0 http://127.0.0.1:4001 http://127.0.0.1:4002
//
// Once the balancer answers, it prints "listening on URL" on standard
// error, the URL without a path (requests keep theirs on the way
// upstream). On a signal it stops the balancer (nginx: a graceful
// shutdown, then SIGKILL) and exits 0; if nginx exits on its own, lb
// prints its error log and exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"tidings/internal/testrig/testlb"
)

func main() {
	useNginx := flag.Bool("nginx", false, "run nginx")
	useGo := flag.Bool("goproxy", false, "run Go's httputil.ReverseProxy")
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (host:port; port 0 picks a free one)")
	dir := flag.String("dir", "", "nginx: directory for its configuration and logs, kept after the run (default: a temporary one, removed)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -nginx|-goproxy [-addr host:port] [-dir dir] http://host:port...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *useNginx == *useGo || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*useNginx, testlb.Options{Addr: *addr, Dir: *dir}, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "lb: %v\n", err)
		os.Exit(1)
	}
}

func run(useNginx bool, opts testlb.Options, upstreams []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := testlb.RunReverseProxy
	if useNginx {
		start = testlb.RunNginx
	}
	lb, err := start(opts, upstreams...)
	if err != nil {
		return err
	}
	defer lb.Stop()
	fmt.Fprintf(os.Stderr, "listening on %s\n", lb.URL())
	select {
	case <-ctx.Done():
		return nil
	case <-lb.Done():
		return errors.New("the balancer exited on its own; its log:\n" + lb.ErrorLog())
	}
}
