package main

import "golang.org/x/sys/unix"

// The termios requests of this system.
const (
	ioctlGetTermios = unix.TCGETS
	ioctlSetTermios = unix.TCSETS
)
