package dirsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run watches the directory and keeps the server's resources in step with
// it until ctx ends; it then returns nil. Call it once, after Register.
// It owns the watcher and everything it started: when Run returns, no
// goroutine of the source is left.
//
// Events are gathered for the coalescing window and then acted on by
// looking at the files as they are at that moment, not by replaying the
// events: a burst of writes becomes one notification, a file created and
// removed within the window causes none, and the final state always wins.
// When the kernel drops events (queue overflow), the whole tree is
// rescanned and every subscribed file is reported as updated, because a
// change may have been missed: correctness comes from clients re-reading.
func (s *Source) Run(ctx context.Context) error {
	s.mu.Lock()
	registered := s.srv != nil
	s.mu.Unlock()
	if !registered {
		return errors.New("dirsource: Run before Register")
	}
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("dirsource: Run called twice")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("dirsource: watch %s: %w", s.root, err)
	}
	defer w.Close()

	// Watch first, then scan: whatever changed since Register is either
	// seen by this scan or reported by the watcher afterwards.
	found, err := s.scan("", w)
	if err != nil {
		return err
	}
	s.commit(nil, []subtreeObs{{found: found}})
	close(s.ready)

	timer := time.NewTimer(s.cfg.coalesce)
	timer.Stop()
	armed := false
	arm := func() {
		if !armed {
			timer.Reset(s.cfg.coalesce)
			armed = true
		}
	}
	defer timer.Stop()
	pending := map[string]fsnotify.Op{}
	rescan := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("dirsource: watcher closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue // metadata only; the bytes are unchanged
			}
			rel, ok := s.relOf(ev.Name)
			switch {
			case !ok:
				continue
			case rel == "":
				// The root itself was removed or moved away.
				rescan = true
			case hidden(rel):
				continue
			default:
				pending[ev.Name] |= ev.Op
			}
			arm()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("dirsource: watcher closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.log.Warn("dirsource: events were lost; rescanning", "err", err)
				rescan = true
				arm()
				continue
			}
			s.log.Warn("dirsource: watcher error", "err", err)
		case <-timer.C:
			armed = false
			s.flush(w, pending, rescan)
			clear(pending)
			rescan = false
		}
	}
}

// flush looks at every path that had events and commits what it finds.
func (s *Source) flush(w *fsnotify.Watcher, pending map[string]fsnotify.Op, rescan bool) {
	if rescan {
		found, err := s.scan("", w)
		if err != nil {
			s.log.Warn("dirsource: rescan failed; listing nothing", "err", err)
			found = nil
		}
		s.commit(nil, []subtreeObs{{found: found, assumeChanged: true}})
		return
	}
	root, err := os.OpenRoot(s.root)
	if err != nil {
		s.log.Warn("dirsource: directory unavailable", "err", err)
		s.commit(nil, []subtreeObs{{}})
		return
	}
	defer root.Close()
	var files []fileObs
	var trees []subtreeObs
	for name, op := range pending {
		rel, _ := s.relOf(name)
		fi, err := os.Lstat(name)
		switch {
		case err == nil && fi.Mode().IsRegular():
			files = append(files, fileObs{rel: rel, meta: s.metaOf(root, rel, fi), content: op&^fsnotify.Chmod != 0})
		case err == nil && fi.IsDir():
			// A new (or moved-in) directory: watch it and pick up what
			// was created in it before the watch was in place.
			found, err := s.scan(rel, w)
			if err != nil {
				s.log.Warn("dirsource: cannot scan new directory", "path", rel, "err", err)
			}
			trees = append(trees, subtreeObs{prefix: rel, found: found})
		default:
			// Gone, or replaced by something that is not listed (a
			// symbolic link, a socket): forget it and anything under it.
			_ = w.Remove(name)
			trees = append(trees, subtreeObs{prefix: rel})
		}
	}
	s.commit(files, trees)
}
