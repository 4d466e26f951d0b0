package brokers_test

import (
	"slices"
	"testing"
	"time"

	"tidings/bus"
	"tidings/hub"
	"tidings/internal/engine"
)

// BenchmarkDelivery measures how long a change takes from the call on
// one replica to the wake-up of a listener on another — the server's
// observer, the bus's queue, encoding, the broker, decoding and the
// receiving hub — against the same wake-up on the replica itself. Each
// change waits for the one before it to arrive. It reports the median
// and the 99th percentile, and for the buses between replicas what they
// add to the wake-up of a listener on the replica that made the change,
// measured for the same changes (added-p50-µs, added-p99-µs: the
// difference of the percentiles).
//
//	go test -run '^$' -bench Delivery -count 3 ./bus/brokers
func BenchmarkDelivery(b *testing.B) {
	b.Run("same-replica", func(b *testing.B) {
		c := newCluster(b, localBroker{bus.NewLocal(), bus.NewLocalState()}, 1, clusterOpts{})
		measure(b, c.reps[0], nil)
	})
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			c := newCluster(b, k.new(b), 2, clusterOpts{})
			measure(b, c.reps[0], c.reps[1])
		})
	}
}

// measure times changes made on from until a listener on from, and one
// on to unless it is nil, wakes up.
func measure(b *testing.B, from, to *replica) {
	subscribe := func(r *replica) *hub.Subscription {
		sub, err := engine.Of(r.srv).Hub().Subscribe(hub.Filter{URIs: []string{"bench://x"}})
		if err != nil {
			b.Fatal(err)
		}
		return sub
	}
	wake := func(sub *hub.Subscription, buf []string) []string {
		select {
		case <-sub.Wake():
		case <-timeout():
			b.Fatalf("no wake-up in %v", wait)
		}
		_, buf = sub.Take(buf[:0])
		return buf
	}
	here := subscribe(from)
	defer here.Close()
	var there *hub.Subscription
	if to != nil {
		there = subscribe(to)
		defer there.Close()
	}
	local := make([]time.Duration, 0, b.N)
	remote := make([]time.Duration, 0, b.N)
	var buf []string
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		from.srv.ResourceUpdated("bench://x")
		buf = wake(here, buf)
		local = append(local, time.Since(start))
		if there != nil {
			buf = wake(there, buf)
			remote = append(remote, time.Since(start))
		}
	}
	b.StopTimer()
	pct := func(lat []time.Duration, p int) float64 {
		return float64(lat[(len(lat)-1)*p/100]) / float64(time.Microsecond)
	}
	slices.Sort(local)
	if there == nil {
		b.ReportMetric(pct(local, 50), "p50-µs")
		b.ReportMetric(pct(local, 99), "p99-µs")
		return
	}
	slices.Sort(remote)
	b.ReportMetric(pct(remote, 50), "p50-µs")
	b.ReportMetric(pct(remote, 99), "p99-µs")
	b.ReportMetric(pct(remote, 50)-pct(local, 50), "added-p50-µs")
	b.ReportMetric(pct(remote, 99)-pct(local, 99), "added-p99-µs")
}
