//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

import "errors"

// openKeys is not available here: the live view is drawn without keys.
func openKeys() (keys <-chan byte, stop func(), err error) {
	return nil, nil, errors.New("reading keys is not supported on this system")
}
