package server

import (
	"context"
	"fmt"
	"sync"
)

// Shutdown ends every open listen gracefully (each gets the complete
// result) and waits until their streams are closed and each transport has
// written that last message, or until ctx ends; closing connections right
// after Shutdown returns cuts nothing short. New listens are refused afterwards;
// other requests are still served, so a transport can drain in-flight
// calls on its own schedule. The bus of WithBus is closed last, whether
// or not ctx ended first, so that no goroutine of it outlives the server.
//
// Running tasks come first: their work is stopped, each unfinished task
// ends failed (an internal error saying the server shut down) — or
// completed, when its work returns a result all the same — which
// listeners following it still hear, and Shutdown waits for their
// goroutines, or until ctx ends. No task is created afterwards. The
// task store is closed once they are done.
//
// Shutdown may be called again, or by several owners at once (a program
// and the streamhttp.Serve it runs): calls take turns, and once one has
// ended with nil, the others return nil at once; one that gave up (its
// ctx ended first) leaves the next to wait again.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shut.mu.Lock()
	defer s.shut.mu.Unlock()
	if s.shut.done {
		return nil
	}
	err := s.shutdown(ctx)
	s.shut.done = err == nil
	return err
}

// shutState says whether a Shutdown has ended with nil.
type shutState struct {
	mu   sync.Mutex
	done bool
}

func (s *Server) shutdown(ctx context.Context) (err error) {
	if b := s.cfg.bus; b != nil {
		defer func() {
			if cerr := b.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("server: shutdown: %w", cerr)
			}
		}()
	}
	if sh := s.shared; sh != nil {
		// Before the bus closes: the last writes publish on it.
		defer func() {
			if cerr := sh.close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	defer func() {
		if cerr := s.taskStore.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("server: shutdown: task store: %w", cerr)
		}
	}()
	terr := s.tasks.close(ctx)
	s.leases.close()
	s.hub.Shutdown()
	idle := s.writers.close()
	for _, ch := range []<-chan struct{}{s.hub.Drained(), idle} {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("server: shutdown: %w", ctx.Err())
		}
	}
	return terr
}

// writers counts listens whose last message a transport has yet to write.
type writers struct {
	mu         sync.Mutex
	n          int
	closing    bool
	idle       chan struct{}
	idleClosed bool
}

func (w *writers) add() {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}

// Written marks one listen's last message as written (engine.Tracker).
// Each add is matched by exactly one Written, which engine.Reply's
// Release guarantees for the reply it is set on.
func (w *writers) Written() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.closing && w.n == 0 && !w.idleClosed {
		w.idleClosed = true
		close(w.idle)
	}
}

// close marks the shutdown and returns a channel closed once no listen
// is left to write.
func (w *writers) close() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closing {
		w.closing = true
		w.idle = make(chan struct{})
		if w.n == 0 {
			w.idleClosed = true
			close(w.idle)
		}
	}
	return w.idle
}
