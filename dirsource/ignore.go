package dirsource

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"tidings/internal/gitignore"
)

// WithGitignore makes the source honour the tree's .gitignore files —
// the root's and those of its subdirectories, with git's pattern rules —
// so that a checkout is served without what its tools leave in it
// (node_modules, build output). An excluded file is not listed, cannot
// be read by URI, and is invisible to the tools; an excluded directory
// is not even watched, and nothing created under it is seen. A
// .gitignore that changes while Run runs takes effect at once: the tree
// is scanned again. Rules from files above the served directory, from
// .git/info/exclude and from the user's git configuration are not read:
// what is served depends on the directory alone. A .gitignore larger
// than WithMaxReadBytes is not read either (a warning says so).
func WithGitignore() Option { return func(c *config) { c.gitignore = true } }

// WithExclude leaves out the paths the patterns match, written in
// .gitignore syntax and applied from the served directory as if they
// were the root's .gitignore, but deciding before any .gitignore: a
// file they exclude stays out whatever the tree's files say, and one
// they re-include ("!pattern") stays in. They apply with or without
// WithGitignore. New refuses a pattern that matches nothing (blank, or
// a comment).
func WithExclude(patterns ...string) Option {
	return func(c *config) { c.exclude = append(c.exclude, patterns...) }
}

// ignoreFile is the name of the files WithGitignore reads.
const ignoreFile = ".gitignore"

// excluded reports whether rel (a directory when isDir is set) is left
// out by WithExclude or a .gitignore, itself or through a directory
// above it.
func (s *Source) excluded(rel string, isDir bool) bool {
	return s.ignore.Load().Ignored(rel, isDir)
}

// excludedEither reports whether rel is left out whatever it is, file
// or directory: what an event can be dropped for before looking.
func (s *Source) excludedEither(rel string) bool {
	set := s.ignore.Load()
	return set.Ignored(rel, false) && set.Ignored(rel, true)
}

// isIgnoreFile reports whether rel is a .gitignore that decides what is
// served: one in the root or in a directory that is served.
func (s *Source) isIgnoreFile(rel string) bool {
	if !s.cfg.gitignore || path.Base(rel) != ignoreFile {
		return false
	}
	dir := parentDir(rel)
	return dir == "" || !hidden(dir) && !s.excluded(dir, true)
}

// readIgnoreFile reads the .gitignore of the directory dir into set, or
// leaves set alone when there is none. It is opened like any served
// file, so a link or a named pipe under that name is not followed.
func (s *Source) readIgnoreFile(root *os.Root, dir string, set *gitignore.Set) {
	name := filepath.FromSlash(path.Join(dir, ignoreFile))
	f, err := openServable(root, name, false)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		return
	default:
		s.log.Warn("dirsource: cannot read a .gitignore; its patterns are not applied", "path", path.Join(dir, ignoreFile), "err", err)
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, s.cfg.maxRead+1))
	switch {
	case err != nil:
		s.log.Warn("dirsource: cannot read a .gitignore; its patterns are not applied", "path", path.Join(dir, ignoreFile), "err", err)
		return
	case int64(len(data)) > s.cfg.maxRead:
		s.log.Warn("dirsource: a .gitignore is larger than the read limit; its patterns are not applied",
			"path", path.Join(dir, ignoreFile), "limit", s.cfg.maxRead)
		return
	}
	set.Put(gitignore.Parse(dir, data))
}

// notExcludedText qualifies descriptions of what is served when some of
// it may be excluded.
func (s *Source) notExcludedText() string {
	if s.cfg.gitignore || len(s.cfg.exclude) > 0 {
		return ", not excluded"
	}
	return ""
}

// andExcludedText is notExcludedText for a list of what is left out.
func (s *Source) andExcludedText() string {
	if s.cfg.gitignore || len(s.cfg.exclude) > 0 {
		return " and ignored"
	}
	return ""
}

// unwatchExcluded drops the watches of directories that a changed
// .gitignore now excludes, so that excluding a large tree at run time
// frees its watches as excluding it from the start would have.
func (s *Source) unwatchExcluded(wt *watcher) {
	if wt.w == nil {
		return
	}
	for _, p := range wt.w.WatchList() {
		if rel, ok := s.relOf(p); ok && rel != "" && s.excluded(rel, true) {
			_ = wt.w.Remove(p)
		}
	}
}
