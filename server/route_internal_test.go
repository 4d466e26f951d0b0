package server

import (
	"testing"

	"tidings/internal/engine"
)

// TestEveryCoreMethodHasItsHandler: each method of the table whose
// handler the core serves has one in handlers, so that a method added to
// the table without its handler fails here, not with a nil call on its
// first request.
func TestEveryCoreMethodHasItsHandler(t *testing.T) {
	for _, m := range engine.Methods() {
		if m.Handler.Core() && handlers[m.Handler] == nil {
			t.Errorf("%s: the table names core handler %d, which handlers lacks", m.Name, m.Handler)
		}
	}
}
