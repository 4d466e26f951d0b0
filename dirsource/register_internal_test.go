package dirsource

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
)

// TestRefusedEntryLeavesTheOthersListed has the server refuse one entry
// of a batch (a media type that does not encode, as a name that is not
// UTF-8 did before names were shown as text): the other files are
// listed, the refused one is not, the bookkeeping says so, and once its
// description changes it is tried again.
func TestRefusedEntryLeavesTheOthersListed(t *testing.T) {
	// The directory is empty: what it holds is observed below.
	src, err := New(t.TempDir(), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "test", Version: "1"}, server.WithKeepAlive(0))
	if err := src.Register(srv); err != nil {
		t.Fatal(err)
	}
	listed := func(rel string) bool { return srv.Enable(t.Context(), server.Resource(src.URI(rel))) == nil }
	now := time.Now()
	good := fileMeta{size: 1, mod: now, mime: "text/plain"}
	bad := fileMeta{size: 1, mod: now, mime: "text/\xff"}
	src.commit([]subtreeObs{{found: map[string]fileMeta{"a.txt": good, "b.txt": good, "c.txt": good, "d.txt": bad}}})
	for _, rel := range []string{"a.txt", "b.txt", "c.txt"} {
		if !listed(rel) {
			t.Errorf("%s not listed beside a refused entry", rel)
		}
	}
	if listed("d.txt") {
		t.Error("the refused d.txt is listed")
	}
	if st := src.Stats(); st.Listed != 3 || st.Refused != 1 || st.Unlisted != 0 {
		t.Errorf("stats = %+v, want 3 listed, 1 refused", st)
	}

	// A listed file whose new entry is refused leaves the list, rather
	// than stay listed as it was and never be removed.
	src.commit([]subtreeObs{{prefix: "b.txt", found: map[string]fileMeta{"b.txt": {size: 2, mod: now, mime: "text/\xff"}}}})
	if listed("b.txt") {
		t.Error("b.txt still listed after its new entry was refused")
	}
	if st := src.Stats(); st.Listed != 2 || st.Refused != 2 {
		t.Errorf("stats = %+v, want 2 listed, 2 refused", st)
	}

	// A changed description is tried again.
	src.commit([]subtreeObs{{prefix: "d.txt", found: map[string]fileMeta{"d.txt": {size: 3, mod: now, mime: "text/plain"}}}})
	if !listed("d.txt") {
		t.Error("d.txt not listed once its entry encodes")
	}
	// The refused files gone, the bookkeeping forgets them.
	src.commit([]subtreeObs{{prefix: "b.txt"}})
	if st := src.Stats(); st.Listed != 3 || st.Refused != 0 {
		t.Errorf("stats = %+v, want 3 listed, none refused", st)
	}
}
