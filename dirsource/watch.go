package dirsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
// rescanned and every file is reported as updated, because a change may
// have been missed: correctness comes from clients re-reading.
//
// The directory itself is checked every 100ms as well as watched: when
// it is removed, moved away, or replaced by another directory (or an
// ancestor is moved, so that its path now leads elsewhere), every file
// is reported missing and the list empties; when a directory is at its
// path again, it is watched and listed afresh, and every file in it is
// reported as updated. If none comes back within the grace period
// (WithRootGrace), Run returns an error wrapping ErrRootGone.
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
	wt, err := s.watch(false)
	if err != nil {
		return err
	}
	defer func() { wt.close() }()
	close(s.ready)

	timer := time.NewTimer(s.cfg.coalesce)
	timer.Stop()
	defer timer.Stop()
	armed := false
	arm := func() {
		if !armed {
			timer.Reset(s.cfg.coalesce)
			armed = true
		}
	}
	check := time.NewTicker(s.cfg.rootCheck)
	defer check.Stop()

	pending := map[string]fsnotify.Op{}
	// rescan: look at the whole tree again; lost: and report every file
	// as updated, because events were lost; rules: a .gitignore changed,
	// so what is excluded may have.
	rescan, lost, rootEvent, rules := false, false, false, false
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if wt.w != nil {
			events, errs = wt.w.Events, wt.w.Errors
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return errors.New("dirsource: watcher closed")
			}
			rel, ok := s.relOf(ev.Name)
			switch {
			case !ok:
				continue
			case rel == "":
				if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
					rootEvent = true // removed or moved away
				} else {
					rescan = true // its permissions changed: what is readable may have
				}
			case s.isIgnoreFile(rel):
				rescan, rules = true, true
			case hidden(rel) || s.excludedEither(rel):
				continue
			default:
				pending[ev.Name] |= ev.Op
			}
			arm()
		case err, ok := <-errs:
			if !ok {
				return errors.New("dirsource: watcher closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.log.Warn("dirsource: events were lost; rescanning", "err", err)
				rescan, lost = true, true
				arm()
				continue
			}
			s.log.Warn("dirsource: watcher error", "err", err)
		case <-timer.C:
			armed = false
			switch {
			case rootEvent || !wt.intact(s.root):
				wt = s.rewatch(wt)
			case rules:
				// The new rules first: a file excluded by them must not
				// be listed, even for a moment.
				s.rescan(wt, lost)
				s.unwatchExcluded(wt)
				if !lost {
					s.flush(wt, pending)
				}
			case rescan:
				if !lost {
					s.flush(wt, pending) // their writes count as such
				}
				s.rescan(wt, lost)
			default:
				s.flush(wt, pending)
			}
			clear(pending)
			rescan, lost, rootEvent, rules = false, false, false, false
		case <-check.C:
			if wt.w != nil && wt.intact(s.root) {
				continue
			}
			if wt.w != nil {
				clear(pending)
				rescan, lost, rootEvent, rules = false, false, false, false
			}
			wt = s.rewatch(wt)
			if wt.w == nil && s.cfg.rootGrace >= 0 && time.Since(wt.goneSince) > s.cfg.rootGrace {
				return fmt.Errorf("%w: %s has been missing for longer than %v", ErrRootGone, s.root, s.cfg.rootGrace)
			}
		}
	}
}

// watcher is the watch on one incarnation of the root directory: w is nil
// while no directory is at the root's path, since goneSince.
type watcher struct {
	w         *fsnotify.Watcher
	root      fs.FileInfo // the directory w watches
	goneSince time.Time
}

func (wt *watcher) close() {
	if wt.w != nil {
		_ = wt.w.Close()
		wt.w = nil
	}
}

// intact reports whether the directory at path is still the one watched.
// An ancestor renamed, or the root replaced, leaves the watches on a
// directory that the path no longer names.
func (wt *watcher) intact(path string) bool {
	if wt.w == nil {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir() && os.SameFile(fi, wt.root)
}

// watch starts a new watcher on the root, scans the whole tree and
// commits it; with fresh, every file is reported as updated, because it
// belongs to a directory that replaced the one served before.
func (s *Source) watch(fresh bool) (*watcher, error) {
	// Identify the directory before watching it: if it is replaced in
	// between, the next check finds the identity wrong and starts over.
	fi, err := os.Lstat(s.root)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("dirsource: %s is no longer a directory", s.root)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("dirsource: watch %s: %w", s.root, err)
	}
	// Watch first, then scan: whatever changed since is either seen by
	// this scan or reported by the watcher afterwards.
	found, err := s.scan("", w)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	s.commit([]subtreeObs{{found: found, assumeChanged: fresh}})
	return &watcher{w: w, root: fi}, nil
}

// rewatch drops the watch on a root that is gone or replaced and watches
// the directory now at its path, if any. Without one, every file is
// reported missing once, and the returned watcher records since when.
func (s *Source) rewatch(old *watcher) *watcher {
	wasWatching := old.w != nil
	old.close()
	wt, err := s.watch(true)
	if err == nil {
		if !wasWatching {
			s.log.Info("dirsource: directory is back; watching it again")
		}
		return wt
	}
	if wasWatching {
		s.log.Warn("dirsource: directory is gone; waiting for it to come back", "err", err, "grace", s.cfg.rootGrace)
		s.commit([]subtreeObs{{}})
		return &watcher{goneSince: time.Now()}
	}
	return old
}

// rescan looks at the whole tree again; after events were lost, it
// reports every file as updated, since any may have changed unseen.
func (s *Source) rescan(wt *watcher, lost bool) {
	found, err := s.scan("", wt.w)
	if err != nil {
		s.log.Warn("dirsource: rescan failed; listing nothing", "err", err)
		found = nil
	}
	s.commit([]subtreeObs{{found: found, assumeChanged: lost}})
}

// flush looks at every path that had events and commits what it finds.
// Each path is observed as a subtree: a file, a directory (rescanned, so
// that what was created in it before its watch existed is found), or
// nothing any more, and whatever was known at or under it and is not
// found now is gone.
func (s *Source) flush(wt *watcher, pending map[string]fsnotify.Op) {
	root, err := os.OpenRoot(s.root)
	if err != nil {
		s.log.Warn("dirsource: directory unavailable", "err", err)
		s.commit([]subtreeObs{{}})
		return
	}
	defer root.Close()
	obs := make([]subtreeObs, 0, len(pending))
	for name, op := range pending {
		rel, _ := s.relOf(name)
		fi, err := os.Lstat(name)
		switch {
		case err == nil && fi.Mode().IsRegular():
			found := map[string]fileMeta{}
			if s.excluded(rel, false) {
				obs = append(obs, subtreeObs{prefix: rel}) // as if gone
				continue
			}
			if m, ok := s.metaOf(root, rel, fi); ok {
				found[rel] = m
			}
			// A chmod alone leaves the bytes alone; anything else (a
			// write, a rename onto the file) may change them while
			// keeping size and time.
			obs = append(obs, subtreeObs{prefix: rel, found: found, assumeChanged: op&^fsnotify.Chmod != 0})
		case err == nil && fi.IsDir():
			found, err := s.scan(rel, wt.w)
			if err != nil {
				s.log.Warn("dirsource: cannot scan directory", "path", rel, "err", err)
			}
			// A directory created or moved in holds files whose bytes
			// nothing says anything about; a chmod changes none.
			obs = append(obs, subtreeObs{prefix: rel, found: found, assumeChanged: op&(fsnotify.Create|fsnotify.Rename) != 0})
		default:
			// Gone, or replaced by something that is not listed (a
			// symbolic link, a socket): forget it and anything under it.
			_ = wt.w.Remove(name)
			obs = append(obs, subtreeObs{prefix: rel})
		}
	}
	s.commit(obs)
}
