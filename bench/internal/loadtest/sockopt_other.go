//go:build !(linux || darwin)

package loadtest

import "syscall"

// smallReceiveBuffer leaves the receive buffer alone where setting it
// before connecting is not supported; stalled listens then take longer to
// fill.
func smallReceiveBuffer(string, string, syscall.RawConn) error { return nil }
