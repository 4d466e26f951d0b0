//go:build unix

package connlimit_test

import "syscall"

// smallReceiveBuffer is a net.Dialer Control function that shrinks a
// socket's receive buffer before it connects, so that a client that never
// reads stalls the server's writes after a few kilobytes. Shrinking it
// after the connection is up would leave the larger window already
// advertised.
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
	if err != nil {
		return err
	}
	return serr
}
