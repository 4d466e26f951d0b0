package loadtest

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report as a short table for people.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	where := "read in the server's process"
	if r.ListenerProcess {
		where = "read by a child process"
	}
	fmt.Fprintf(&b, "change fan-out over loopback HTTP: %d listens (%s), %d tools list changes one at a time, timeout %s per change\n",
		r.Listeners, where, r.Changes, fmtMs(r.TimeoutMs))
	if r.Rounds > 1 {
		fmt.Fprintf(&b, "%d rounds, each measuring every server in turn; each ratio is the median of the rounds' own\n", r.Rounds)
	}
	if r.HTTP2Conns > 0 {
		fmt.Fprintf(&b, "over HTTP/2 (h2c): the listens are streams of %d connections; writes gathered per connection: %v\n", r.HTTP2Conns, r.HTTP2Coalesce)
	}
	fmt.Fprintf(&b, "%s %s/%s, %d CPUs, GOMAXPROCS %d\n\n", r.GoVersion, r.GOOS, r.GOARCH, r.NumCPU, r.GOMAXPROCS)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "server\tstalled\thealthy\topen\tp50\tp99\tall delivered\tworst\tcpu/change\tchanges done")
	for _, run := range r.Runs {
		p50, p99, all := "-", "-", "-"
		if run.Median != nil {
			p50, p99, all = fmtMs(run.Median.P50Ms), fmtMs(run.Median.P99Ms), fmtMs(run.Median.AllDeliveredMs)
		}
		worst := "-"
		if run.Completed > 0 {
			worst = fmtMs(run.WorstAllDeliveredMs)
		}
		done := fmt.Sprintf("%d/%d", run.Completed, r.Changes)
		if run.TimedOut {
			last := run.Changes[len(run.Changes)-1]
			done += fmt.Sprintf(", timed out at change %d (%d/%d listens had it)", last.Index+1, last.Delivered, run.Healthy)
			if run.Median == nil {
				all = "timed out"
			}
		}
		if run.Unexpected > 0 {
			done += fmt.Sprintf(", %d unexpected messages", run.Unexpected)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name(run), run.Stalled, run.Healthy,
			fmtMs(run.OpenMs), p50, p99, all, worst, fmtMs(run.CPUPerChangeMs), done)
	}
	tw.Flush()
	b.WriteString("p50, p99, all delivered (the slowest listen): per change, median over the changes that completed;\n" +
		"cpu/change: the server process's CPU time per change, the listens' reading included when it is in that process\n")
	for _, run := range r.Runs {
		if run.SocketWritesPerChange > 0 {
			fmt.Fprintf(&b, "%s: %.0f writes to the sockets per change (%.1f listens per write); %s of its CPU per change in the kernel\n",
				r.name(run), run.SocketWritesPerChange, float64(run.Healthy)/run.SocketWritesPerChange, fmtMs(run.SysCPUPerChangeMs))
		}
	}
	b.WriteString("\n")

	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "memory per listen\tresident\theap in use\theap live\tstacks\tgoroutines\tresident in all")
	var listeners *Footprint
	covers := ""
	for _, run := range r.Runs {
		if run.Memory == nil {
			continue
		}
		covers = run.Memory.Covers
		writeFootprint(tw, r.name(run), run.Memory.Server)
		if run.Memory.Listeners != nil {
			listeners = run.Memory.Listeners
		}
	}
	if listeners != nil {
		writeFootprint(tw, "listens (child)", *listeners)
	}
	tw.Flush()
	fmt.Fprintf(&b, "covers: %s; after a GC; kernel socket buffers not included\n\n", covers)

	x := r.Ratios
	fmt.Fprintf(&b, "tidings / naive: all delivered %s, p99 %s, heap per listen %s",
		fmtRatio(x.AllDelivered), fmtRatio(x.P99), fmtRatio(x.HeapPerListen))
	if r.Stalled > 0 {
		fmt.Fprintf(&b, "\nwith %d stalled: tidings / naive all delivered %s; stalled / unstalled all delivered: tidings %s, naive %s",
			r.Stalled, fmtRatio(x.AllDeliveredStalled), fmtRatio(x.StallCostTidings), fmtRatio(x.StallCostNaive))
	}
	if find(r.Runs, ServerFloor, false) != nil || find(r.Runs, ServerFloorH2, false) != nil {
		fmt.Fprintf(&b, "\ntidings / floor: all delivered %s, p99 %s, cpu per change %s, resident per listen %s, goroutines per listen %s",
			fmtRatio(x.FloorAllDelivered), fmtRatio(x.FloorP99), fmtRatio(x.FloorCPUPerChange), fmtRatio(x.FloorRSSPerListen), fmtRatio(x.FloorGoroutines))
	}
	if x.ServeFloorP99 > 0 {
		fmt.Fprintf(&b, "\ntidings-serve / floor: all delivered %s, p99 %s", fmtRatio(x.ServeFloorAllDelivered), fmtRatio(x.ServeFloorP99))
	}
	if find(r.Runs, ServerWrites, false) != nil {
		fmt.Fprintf(&b, "\ntidings / writes: all delivered %s, p99 %s, cpu per change %s; writes / floor: p99 %s",
			fmtRatio(x.WritesAllDelivered), fmtRatio(x.WritesP99), fmtRatio(x.WritesCPUPerChange), fmtRatio(x.WritesFloorP99))
	}
	if find(r.Runs, ServerGateway, false) != nil {
		fmt.Fprintf(&b, "\ngateway / tidings: all delivered %s, p99 %s", fmtRatio(x.GatewayAllDelivered), fmtRatio(x.GatewayP99))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// name names run in the tables: its server, and its round when there
// are several.
func (r *Report) name(run Measurement) string {
	if r.Rounds <= 1 {
		return run.Server
	}
	return fmt.Sprintf("%s #%d", run.Server, run.Round)
}

func writeFootprint(w io.Writer, name string, f Footprint) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f MiB\n", name, fmtBytes(f.RSS), fmtBytes(f.HeapInuse), fmtBytes(f.HeapAlloc), fmtBytes(f.StackInuse), f.Goroutines,
		float64(f.RSSTotal)/(1<<20))
}

func fmtMs(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}

func fmtBytes(v float64) string {
	if v >= 1024 || v <= -1024 {
		return fmt.Sprintf("%.1f KiB", v/1024)
	}
	return fmt.Sprintf("%.0f B", v)
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", v)
}
