//go:build linux || darwin

package loadtest

import (
	"syscall"
)

// smallReceiveBuffer is a net.Dialer Control function that sets a
// socket's receive buffer before it connects, so that the window it
// advertises from the start is small. Shrinking the buffer of a connected
// socket leaves the window it already advertised in place, and the
// kernel then drops what does not fit, which turns into retransmission
// timeouts.
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stalledBuffer)
	})
	if err != nil {
		return err
	}
	return serr
}
