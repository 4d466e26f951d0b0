//go:build !linux

package parked

import (
	"net"

	"tidings/internal/engine"
)

// Parker is unavailable without epoll: New returns nil.
type Parker struct{}

// New returns nil: listens keep their own goroutines here.
func New(Config) *Parker { return nil }

// Park never takes a listen here.
func (p *Parker) Park(net.Conn, *engine.ParkedListen) error { return errNoSocket }

// Len is 0 here.
func (p *Parker) Len() int { return 0 }
