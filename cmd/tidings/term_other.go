//go:build !unix

package main

import "os"

// terminalSize reports whether f is a terminal; the size is unknown here,
// so the view is drawn without bounds.
func terminalSize(f *os.File) (cols, rows int, ok bool) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, false
	}
	return 0, 0, st.Mode()&os.ModeCharDevice != 0
}
