package bus_test

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
// and the 99th percentile.
//
//	go test -run '^$' -bench Delivery ./bus/
func BenchmarkDelivery(b *testing.B) {
	b.Run("same-replica", func(b *testing.B) {
		c := newCluster(b, localBroker{bus.NewLocal(), bus.NewLocalState()}, 1, clusterOpts{})
		measure(b, c.reps[0], c.reps[0])
	})
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			c := newCluster(b, k.new(b), 2, clusterOpts{})
			measure(b, c.reps[0], c.reps[1])
		})
	}
}

func measure(b *testing.B, from, to *replica) {
	sub, err := engine.Of(to.srv).Hub().Subscribe(hub.Filter{URIs: []string{"bench://x"}})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	lat := make([]time.Duration, 0, b.N)
	var buf []string
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		from.srv.ResourceUpdated("bench://x")
		select {
		case <-sub.Wake():
		case <-timeout():
			b.Fatalf("no wake-up in %v", wait)
		}
		lat = append(lat, time.Since(start))
		_, buf = sub.Take(buf[:0])
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p int) float64 { return float64(lat[(len(lat)-1)*p/100]) / float64(time.Microsecond) }
	b.ReportMetric(pct(50), "p50-µs")
	b.ReportMetric(pct(99), "p99-µs")
}
