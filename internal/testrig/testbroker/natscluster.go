package testbroker

import (
	"fmt"
	"net"
	"strings"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Seeds returns nats://127.0.0.1:PORT,nats://127.0.0.1:PORT,…/tidings.test,
// naming every server of the cluster, as a deployment names its seeds.
// Call it before Kill: a server killed has no address.
func (c *NATSCluster) Seeds() string {
	seeds := make([]string, len(c.srvs))
	for i, s := range c.srvs {
		seeds[i] = fmt.Sprintf("nats://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
	}
	return strings.Join(seeds, ",") + "/tidings.test"
}

// Index returns the index of the server named name (see Name), or -1.
func (c *NATSCluster) Index(name string) int {
	for i, s := range c.srvs {
		if s.Name() == name {
			return i
		}
	}
	return -1
}

// Kill shuts the i'th server down, for good: its clients' connections
// and its routes to the others close, and it does not come back. A
// server shut down hands the streams it leads to another on its way out;
// Crash does not. It returns once the server has stopped.
func (c *NATSCluster) Kill(i int) {
	c.srvs[i].Shutdown()
	c.srvs[i].WaitForShutdown()
}

// Crash stops the i'th server as the loss of its machine would, with no
// word to the others: its routes are cut first, so that it hands over
// nothing on its way out, and the others elect new leaders of its
// streams once they miss it; then it is shut down, which closes its
// clients' connections. It does not come back.
func (c *NATSCluster) Crash(i int) {
	c.Partition(i)
	c.Kill(i)
}

// StreamLeader returns the index of the server that leads stream (in
// the global account, where clients without accounts keep theirs), or
// -1 while none does.
func (c *NATSCluster) StreamLeader(stream string) int {
	for i, s := range c.srvs {
		if s.Running() && s.JetStreamIsStreamLeader(natsserver.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}
