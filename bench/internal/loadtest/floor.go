package loadtest

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"tidings/internal/sse"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// ServerFloor is the net/http floor: what any listen served by a net/http
// handler costs at the least. Each listen is a handler that writes its
// ack and then, for every change, one notification encoded when the
// listen opened, flushed; nothing else — no hub, no filter, no keep-alive,
// no write timeout. Its goroutines and net/http's buffers are what the
// project's parked listens are measured against.
const ServerFloor = "floor"

// floorTarget is the net/http floor.
type floorTarget struct {
	b *floor
	*front
}

func startFloor() (*floorTarget, error) {
	b := &floor{gen: make(chan struct{}), closing: make(chan struct{})}
	f, err := startFront(b)
	if err != nil {
		return nil, err
	}
	return &floorTarget{b: b, front: f}, nil
}

// ServerFloorH2 is the net/http floor over HTTP/2 without TLS, as
// net/http's own server serves it: a handler per stream, each flush its
// own frame, net/http's write scheduler.
const ServerFloorH2 = "floor-h2"

func startFloorH2() (*floorTarget, error) {
	b := &floor{gen: make(chan struct{}), closing: make(chan struct{})}
	f, err := startFrontH2(b)
	if err != nil {
		return nil, err
	}
	return &floorTarget{b: b, front: f}, nil
}

func (t *floorTarget) change(context.Context, int) error { return t.b.publish() }

func (t *floorTarget) close(ctx context.Context) error {
	t.b.stop()
	return t.front.shutdown(ctx)
}

// floor wakes every handler at once for each change: a change closes the
// channel they wait on and puts a new one in its place.
type floor struct {
	mu       sync.Mutex
	gen      chan struct{}
	closing  chan struct{}
	stopOnce sync.Once
}

func (b *floor) publish() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closing:
		return errors.New("floor closed")
	default:
	}
	close(b.gen)
	b.gen = make(chan struct{})
	return nil
}

func (b *floor) stop() { b.stopOnce.Do(func() { close(b.closing) }) }

// current returns the channel the next change closes.
func (b *floor) current() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b *floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, meta, ok := startListen(w, r)
	if !ok {
		return
	}
	ack, event := listenEvents(meta)
	// The channel is read before the ack is written: a change made once
	// the client has its ack is heard.
	next := b.current()
	if _, err := w.Write(ack); err != nil {
		return
	}
	f.Flush()
	for {
		select {
		case <-next:
		case <-r.Context().Done():
			return
		case <-b.closing:
			return
		}
		next = b.current()
		if _, err := w.Write(event); err != nil {
			return
		}
		f.Flush()
	}
}

// listenEvents are the events the floors send a listen tagged by meta,
// each encoded once: its ack, and its notice of a tools list change.
func listenEvents(meta string) (ack, change []byte) {
	ack = sse.AppendEvent(nil, jsonrpc.AppendNotification(nil, mcp.NotifyAcknowledged, []byte(`{"_meta":`+meta+`,"notifications":{"toolsListChanged":true}}`)))
	change = sse.AppendEvent(nil, jsonrpc.AppendNotification(nil, mcp.NotifyToolsListChanged, []byte(`{"_meta":`+meta+`}`)))
	return ack, change
}
