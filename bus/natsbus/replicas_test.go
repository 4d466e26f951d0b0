package natsbus

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus"
	"tidings/internal/testrig/testbroker"
	"tidings/internal/testrig/testkit"
)

// openBoth opens the state and the tasks at url, or returns the first
// error; what it opened is closed when the test ends.
func openBoth(t *testing.T, url string, opts ...bus.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	st, err := OpenState(ctx, url, opts...)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = st.Close() })
	ts, err := OpenTasks(ctx, url, opts...)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = ts.Close() })
	return nil
}

// replicasOfStream returns the replicas stream is configured with.
func replicasOfStream(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return st.CachedInfo().Config.Replicas
}

// TestNATSClusterReplicas: on a cluster of three, the state and tasks
// buckets are made with three replicas by default, and with what
// replicas=N asks; more than the cluster holds is refused saying how many
// were asked, how large the cluster is and what to change; a bucket
// found with fewer replicas than replicas=N asks is refused, and one with
// fewer than the default is used, with a warning.
func TestNATSClusterReplicas(t *testing.T) {
	t.Parallel()
	c := testbroker.StartNATSCluster(t, 3)
	seeds := c.Seeds()
	js := jetStreamAt(t, strings.TrimSuffix(seeds, "/tidings.test"))
	at := func(subject string) string { return strings.TrimSuffix(seeds, "tidings.test") + subject }

	if err := openBoth(t, seeds, quiet()...); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"KV_tidings_2Etest", "KV_tidings_2Etest_tasks"} {
		if n := replicasOfStream(t, js, stream); n != 3 {
			t.Errorf("%s has %d replicas, want 3 by default on a cluster of 3", stream, n)
		}
	}

	if err := openBoth(t, at("two?replicas=2"), quiet()...); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"KV_two", "KV_two_tasks"} {
		if n := replicasOfStream(t, js, stream); n != 2 {
			t.Errorf("%s has %d replicas, want the 2 asked", stream, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	for name, open := range map[string]func() error{
		"OpenState": func() error {
			s, err := OpenState(ctx, at("five?replicas=5"), quiet()...)
			if err == nil {
				s.Close()
			}
			return err
		},
		"OpenTasks": func() error {
			s, err := OpenTasks(ctx, at("five?replicas=5"), quiet()...)
			if err == nil {
				s.Close()
			}
			return err
		},
	} {
		err := open()
		if err == nil {
			t.Fatalf("%s: replicas=5 on a cluster of 3 was taken", name)
		}
		for _, want := range []string{"cannot place the 5 replicas asked (replicas=5 on the URL) on a cluster of 3 servers", "set replicas=N on the URL"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: replicas=5 on a cluster of 3: %v, want it to say %q", name, err, want)
			}
		}
		t.Logf("%s: %v", name, err)
	}

	// A bucket made with one replica: refused when three are asked,
	// used with a warning when three are the default.
	if err := openBoth(t, at("few?replicas=1"), quiet()...); err != nil {
		t.Fatal(err)
	}
	err := openBoth(t, at("few?replicas=3"), quiet()...)
	if err == nil || !strings.Contains(err.Error(), "has 1 replicas, fewer than replicas=3 on the URL asks") ||
		!strings.Contains(err.Error(), "nats stream edit KV_few --replicas 3") {
		t.Errorf("a bucket of 1 replica opened with replicas=3: %v, want a refusal that says how to scale it", err)
	}
	var log testkit.SyncBuffer
	if err := openBoth(t, at("few"), bus.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))); err != nil {
		t.Fatalf("a bucket of 1 replica opened with the default of 3: %v, want it used", err)
	}
	for _, bucket := range []string{"few", "few_tasks"} {
		if !strings.Contains(log.String(), "bucket="+bucket+" replicas=1") {
			t.Errorf("no warning that bucket %s has 1 replica; the log:\n%s", bucket, log.String())
		}
	}
}

// TestNATSReplicasOutOfCluster: a server in no cluster makes buckets of
// one replica by default, and refuses more, saying it is in no cluster.
func TestNATSReplicasOutOfCluster(t *testing.T) {
	t.Parallel()
	br := testbroker.StartNATS(t)
	err := openBoth(t, br.URL()+"?replicas=3", quiet()...)
	if err == nil || !strings.Contains(err.Error(), "on a server in no cluster") || !strings.Contains(err.Error(), "set replicas=1") {
		t.Errorf("replicas=3 on a server in no cluster: %v, want a refusal that says so", err)
	}
	if err := openBoth(t, br.URL(), quiet()...); err != nil {
		t.Fatal(err)
	}
	js := jetStreamAt(t, br.URL())
	if n := replicasOfStream(t, js, "KV_tidings_2Etest_tasks"); n != 1 {
		t.Errorf("the tasks bucket has %d replicas on a server in no cluster, want 1", n)
	}
}
