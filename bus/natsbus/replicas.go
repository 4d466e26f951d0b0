package natsbus

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// defaultReplicas bounds the replica count of a bucket made without
// replicas=N: three replicas outlive the loss of any one server, and more
// only slow every write.
const defaultReplicas = 3

// The JetStream errors that refuse a stream the replicas it was asked
// for, which the client has no names for.
const (
	jsErrNoPeers               = 10005 // "no suitable peers for placement"
	jsErrInsufficientResources = 10023 // "insufficient resources"
	jsErrReplicasNotSupported  = 10074 // "replicas > 1 not supported in non-clustered mode"
)

// replicaPlan is how many replicas a bucket made now gets, and why.
type replicaPlan struct {
	n         int  // the replicas of a bucket made now
	servers   int  // the servers of the cluster, as the client knows them; 1 out of a cluster
	clustered bool // the connected server is in a cluster
	asked     bool // n is the URL's replicas=N, not the default
}

// plan decides the replicas of a bucket made through nc: the URL's
// replicas=N, or else as many as the cluster has servers, up to
// defaultReplicas, and one on a server in no cluster. The servers are
// those the client knows of: the seeds and those the connected server
// advertises (all of its cluster's, unless it is told not to), each
// address counted once. A seed that is another name of a server the
// cluster advertises is counted twice; if that makes the default more
// than the cluster holds, JetStream refuses the bucket and the error
// says to set replicas=N.
func (e endpoint) plan(nc *nats.Conn) replicaPlan {
	p := replicaPlan{servers: 1, clustered: nc.ConnectedClusterName() != ""}
	if p.clustered {
		seen := make(map[string]bool)
		for _, s := range nc.Servers() {
			seen[s] = true
		}
		p.servers = max(len(seen), 1)
	}
	p.n = min(p.servers, defaultReplicas)
	if e.replicas > 0 {
		p.n, p.asked = e.replicas, true
	}
	return p
}

// why says how many replicas a bucket made now gets, and why, for
// errors and logs.
func (p replicaPlan) why() string {
	if p.asked {
		return fmt.Sprintf("the %d replicas asked (replicas=%d on the URL)", p.n, p.n)
	}
	return fmt.Sprintf("%d replicas, the default for %s (as many as the servers, at most %d)", p.n, p.cluster(), defaultReplicas)
}

// cluster describes the cluster as the client sees it.
func (p replicaPlan) cluster() string {
	if !p.clustered {
		return "a server in no cluster"
	}
	return fmt.Sprintf("a cluster of %d servers", p.servers)
}

// refused is err, the refusal to create bucket, said plainly when
// JetStream refused it the replicas it was asked for.
func (p replicaPlan) refused(bucket string, err error) error {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return fmt.Errorf("key-value bucket %q: %w", bucket, err)
	}
	switch ae.ErrorCode {
	case jsErrNoPeers, jsErrInsufficientResources, jsErrReplicasNotSupported:
	default:
		return fmt.Errorf("key-value bucket %q: %w", bucket, err)
	}
	if !p.clustered {
		return fmt.Errorf("key-value bucket %q: NATS cannot place %s on a server in no cluster: "+
			"set replicas=1 on the URL, or add the server to a cluster: %w", bucket, p.why(), err)
	}
	return fmt.Errorf("key-value bucket %q: NATS cannot place %s on %s, some of which may be down or out of storage: "+
		"set replicas=N on the URL, at most the servers up, or add servers: %w", bucket, p.why(), p.cluster(), err)
}

// check is what is done with a bucket found with have replicas: one with
// fewer than replicas=N asks is refused, for the operator asked for
// more; one with fewer than the default is used as it is, and logged,
// for it served before (a cluster grown since, or a bucket made by
// hand); the bucket is never scaled here, since that moves its data
// between servers.
func (p replicaPlan) check(bucket string, have int, log *slog.Logger) error {
	if have >= p.n {
		return nil
	}
	scale := fmt.Sprintf("nats stream edit KV_%s --replicas %d", bucket, p.n)
	if p.asked {
		return fmt.Errorf("key-value bucket %q has %d replicas, fewer than replicas=%d on the URL asks: "+
			"scale it (%s), or ask for %d", bucket, have, p.n, scale, have)
	}
	log.Warn("natsbus: a key-value bucket has fewer replicas than one made now would; it is used as it is",
		"bucket", bucket, "replicas", have, "default", p.why(),
		"fix", fmt.Sprintf("scale it (%s), or set replicas=%d on the URL to say it is meant", scale, have))
	return nil
}

// replicasOf returns the replicas of the bucket whose status st is.
func replicasOf(st jetstream.KeyValueStatus) (int, bool) {
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, false
	}
	return max(bs.StreamInfo().Config.Replicas, 1), true
}
