package dirsource

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
)

// fileState is what the source remembers of one readable file: its
// description, and whether it has room in the resource list.
type fileState struct {
	meta   fileMeta
	listed bool
	// refused: the server would not list it (see Source.registerLocked).
	// It is neither listed nor waiting for room until its description
	// changes.
	refused bool
}

// dirNode indexes the known files and subdirectories of one directory by
// their full relative paths, so that everything under a path is found in
// time proportional to the size of that subtree, not of the whole tree.
type dirNode struct {
	files   map[string]struct{}
	subdirs map[string]struct{}
}

// state is the source's bookkeeping. Every readable, non-hidden regular
// file under the root is in files, whether or not it fits in the list;
// overflow holds those that do not. Its methods are called with
// Source.mu held and do no I/O.
type state struct {
	files    map[string]*fileState
	dirs     map[string]*dirNode
	overflow map[string]struct{}
	listed   int
	refused  int
	// partial is the last published state of the partial-list
	// resource: whether it is registered and the counts it carries.
	partial partialInfo
}

func newState() state {
	return state{files: map[string]*fileState{}, dirs: map[string]*dirNode{}, overflow: map[string]struct{}{}}
}

// parentDir returns the directory of a relative path ("" for the root).
func parentDir(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

func (st *state) node(dir string) *dirNode {
	n := st.dirs[dir]
	if n == nil {
		n = &dirNode{files: map[string]struct{}{}, subdirs: map[string]struct{}{}}
		st.dirs[dir] = n
	}
	return n
}

// index records rel in its directory and that directory in its
// ancestors, stopping at the first ancestor that already knows it.
func (st *state) index(rel string) {
	d := parentDir(rel)
	st.node(d).files[rel] = struct{}{}
	for d != "" {
		p := parentDir(d)
		n := st.node(p)
		if _, ok := n.subdirs[d]; ok {
			return
		}
		n.subdirs[d] = struct{}{}
		d = p
	}
}

// unindex forgets rel and prunes directories left empty.
func (st *state) unindex(rel string) {
	d := parentDir(rel)
	n := st.dirs[d]
	if n == nil {
		return
	}
	delete(n.files, rel)
	for d != "" && len(n.files) == 0 && len(n.subdirs) == 0 {
		delete(st.dirs, d)
		p := parentDir(d)
		n = st.dirs[p]
		if n == nil {
			return
		}
		delete(n.subdirs, d)
		d = p
	}
}

// eachUnder calls fn for every known file that is prefix or lies under
// it ("" is the whole tree).
func (st *state) eachUnder(prefix string, fn func(rel string)) {
	if prefix == "" {
		for rel := range st.files {
			fn(rel)
		}
		return
	}
	if _, ok := st.files[prefix]; ok {
		fn(prefix)
	}
	stack := []string{prefix}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := st.dirs[d]
		if n == nil {
			continue
		}
		for rel := range n.files {
			fn(rel)
		}
		for sub := range n.subdirs {
			stack = append(stack, sub)
		}
	}
}

// subtreeObs is the complete set of readable files at or under prefix
// ("" for the whole tree), as looked at after events: known files there
// that are missing from found are gone. With assumeChanged, every file
// found is treated as rewritten, because its bytes may have changed
// without its size or modification time doing so (a file renamed onto
// another, events lost).
type subtreeObs struct {
	prefix        string
	found         map[string]fileMeta
	assumeChanged bool
}

// delta is what one commit must tell the server: resources to remove and
// to (re)register, and URIs whose reads now answer differently.
type delta struct {
	remove  []string // relative paths
	put     []string // relative paths, listed
	updated []string // relative paths
	// partial changes the partial-list resource: register or replace
	// it (with putPartial), or remove it (with dropPartial).
	putPartial, dropPartial bool
}

// apply brings the bookkeeping in line with the observations and says
// what changed. The cost is proportional to the observations and the
// subtrees they cover, never to the size of the whole tree (except for
// an observation of the whole tree). Files that do not fit in the list
// are kept unlisted, and fill room as soon as it appears.
func (st *state) apply(obs []subtreeObs, maxFiles int) delta {
	type seen struct {
		meta    fileMeta
		changed bool
	}
	found := map[string]seen{}
	var candidates []string // known under an observed prefix
	for _, o := range obs {
		st.eachUnder(o.prefix, func(rel string) {
			if _, ok := o.found[rel]; !ok {
				candidates = append(candidates, rel)
			}
		})
		for rel, m := range o.found {
			prev, ok := found[rel]
			found[rel] = seen{meta: m, changed: o.assumeChanged || ok && prev.changed}
		}
	}

	var d delta
	for _, rel := range candidates {
		fs, ok := st.files[rel]
		if !ok {
			continue // counted twice, or found by another observation
		}
		if _, ok := found[rel]; ok {
			continue
		}
		switch {
		case fs.listed:
			st.listed--
			d.remove = append(d.remove, rel)
		case fs.refused:
			st.refused--
		default:
			delete(st.overflow, rel)
		}
		delete(st.files, rel)
		st.unindex(rel)
		d.updated = append(d.updated, rel) // now missing
	}

	var fresh []string
	for rel, s := range found {
		fs, ok := st.files[rel]
		if !ok {
			st.files[rel] = &fileState{meta: s.meta}
			st.overflow[rel] = struct{}{}
			st.index(rel)
			fresh = append(fresh, rel)
			d.updated = append(d.updated, rel) // now present
			continue
		}
		old := fs.meta
		fs.meta = s.meta
		if s.changed || old.size != s.meta.size || !old.mod.Equal(s.meta.mod) {
			d.updated = append(d.updated, rel)
		}
		if fs.listed && (old.size != s.meta.size || old.mime != s.meta.mime) {
			d.put = append(d.put, rel) // the entry shows the size and type
		}
		if fs.refused && (old.size != s.meta.size || !old.mod.Equal(s.meta.mod) || old.mime != s.meta.mime) {
			fs.refused = false // its entry would differ: try it again
			st.refused--
			st.overflow[rel] = struct{}{}
		}
	}

	// Fill the room: new files first, in path order, then any that did
	// not fit before.
	slices.Sort(fresh)
	take := func(rel string) {
		delete(st.overflow, rel)
		st.files[rel].listed = true
		st.listed++
		d.put = append(d.put, rel)
	}
	for _, rel := range fresh {
		if st.listed >= maxFiles {
			break
		}
		take(rel)
	}
	for rel := range st.overflow {
		if st.listed >= maxFiles {
			break
		}
		take(rel)
	}

	want := partialInfo{}
	if len(st.overflow) > 0 {
		want = partialInfo{Listed: st.listed, Limit: maxFiles, Unlisted: len(st.overflow)}
	}
	switch {
	case want == st.partial:
	case want.Limit == 0:
		d.dropPartial = true
	default:
		d.putPartial = true
	}
	st.partial = want
	return d
}

// reject records that the server refused to list rel, which apply had
// just taken into the list: it leaves the list, and does not wait for
// room either, since it would be refused again.
func (st *state) reject(rel string) {
	fs := st.files[rel]
	if fs == nil || fs.refused {
		return
	}
	if fs.listed {
		fs.listed = false
		st.listed--
	} else {
		delete(st.overflow, rel)
	}
	fs.refused = true
	st.refused++
}

// known returns every known file, listed or not, sorted by path.
func (st *state) known() ([]string, map[string]fileMeta) {
	m := make(map[string]fileMeta, len(st.files))
	for rel, fs := range st.files {
		m[rel] = fs.meta
	}
	return slices.Sorted(maps.Keys(m)), m
}

// PartialMetaKey is the _meta key of the resource that is listed while
// the file limit (WithMaxFiles) leaves files out of the resource list.
// Its value is an object {"listed": N, "limit": M, "unlisted": K}: N
// files are listed, M is the limit and K readable files are not listed.
// A client that finds an entry carrying this key knows the list is
// partial without reading the whole list, and knows by how much; files
// left out can still be read by their URIs (the resource template
// covers them) and found with the search_files tool.
const PartialMetaKey = "io.github.tidings/partial"

// partialInfo is the value of PartialMetaKey, and the content of the
// partial-list resource.
type partialInfo struct {
	Listed   int `json:"listed"`
	Limit    int `json:"limit"`
	Unlisted int `json:"unlisted"`
}

// partialResource describes the partial-list resource for info.
func (s *Source) partialResource(info partialInfo) mcp.Resource {
	b, _ := json.Marshal(info) // a struct of ints always encodes
	return mcp.Resource{
		URI:      s.PartialURI(),
		Name:     "partial-listing",
		Title:    "Resource list is partial",
		MimeType: "application/json",
		Description: "Only " + strconv.Itoa(info.Listed) + " of " + strconv.Itoa(info.Listed+info.Unlisted) +
			" files under " + s.rootName + " are listed (limit " + strconv.Itoa(info.Limit) + "). " +
			"Unlisted files can still be read by URI and searched with search_files.",
		Meta: mcp.Meta{PartialMetaKey: jsontext.Value(b)},
	}
}
