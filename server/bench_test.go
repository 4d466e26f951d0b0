package server_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// fanRound is one change being fanned out: the writer that brings count
// to the number of listens closes done.
type fanRound struct {
	count atomic.Int64
	done  chan struct{}
}

// fanOut counts what every listen stream of the benchmark receives.
type fanOut struct {
	listens int64
	acks    fanRound
	cur     atomic.Pointer[fanRound]
	// refused holds a listen's refusal, if one was refused: its answer
	// counts as its ack, so that the benchmark ends and says so.
	refused atomic.Pointer[[]byte]
}

func (f *fanOut) next() *fanRound {
	r := &fanRound{done: make(chan struct{})}
	f.cur.Store(r)
	return r
}

func (r *fanRound) hit(total int64) {
	if r.count.Add(1) == total {
		close(r.done)
	}
}

// fanStream is the engine.Stream of one in-process listen.
type fanStream struct{ f *fanOut }

var listChanged = []byte(mcp.NotifyToolsListChanged)

var errorMember = []byte(`"error":`)

func (s fanStream) Send(msg []byte) error {
	if bytes.Contains(msg, errorMember) {
		refusal := bytes.Clone(msg) // a copy, so that msg itself never escapes
		s.f.refused.Store(&refusal)
		s.f.acks.hit(s.f.listens)
		return nil
	}
	if bytes.Contains(msg, listChanged) {
		s.f.cur.Load().hit(s.f.listens)
	} else {
		s.f.acks.hit(s.f.listens)
	}
	return nil
}

func (fanStream) KeepAlive() error { return nil }

// BenchmarkFanOut10k measures one tool list change reaching 10,000 open
// listens: an op is one AddTool or RemoveTools and ends when every
// listen's writer has handed the notification to its stream. It reports
// too how many times its floor's time (BenchmarkFanOutFloor10k, a change
// of which it makes in turn with each of its own) a change takes, as
// x-floor.
func BenchmarkFanOut10k(b *testing.B) { fanOut10k(b) }

// BenchmarkFanOut10kTraced is BenchmarkFanOut10k with every change traced
// and measured: each listen's notification is made for the change, with
// its trace context, and its delay recorded.
func BenchmarkFanOut10kTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	fanOut10k(b, server.WithTracerProvider(tp), server.WithMeterProvider(mp))
}

// discardSpans is an exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

func fanOut10k(b *testing.B, opts ...server.Option) {
	const listens = 10_000
	// One caller holds every listen: its allowance must hold them all.
	room := server.Allowance{Listens: listens, URIs: listens}
	srv := server.New(testInfo, append([]server.Option{server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room})}, opts...)...)
	if err := srv.AddTool(textTool("base"), echoHandler("base")); err != nil {
		b.Fatal(err)
	}
	f := &fanOut{listens: listens, acks: fanRound{done: make(chan struct{})}}
	f.next()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	before := heapInUse()
	for i := range listens {
		raw := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{}},"notifications":{"toolsListChanged":true}}}`, i+1, mcp.Version)
		msg, err := jsonrpc.Decode(raw, 0)
		if err != nil {
			b.Fatal(err)
		}
		c, rep := engine.Parse(msg)
		if rep != nil {
			b.Fatalf("listen refused: %s", rep.Body)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each listen has its own context, as each HTTP request or
			// stdio request does; one shared Done channel would put a
			// lock all 10,000 writers contend for into every wake-up.
			lctx, lcancel := context.WithCancel(ctx)
			defer lcancel()
			engine.Of(srv).Serve(lctx, c, "", nil, fanStream{f})
		}()
	}
	<-f.acks.done
	if msg := f.refused.Load(); msg != nil {
		b.Fatalf("a listen was refused: %s", *msg)
	}
	// What an open listen costs the server's heap (its goroutine's stack
	// not included), measured outside the loop and reported after it:
	// ResetTimer drops metrics reported before it.
	heapPerListen := float64(heapInUse()-before) / listens

	tool := textTool("churn")
	handler := echoHandler("churn")
	// The floor runs beside the listens, a change of each in turns, so
	// that a machine whose other processes come and go slows both alike
	// (x-floor: how many times the floor's time a change takes).
	fl := startFloor(b, listens)
	defer fl.stop()
	var took, floorTook time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		b.StopTimer()
		t0 := time.Now()
		fl.change()
		floorTook += time.Since(t0)
		b.StartTimer()
		r := f.next()
		t0 = time.Now()
		if i%2 == 0 {
			if err := srv.AddTool(tool, handler); err != nil {
				b.Fatal(err)
			}
		} else if srv.RemoveTools(tool.Name) != 1 {
			b.Fatal("churn tool missing")
		}
		<-r.done
		took += time.Since(t0)
		i++
	}
	b.ReportMetric(heapPerListen, "heapB/listen")
	b.ReportMetric(float64(took)/float64(floorTook), "x-floor")
}

// floor is the least a fan-out can cost: a goroutine per stream, woken
// through its own channel, handing a message encoded beforehand to the
// stream, with nothing to decide, encode or drain.
type floor struct {
	f     *fanOut
	wakes []chan struct{}
	wg    sync.WaitGroup
	quit  chan struct{}
}

// startFloor starts the floor's listens goroutines.
func startFloor(b *testing.B, listens int) *floor {
	b.Helper()
	fl := &floor{f: &fanOut{listens: int64(listens)}, quit: make(chan struct{})}
	fl.f.next()
	for i := range listens {
		wake := make(chan struct{}, 1)
		fl.wakes = append(fl.wakes, wake)
		msg := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":%q,"params":{"_meta":{%q:%d}}}`,
			mcp.NotifyToolsListChanged, mcp.MetaSubscriptionID, i+1)
		out := fanStream{fl.f}
		fl.wg.Go(func() {
			for {
				select {
				case <-fl.quit:
					return
				case <-wake:
					if err := out.Send(msg); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	return fl
}

// change pokes every goroutine, as a change does every listen, and
// waits until each has sent its message.
func (fl *floor) change() {
	r := fl.f.next()
	for _, w := range fl.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	<-r.done
}

func (fl *floor) stop() {
	close(fl.quit)
	fl.wg.Wait()
}

// BenchmarkFanOutFloor10k is the floor of BenchmarkFanOut10k on its own:
// an op is a change reaching 10,000 goroutines, each handing a message
// encoded beforehand to the same stream as the benchmark's listens.
func BenchmarkFanOutFloor10k(b *testing.B) {
	fl := startFloor(b, 10_000)
	defer fl.stop()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		fl.change()
	}
}

// heapInUse returns the heap in use after garbage collection. It collects
// twice so that objects only sync.Pools still held are gone too.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
