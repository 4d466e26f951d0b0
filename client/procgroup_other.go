//go:build !unix

package client

import (
	"os"
	"syscall"
)

// ownGroup leaves the server in the client's group: process groups as
// close uses them exist on Unix only.
func ownGroup() *syscall.SysProcAttr { return nil }

// terminate stops the server; without SIGTERM, it is killed at once.
func terminate(p *os.Process) { _ = p.Kill() }

// kill stops the server.
func kill(p *os.Process) { _ = p.Kill() }
