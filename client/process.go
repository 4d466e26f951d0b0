package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"tidings/jsonrpc"
)

// stdioTransport is a server subprocess and the connection on its stdin
// and stdout.
type stdioTransport struct {
	*stdioConn
	cmd       *exec.Cmd
	exited    chan struct{}
	grace     time.Duration
	closeOnce sync.Once
	// started is when the process started; ended, guarded by emu, when it
	// stopped serving (its stdout ended or it exited, whichever came
	// first): the crash-loop guard judges a life by the two.
	started time.Time
	emu     sync.Mutex
	ended   time.Time
}

// noteEnd records when the process stopped serving, once.
func (t *stdioTransport) noteEnd() {
	t.emu.Lock()
	if t.ended.IsZero() {
		t.ended = time.Now()
	}
	t.emu.Unlock()
}

// lifespan is how long the process served; only meaningful after done.
func (t *stdioTransport) lifespan() time.Duration {
	t.emu.Lock()
	defer t.emu.Unlock()
	return t.ended.Sub(t.started)
}

// exitWait bounds how long exitState waits for a process whose output
// ended to exit.
const exitWait = time.Second

// exitState says how the process ended ("exit status 3", "signal:
// killed"), waiting up to exitWait for it once its output has ended; ""
// if it has not exited by then.
func (t *stdioTransport) exitState() string {
	timer := time.NewTimer(exitWait)
	defer timer.Stop()
	select {
	case <-t.exited:
		return t.cmd.ProcessState.String()
	case <-timer.C:
		return ""
	}
}

// startStdio starts the server. ctx bounds the start only (see
// NewCommand): the process runs until close. It gets a process group of
// its own where the platform has them, so that close can stop whatever it
// started too; without that, a helper that inherited its stdout or stderr
// would keep close waiting.
func startStdio(ctx context.Context, name string, args []string, env []string, stderr io.Writer, onOther func(*jsonrpc.Message), maxMsg int) (*stdioTransport, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: start %s: %w", name, err)
	}
	const grace = 2 * time.Second
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = ownGroup()
	// Once the process has exited, stop waiting for output a survivor
	// still holds open.
	cmd.WaitDelay = grace
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if stderr != nil { // else the null device: no pipe, no copier
		cmd.Stderr = stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("client: start %s: %w", name, err)
	}
	t := &stdioTransport{cmd: cmd, exited: make(chan struct{}), grace: grace, started: time.Now()}
	// stdout is closed by Wait once the process has exited (see WaitDelay).
	t.stdioConn = newStdioConn(stdout, stdin, nil, maxMsg, onOther, t.noteEnd)
	go func() {
		_ = cmd.Wait()
		t.noteEnd()
		close(t.exited)
	}()
	return t, nil
}

// close shuts the server down the way stdio servers expect: close its
// stdin, wait, then SIGTERM, wait, then SIGKILL, the signals going to the
// server's whole process group where there is one.
func (t *stdioTransport) close() error {
	t.closeOnce.Do(func() {
		t.closeWrite()
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		terminate(t.cmd.Process)
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		kill(t.cmd.Process)
		<-t.exited
	})
	<-t.done
	return nil
}
