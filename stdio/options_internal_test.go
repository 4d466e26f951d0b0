package stdio

import (
	"testing"
	"time"
)

// TestOptionsKeepDefaultsForZero: every size, count and duration option
// keeps its default for zero or less, as the package doc says.
func TestOptionsKeepDefaultsForZero(t *testing.T) {
	want := newConfig(nil)
	for _, n := range []int{0, -1} {
		got := newConfig([]Option{WithMaxLineBytes(n), WithMaxInFlight(n), WithMaxListens(n), WithDrainTimeout(time.Duration(n))})
		if got != want {
			t.Errorf("options of %d: %+v, want the defaults %+v", n, got, want)
		}
	}
}
