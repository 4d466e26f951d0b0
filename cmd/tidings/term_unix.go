//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalSize reports whether f is a terminal and, if so, its size in
// columns and rows (0 when the terminal does not say). Asking for the
// window size is the test: it fails on pipes, files and /dev/null.
func terminalSize(f *os.File) (cols, rows int, ok bool) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}
