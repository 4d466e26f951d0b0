package gitignore

import (
	"maps"
	"strings"
)

// Set is the rules in force over a tree: those of its directories'
// .gitignore files, and rules that decide before all of them (patterns
// given on a command line). A Set is not safe for concurrent change;
// Clone one, change the clone, and publish it, so that readers never
// see one half-changed.
type Set struct {
	first *Rules
	dirs  map[string]*Rules
}

// NewSet returns a set with first deciding before any directory's
// rules; first may be nil.
func NewSet(first *Rules) *Set {
	return &Set{first: first, dirs: map[string]*Rules{}}
}

// Clone returns a copy that can be changed without changing s.
func (s *Set) Clone() *Set {
	return &Set{first: s.first, dirs: maps.Clone(s.dirs)}
}

// Put records r as the rules of its base directory, replacing any there;
// rules with no patterns are dropped instead, since they decide nothing.
func (s *Set) Put(r *Rules) {
	if r.Len() == 0 {
		delete(s.dirs, r.base)
		return
	}
	s.dirs[r.base] = r
}

// DropUnder forgets the rules of dir and of every directory below it
// ("" forgets all), before that subtree is read again.
func (s *Set) DropUnder(dir string) {
	if dir == "" {
		clear(s.dirs)
		return
	}
	for d := range s.dirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			delete(s.dirs, d)
		}
	}
}

// Dirs returns how many directories have rules.
func (s *Set) Dirs() int { return len(s.dirs) }

// Matches reports whether the rules exclude rel itself (a directory when
// isDir is set), without looking at the directories above it: for a walk
// that does not enter excluded directories in the first place.
func (s *Set) Matches(rel string, isDir bool) bool {
	if s.first != nil {
		if v := s.first.Match(rel, isDir); v != NoMatch {
			return v == Exclude
		}
	}
	if len(s.dirs) == 0 {
		return false
	}
	for d := rel; d != ""; {
		d = parent(d)
		if r := s.dirs[d]; r != nil {
			if v := r.Match(rel, isDir); v != NoMatch {
				return v == Exclude
			}
		}
	}
	return false
}

// Ignored reports whether rel (a directory when isDir is set) is
// excluded, itself or through one of the directories above it.
func (s *Set) Ignored(rel string, isDir bool) bool {
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && s.Matches(rel[:i], true) {
			return true
		}
	}
	return s.Matches(rel, isDir)
}

// parent returns the directory of a slash-separated relative path, ""
// for the root.
func parent(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}
