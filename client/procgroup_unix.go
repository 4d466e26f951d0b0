//go:build unix

package client

import (
	"os"
	"syscall"
)

// ownGroup starts a server as the leader of a new process group.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// terminate asks the server's process group to stop.
func terminate(p *os.Process) { signalGroup(p, syscall.SIGTERM) }

// kill stops the server's process group.
func kill(p *os.Process) { signalGroup(p, syscall.SIGKILL) }

// signalGroup signals the group p leads, falling back to p alone (the
// group may be gone while p itself is not yet reaped).
func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
