// Package loadtest measures how fast and at what memory cost a change
// reaches many open subscriptions/listen streams over real HTTP on
// loopback, for the project's server and for a naive sequential
// broadcaster run in the same process, under the same load, as a
// yardstick.
//
// A run opens the listens (each its own TCP connection, reading SSE),
// makes a number of tools list changes one at a time, and records when
// each healthy listen received each change. Optionally some listens stop
// reading after their ack, to show what a stalled client costs the
// others. Everything is bounded: listens, changes, and the time each
// change may take.
package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"time"

	"tidings/streamhttp"
)

// Limits on a run's size.
const (
	MaxListeners = 20000
	MaxChanges   = 1000
	MaxRounds    = 20
	// fdSlack is the file descriptors a process needs besides its
	// listens' sockets.
	fdSlack = 64
)

// Config describes a run. The zero value of a field takes its default.
type Config struct {
	// Listeners is how many listens are open during each measurement
	// (default 2000, at most MaxListeners).
	Listeners int
	// Changes is how many tools list changes each measurement makes, one
	// at a time (default 20, at most MaxChanges).
	Changes int
	// Stalled, when positive, adds measurements in which that many of the
	// listens stop reading right after their ack.
	Stalled int
	// Gateway adds a measurement of the project's server behind a
	// gateway (ServerGateway), without stalled listens: each change is
	// made on the upstream and reaches the listens through the gateway's
	// one listen on it.
	Gateway bool
	// Floor adds measurements of the net/http floor (ServerFloor) and,
	// over HTTP/1.1, of the kernel's (ServerWrites), without stalled
	// listens, and the ratios of the project's server to them.
	Floor bool
	// Unparked adds a measurement of the project's server with every
	// listen on its own goroutines (ServerUnparked), without stalled
	// listens.
	Unparked bool
	// Serve adds a measurement of the project's server as a Go program
	// serves it (ServerServe): streamhttp.Serve, with the Handler, made
	// without WithParking, on an http.ServeMux; over HTTP/2 too when
	// HTTP2Conns is set.
	Serve bool
	// Timeout bounds how long one change may take to reach every healthy
	// listen (default 10s). A change that takes longer ends its
	// measurement, which is reported as timed out.
	Timeout time.Duration
	// WriteTimeout is the project's server's write timeout (default 10s,
	// as streamhttp's): how long a listen that does not read may block
	// its writer before it is cut.
	WriteTimeout time.Duration
	// OpenTimeout bounds opening the listens of one measurement and
	// reading every ack (default 2 minutes).
	OpenTimeout time.Duration
	// ListenerProcess, when not nil, returns the command of a child
	// process that reads the listens (one that runs ServeListeners on its
	// stdin and stdout). The server's memory is then measured alone, and
	// each process needs one file descriptor per listen instead of two.
	// When nil, the listens are read in this process.
	ListenerProcess func(ctx context.Context) *exec.Cmd
	// Log, when not nil, receives progress lines and the listener
	// process's stderr.
	Log io.Writer
	// HTTP2Conns, when positive, measures the project's server alone
	// (ServerTidingsH2) with the listens as HTTP/2 streams without TLS,
	// spread over this many connections; Listeners may then be up to
	// MaxHTTP2Listeners. Stalled and Gateway do not apply.
	HTTP2Conns int
	// HTTP2NoCoalesce leaves the HTTP/2 server's writes as net/http
	// makes them, where by default they are gathered per connection.
	HTTP2NoCoalesce bool
	// Rounds is how many times the whole sequence of measurements is
	// made, one server after the other each time (default 1, at most
	// MaxRounds). Each ratio is then the median of the rounds' own: a
	// server and the floor it is compared with are measured minutes
	// apart at most, and a noisy minute moves one round, not the figure.
	Rounds int
}

func (c Config) withDefaults() Config {
	if c.Listeners == 0 {
		c.Listeners = 2000
	}
	if c.Changes == 0 {
		c.Changes = 20
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = 2 * time.Minute
	}
	if c.Rounds == 0 {
		c.Rounds = 1
	}
	return c
}

func (c Config) validate() error {
	if c.Rounds < 1 || c.Rounds > MaxRounds {
		return fmt.Errorf("rounds must be between 1 and %d, not %d", MaxRounds, c.Rounds)
	}
	if c.HTTP2Conns != 0 {
		return c.validateH2()
	}
	switch {
	case c.Listeners < 1 || c.Listeners > MaxListeners:
		return fmt.Errorf("listeners must be between 1 and %d, not %d", MaxListeners, c.Listeners)
	case c.Changes < 1 || c.Changes > MaxChanges:
		return fmt.Errorf("changes must be between 1 and %d, not %d", MaxChanges, c.Changes)
	case c.Stalled < 0 || c.Stalled >= c.Listeners:
		return fmt.Errorf("stalled must be at least 0 and below the number of listeners (%d), not %d", c.Listeners, c.Stalled)
	case c.Timeout < 0 || c.WriteTimeout < 0 || c.OpenTimeout < 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}

// Report is the outcome of a run.
type Report struct {
	Listeners    int     `json:"listeners"`
	Changes      int     `json:"changes"`
	Rounds       int     `json:"rounds"`
	Stalled      int     `json:"stalled"`
	TimeoutMs    float64 `json:"timeoutMs"`
	WriteTimeout float64 `json:"writeTimeoutMs"`
	// ListenerProcess is true when a child process read the listens.
	ListenerProcess bool `json:"listenerProcess"`
	// HTTP2Conns is the number of HTTP/2 connections the listens shared
	// (0: each its own HTTP/1.1 connection); HTTP2Coalesce says whether
	// the server gathered each connection's writes.
	HTTP2Conns    int    `json:"http2Conns,omitzero"`
	HTTP2Coalesce bool   `json:"http2Coalesce,omitzero"`
	GoVersion     string `json:"goVersion"`
	GOOS          string `json:"goos"`
	GOARCH        string `json:"goarch"`
	NumCPU        int    `json:"numCPU"`
	GOMAXPROCS    int    `json:"gomaxprocs"`
	// Runs holds, in order: tidings and naive without stalled listens,
	// then (with Stalled set) tidings and naive with them, then (with
	// Gateway set) the gateway without them, then (with Floor and
	// Unparked set) the net/http floor, the kernel's and the unparked
	// server without them; that sequence once per round.
	Runs []Measurement `json:"runs"`
	// Ratios are the median over the rounds of each round's ratios.
	Ratios Ratios `json:"ratios"`
}

// Measurement is one measurement: one server, its listens, its changes.
type Measurement struct {
	Server string `json:"server"`
	// Round is the round the measurement was made in, from 1.
	Round   int `json:"round"`
	Stalled int `json:"stalled"`
	// Healthy is the number of listens that keep reading.
	Healthy int `json:"healthy"`
	// OpenMs is how long opening every listen and reading every ack took
	// (with, in runs that measure memory, the listener side's garbage
	// collections around it).
	OpenMs float64 `json:"openMs"`
	// Changes holds one entry per change made; a run that timed out stops
	// after the change that did.
	Changes []Change `json:"changes"`
	// Completed counts the changes that reached every healthy listen
	// within the timeout.
	Completed int  `json:"completed"`
	TimedOut  bool `json:"timedOut"`
	// Median holds, for the completed changes, the median of each
	// per-change figure; nil when none completed.
	Median *Latency `json:"median,omitempty"`
	// WorstAllDeliveredMs is the slowest completed change.
	WorstAllDeliveredMs float64 `json:"worstAllDeliveredMs"`
	// Unexpected counts messages a healthy listen got that it did not ask
	// for or that carried another listen's id; it must be 0.
	Unexpected int64 `json:"unexpected"`
	// Memory is measured in runs without stalled listens only.
	Memory *Memory `json:"memory,omitempty"`
	// CPUPerChangeMs is the CPU time (user and system) the server's
	// process spent per change while the changes were made: on a machine
	// whose cores the listens' reader shares, what the server costs
	// rather than how long the reader took. It covers the listens'
	// reading too when they are read in the server's process.
	CPUPerChangeMs float64 `json:"cpuPerChangeMs,omitzero"`
	// SocketWritesPerChange is, over HTTP/2, the writes the server made
	// to its sockets while the changes were made, divided by their number.
	SocketWritesPerChange float64 `json:"socketWritesPerChange,omitzero"`
	// SysCPUPerChangeMs is the part of CPUPerChangeMs spent in the kernel.
	SysCPUPerChangeMs float64 `json:"sysCpuPerChangeMs,omitzero"`
}

// Latency is the time from a change until healthy listens received it.
type Latency struct {
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// AllDeliveredMs is the time until the last healthy listen had the
	// change: the same as MaxMs, and absent for a change that timed out.
	AllDeliveredMs float64 `json:"allDeliveredMs,omitzero"`
}

// Change is the outcome of one change.
type Change struct {
	Index int    `json:"index"`
	Op    string `json:"op"` // "add" or "remove" of a tool
	// Delivered counts the healthy listens that received the change
	// within the timeout.
	Delivered int  `json:"delivered"`
	TimedOut  bool `json:"timedOut"`
	Latency
}

// Memory is what one listen costs. Server covers the server's process;
// Listeners covers the reading side when it ran in a child process. When
// the listens were read in the server's own process, Server covers both
// and Listeners is nil.
type Memory struct {
	Covers    string     `json:"covers"`
	Server    Footprint  `json:"server"`
	Listeners *Footprint `json:"listeners,omitempty"`
}

// Ratios compare the project's server with the naive one (tidings
// divided by naive, below 1 is better). A ratio is absent when either
// side has nothing to compare, for example because it timed out.
type Ratios struct {
	AllDelivered float64 `json:"allDelivered,omitzero"`
	P99          float64 `json:"p99,omitzero"`
	// HeapPerListen compares heap in use per listen; HeapCovers says
	// whether that is the server alone or server and listens together.
	HeapPerListen float64 `json:"heapPerListen,omitzero"`
	HeapCovers    string  `json:"heapCovers,omitempty"`
	// AllDeliveredStalled compares the runs with stalled listens.
	AllDeliveredStalled float64 `json:"allDeliveredStalled,omitzero"`
	// StallCost is each server's all-delivered time with stalled listens
	// divided by its time without them.
	StallCostTidings float64 `json:"stallCostTidings,omitzero"`
	StallCostNaive   float64 `json:"stallCostNaive,omitzero"`
	// GatewayAllDelivered and GatewayP99 compare the gateway with the
	// project's server reached directly (gateway divided by tidings): what
	// the hop through the gateway adds.
	GatewayAllDelivered float64 `json:"gatewayAllDelivered,omitzero"`
	GatewayP99          float64 `json:"gatewayP99,omitzero"`
	// The Floor ratios compare the project's server with the net/http
	// floor (tidings divided by floor): the time until every listen had
	// a change, its p99, and the resident memory and goroutines each
	// listen costs the server.
	FloorAllDelivered float64 `json:"floorAllDelivered,omitzero"`
	FloorP99          float64 `json:"floorP99,omitzero"`
	FloorRSSPerListen float64 `json:"floorRSSPerListen,omitzero"`
	FloorGoroutines   float64 `json:"floorGoroutinesPerListen,omitzero"`
	FloorCPUPerChange float64 `json:"floorCPUPerChange,omitzero"`
	// The ServeFloor ratios compare the server as a Go program serves it
	// (streamhttp.Serve, --serve) with the net/http floor over HTTP/1.1.
	ServeFloorAllDelivered float64 `json:"serveFloorAllDelivered,omitzero"`
	ServeFloorP99          float64 `json:"serveFloorP99,omitzero"`
	// The Writes ratios compare the project's server with the kernel's
	// floor (tidings divided by writes); WritesFloorP99 is the kernel's
	// floor divided by the net/http floor: the least p99 against the
	// net/http floor that any server could reach on the machine.
	WritesAllDelivered float64 `json:"writesAllDelivered,omitzero"`
	WritesP99          float64 `json:"writesP99,omitzero"`
	WritesCPUPerChange float64 `json:"writesCPUPerChange,omitzero"`
	WritesFloorP99     float64 `json:"writesFloorP99,omitzero"`
}

// Run carries out the measurements cfg describes. It stops by itself, or
// early when ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	need := 2*cfg.Listeners + fdSlack
	if cfg.ListenerProcess != nil {
		need = cfg.Listeners + fdSlack
	}
	if cfg.HTTP2Conns > 0 {
		need = 2*cfg.HTTP2Conns + fdSlack
	}
	if err := raiseOpenFiles(uint64(need)); err != nil {
		if cfg.ListenerProcess == nil {
			return nil, fmt.Errorf("%d listens read in the server's own process need two sockets each (a listener process needs half as many): %w", cfg.Listeners, err)
		}
		return nil, err
	}
	if cfg.Log != nil {
		// Progress lines and the listener process's stderr interleave.
		cfg.Log = &lockedWriter{w: cfg.Log}
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}

	var side listenerSide = &localSide{}
	if cfg.ListenerProcess != nil {
		cs, err := startChild(cfg.ListenerProcess(ctx), cfg.Log)
		if err != nil {
			return nil, err
		}
		side = cs
	}
	rep := &Report{
		Listeners: cfg.Listeners, Changes: cfg.Changes, Rounds: cfg.Rounds, Stalled: cfg.Stalled,
		TimeoutMs: ms(cfg.Timeout), WriteTimeout: ms(cfg.WriteTimeout),
		ListenerProcess: cfg.ListenerProcess != nil,
		HTTP2Conns:      cfg.HTTP2Conns, HTTP2Coalesce: cfg.HTTP2Conns > 0 && !cfg.HTTP2NoCoalesce,
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	type plan struct {
		server  string
		stalled int
	}
	plans := []plan{{ServerTidings, 0}, {ServerNaive, 0}}
	if cfg.Stalled > 0 {
		plans = append(plans, plan{ServerTidings, cfg.Stalled}, plan{ServerNaive, cfg.Stalled})
	}
	if cfg.Gateway {
		plans = append(plans, plan{ServerGateway, 0})
	}
	if cfg.Floor {
		plans = append(plans, plan{ServerFloor, 0}, plan{ServerWrites, 0})
	}
	if cfg.Unparked {
		plans = append(plans, plan{ServerUnparked, 0})
	}
	if cfg.HTTP2Conns > 0 {
		plans = []plan{{ServerTidingsH2, 0}}
		if cfg.Floor {
			plans = append(plans, plan{ServerFloorH2, 0})
		}
	}
	if cfg.Serve {
		plans = append(plans, plan{ServerServe, 0})
	}
	var err error
	var rounds []Ratios
	seq := 0
rounds:
	for round := 1; round <= cfg.Rounds; round++ {
		first := len(rep.Runs)
		for _, p := range plans {
			seq++
			logf("%s: opening %d listens (%d stalled)%s", p.server, cfg.Listeners, p.stalled, roundOf(round, cfg.Rounds))
			var r *Measurement
			r, err = measure(ctx, cfg, side, seq, p.server, p.stalled)
			if err != nil {
				err = fmt.Errorf("%s with %d stalled listens%s: %w", p.server, p.stalled, roundOf(round, cfg.Rounds), err)
				break rounds
			}
			logf("%s: %d of %d changes reached all %d healthy listens", p.server, r.Completed, cfg.Changes, r.Healthy)
			r.Round = round
			rep.Runs = append(rep.Runs, *r)
		}
		rounds = append(rounds, ratios(rep.Runs[first:]))
	}
	if serr := side.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	rep.Ratios = medianRatios(rounds)
	return rep, nil
}

// roundOf names round r of n for a message, or nothing when there is
// only one.
func roundOf(r, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(", round %d of %d", r, n)
}

// measure runs one server with its listens and changes.
func measure(ctx context.Context, cfg Config, side listenerSide, seq int, name string, stalled int) (_ *Measurement, err error) {
	var tgt target
	switch name {
	case ServerTidings:
		tgt, err = startTidings(cfg.WriteTimeout, streamhttp.WithParking())
	case ServerGateway:
		tgt, err = startGateway(ctx, cfg.WriteTimeout)
	case ServerUnparked:
		tgt, err = startTidings(cfg.WriteTimeout)
	case ServerServe:
		tgt, err = startServe(cfg.WriteTimeout)
	case ServerFloor:
		tgt, err = startFloor()
	case ServerWrites:
		tgt, err = startWrites()
	case ServerTidingsH2:
		tgt, err = startTidingsH2(cfg.WriteTimeout, cfg.HTTP2NoCoalesce)
	case ServerFloorH2:
		tgt, err = startFloorH2()
	default:
		tgt, err = startNaive()
	}
	if err != nil {
		return nil, fmt.Errorf("starting the server: %w", err)
	}
	defer func() {
		// Bounded even when ctx has ended: the listens are closed by now.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		err = errors.Join(err, tgt.close(cctx))
	}()
	addr, stalledAddr := tgt.addrs()
	spec := openSpec{
		Run: seq, Addr: addr, StalledAddr: stalledAddr,
		Listeners: cfg.Listeners, Stalled: stalled, Changes: cfg.Changes,
		OpenTimeoutMs: cfg.OpenTimeout.Milliseconds(),
	}
	if name == ServerTidingsH2 || name == ServerFloorH2 || name == ServerServe {
		spec.HTTP2Conns = cfg.HTTP2Conns
	}
	measureMem := stalled == 0
	child := cfg.ListenerProcess != nil

	// A child gets a little longer than its own open timeout, so that it
	// reports why opening failed.
	octx, cancel := context.WithTimeout(ctx, cfg.OpenTimeout+5*time.Second)
	defer cancel()
	var before memSnap
	if measureMem && child {
		before = snapshot()
	}
	start := time.Now()
	fp, err := side.open(octx, spec, measureMem)
	openTime := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("opening the listens: %w", err)
	}
	run := &Measurement{Server: name, Stalled: stalled, Healthy: cfg.Listeners - stalled, OpenMs: ms(openTime)}
	if measureMem {
		if child {
			srv := footprint(before, snapshot(), cfg.Listeners)
			run.Memory = &Memory{Covers: "server; listens in a child process", Server: srv, Listeners: fp}
		} else if fp != nil {
			run.Memory = &Memory{Covers: "server and listens in one process", Server: *fp}
		}
	}

	counter, counts := tgt.(interface{ socketWrites() int64 })
	var writesBefore int64
	if counts {
		writesBefore = counter.socketWrites()
	}
	sent := make([]int64, 0, cfg.Changes)
	cpuBefore, sysBefore := cpuTime()
	changeErr := func() error {
		for c := range cfg.Changes {
			if err := side.arm(ctx, c); err != nil {
				return err
			}
			t0 := time.Now()
			sent = append(sent, t0.UnixNano())
			if err := tgt.change(ctx, c); err != nil {
				return fmt.Errorf("change %d: %w", c, err)
			}
			ok, err := side.wait(ctx, c, t0.Add(cfg.Timeout))
			if err != nil {
				return err
			}
			if !ok {
				run.TimedOut = true
				return nil
			}
		}
		return nil
	}()
	if n := len(sent); n > 0 {
		if cpu, sys := cpuTime(); cpu > 0 {
			run.CPUPerChangeMs = ms(cpu-cpuBefore) / float64(n)
			run.SysCPUPerChangeMs = ms(sys-sysBefore) / float64(n)
		}
		if counts {
			run.SocketWritesPerChange = float64(counter.socketWrites()-writesBefore) / float64(n)
		}
	}
	recv, bad, err := side.close(ctx)
	if err = errors.Join(changeErr, err); err != nil {
		return nil, err
	}
	run.Unexpected = bad
	summarize(run, sent, recv, cfg.Timeout)
	return run, nil
}

// summarize fills the latency figures of run from when each change was
// made (sent, Unix ns) and when each healthy listen received it.
func summarize(run *Measurement, sent []int64, recv [][]int64, timeout time.Duration) {
	var p50s, p99s, maxes []float64
	for c, t0 := range sent {
		lat := make([]time.Duration, 0, len(recv[c]))
		for _, t := range recv[c] {
			if d := time.Duration(t - t0); t != 0 && d <= timeout {
				lat = append(lat, d)
			}
		}
		slices.Sort(lat)
		ch := Change{Index: c, Op: "add", Delivered: len(lat)}
		if c%2 == 1 {
			ch.Op = "remove"
		}
		if len(lat) > 0 {
			ch.P50Ms = ms(percentile(lat, 50))
			ch.P99Ms = ms(percentile(lat, 99))
			ch.MaxMs = ms(lat[len(lat)-1])
		}
		if len(lat) == run.Healthy {
			ch.AllDeliveredMs = ch.MaxMs
			run.Completed++
			p50s = append(p50s, ch.P50Ms)
			p99s = append(p99s, ch.P99Ms)
			maxes = append(maxes, ch.MaxMs)
			run.WorstAllDeliveredMs = max(run.WorstAllDeliveredMs, ch.MaxMs)
		} else {
			ch.TimedOut = true
		}
		run.Changes = append(run.Changes, ch)
	}
	if len(maxes) > 0 {
		m := median(maxes)
		run.Median = &Latency{P50Ms: median(p50s), P99Ms: median(p99s), MaxMs: m, AllDeliveredMs: m}
	}
}

// percentile is the nearest-rank percentile p of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i, 1)-1]
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// find returns the run of server with the given number of stalled
// listens, if it was made.
func find(runs []Measurement, server string, stalled bool) *Measurement {
	for i := range runs {
		if runs[i].Server == server && (runs[i].Stalled > 0) == stalled {
			return &runs[i]
		}
	}
	return nil
}

// medianRatios is, for each ratio, its median over the rounds that have
// it (a ratio is absent from a round when either side had nothing to
// compare).
func medianRatios(rounds []Ratios) Ratios {
	if len(rounds) == 1 {
		return rounds[0]
	}
	var m Ratios
	for i, dst := range m.figures() {
		var v []float64
		for r := range rounds {
			if x := *rounds[r].figures()[i]; x > 0 {
				v = append(v, x)
			}
		}
		if len(v) > 0 {
			*dst = median(v)
		}
	}
	for _, r := range rounds {
		m.HeapCovers = cmp.Or(m.HeapCovers, r.HeapCovers)
	}
	return m
}

// figures points at every ratio of r.
func (r *Ratios) figures() []*float64 {
	return []*float64{
		&r.AllDelivered, &r.P99, &r.HeapPerListen, &r.AllDeliveredStalled,
		&r.StallCostTidings, &r.StallCostNaive, &r.GatewayAllDelivered, &r.GatewayP99,
		&r.FloorAllDelivered, &r.FloorP99, &r.FloorRSSPerListen, &r.FloorGoroutines, &r.FloorCPUPerChange,
		&r.ServeFloorAllDelivered, &r.ServeFloorP99,
		&r.WritesAllDelivered, &r.WritesP99, &r.WritesCPUPerChange, &r.WritesFloorP99,
	}
}

func ratios(runs []Measurement) Ratios {
	var r Ratios
	div := func(a, b float64) float64 {
		if b <= 0 || a <= 0 {
			return 0
		}
		return a / b
	}
	complete := func(run *Measurement) bool { return run != nil && !run.TimedOut && run.Median != nil }
	t, n := find(runs, ServerTidings, false), find(runs, ServerNaive, false)
	if complete(t) && complete(n) {
		r.AllDelivered = div(t.Median.AllDeliveredMs, n.Median.AllDeliveredMs)
		r.P99 = div(t.Median.P99Ms, n.Median.P99Ms)
	}
	if t != nil && n != nil && t.Memory != nil && n.Memory != nil {
		r.HeapPerListen = div(t.Memory.Server.HeapInuse, n.Memory.Server.HeapInuse)
		r.HeapCovers = t.Memory.Covers
	}
	ts, ns := find(runs, ServerTidings, true), find(runs, ServerNaive, true)
	if complete(ts) && complete(ns) {
		r.AllDeliveredStalled = div(ts.Median.AllDeliveredMs, ns.Median.AllDeliveredMs)
	}
	if complete(ts) && complete(t) {
		r.StallCostTidings = div(ts.Median.AllDeliveredMs, t.Median.AllDeliveredMs)
	}
	if complete(ns) && complete(n) {
		r.StallCostNaive = div(ns.Median.AllDeliveredMs, n.Median.AllDeliveredMs)
	}
	// Over HTTP/2 the floor and the server are both measured as streams.
	fl, ft := find(runs, ServerFloor, false), t
	if fl == nil {
		fl, ft = find(runs, ServerFloorH2, false), find(runs, ServerTidingsH2, false)
	}
	if complete(fl) && complete(ft) {
		r.FloorAllDelivered = div(ft.Median.AllDeliveredMs, fl.Median.AllDeliveredMs)
		r.FloorP99 = div(ft.Median.P99Ms, fl.Median.P99Ms)
		r.FloorCPUPerChange = div(ft.CPUPerChangeMs, fl.CPUPerChangeMs)
	}
	if fl != nil && ft != nil && fl.Memory != nil && ft.Memory != nil {
		r.FloorRSSPerListen = div(ft.Memory.Server.RSS, fl.Memory.Server.RSS)
		r.FloorGoroutines = ft.Memory.Server.Goroutines / fl.Memory.Server.Goroutines
	}
	if sv, fl := find(runs, ServerServe, false), find(runs, ServerFloor, false); complete(sv) && complete(fl) {
		r.ServeFloorAllDelivered = div(sv.Median.AllDeliveredMs, fl.Median.AllDeliveredMs)
		r.ServeFloorP99 = div(sv.Median.P99Ms, fl.Median.P99Ms)
	}
	if wr := find(runs, ServerWrites, false); complete(wr) {
		if complete(t) {
			r.WritesAllDelivered = div(t.Median.AllDeliveredMs, wr.Median.AllDeliveredMs)
			r.WritesP99 = div(t.Median.P99Ms, wr.Median.P99Ms)
			r.WritesCPUPerChange = div(t.CPUPerChangeMs, wr.CPUPerChangeMs)
		}
		if fl := find(runs, ServerFloor, false); complete(fl) {
			r.WritesFloorP99 = div(wr.Median.P99Ms, fl.Median.P99Ms)
		}
	}
	if g := find(runs, ServerGateway, false); complete(g) && complete(t) {
		r.GatewayAllDelivered = div(g.Median.AllDeliveredMs, t.Median.AllDeliveredMs)
		r.GatewayP99 = div(g.Median.P99Ms, t.Median.P99Ms)
	}
	return r
}
