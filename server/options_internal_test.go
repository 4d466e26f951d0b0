package server

import (
	"context"
	"testing"
	"time"

	"tidings/mcp"
)

// TestOptionsKeepDefaultsForZero: every size, count and duration option
// keeps its default for zero or less, as the package doc says, so a zero
// left unset never turns a bound off.
func TestOptionsKeepDefaultsForZero(t *testing.T) {
	cfg := func(opts ...Option) config {
		s := New(mcp.Implementation{Name: "t", Version: "1"}, opts...)
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s.cfg
	}
	want := cfg(WithTaskTTL(time.Hour)) // a task option, as below
	for _, n := range []int{0, -1} {
		d := time.Duration(n)
		got := cfg(WithPageSize(n), WithRequestStateTTL(d), WithTaskTTL(d), WithTaskPollInterval(d), WithMaxTasks(n, n), WithTaskLease(d),
			WithListenLimits(ListenLimits{URIsPerListen: n, PerConnection: Allowance{n, n}, PerPrincipal: Allowance{n, n}, Total: Allowance{n, n}}))
		if got.pageSize != want.pageSize || got.stateTTL != want.stateTTL || got.taskTTL != want.taskTTL || got.taskPoll != want.taskPoll ||
			got.maxTasks != want.maxTasks || got.maxPrincipalTasks != want.maxPrincipalTasks || got.taskLease != want.taskLease ||
			got.listens != want.listens {
			t.Errorf("options of %d: %+v, want the defaults %+v", n, got, want)
		}
	}
}
