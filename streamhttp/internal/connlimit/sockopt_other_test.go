//go:build !unix

package connlimit_test

import "syscall"

// smallReceiveBuffer leaves the buffer alone where it is not a socket
// option of this kind; the tests' answers are large enough to stall a
// default one.
func smallReceiveBuffer(_, _ string, _ syscall.RawConn) error { return nil }
