//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// openKeys opens the controlling terminal to read single key presses:
// without echo or line editing, but with signals, so Ctrl-C still ends
// the watch through SIGINT. The keys arrive on the channel; stop puts the
// terminal back as it was, ends the reader and waits for it.
//
// /dev/tty is opened anew rather than reading stdin: the file is then
// the view's own, so closing it ends a pending read (the runtime polls
// terminals), and stdin may be redirected while the view still draws.
func openKeys() (keys <-chan byte, stop func(), err error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the terminal for keys: %w", err)
	}
	// Not tty.Fd(): that would put the file in blocking mode, and Close
	// would no longer end a pending Read.
	rc, err := tty.SyscallConn()
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("opening the terminal for keys: %w", err)
	}
	termios := func(f func(fd int) error) error {
		var ferr error
		if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
			return err
		}
		return ferr
	}
	var old *unix.Termios
	if err := termios(func(fd int) (err error) {
		old, err = unix.IoctlGetTermios(fd, ioctlGetTermios)
		return err
	}); err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("reading the terminal mode: %w", err)
	}
	raw := *old
	raw.Lflag &^= unix.ECHO | unix.ICANON
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := termios(func(fd int) error { return unix.IoctlSetTermios(fd, ioctlSetTermios, &raw) }); err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("setting the terminal mode: %w", err)
	}
	ch := make(chan byte, 16)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 16)
		for {
			n, err := tty.Read(buf)
			for _, b := range buf[:n] {
				select {
				case ch <- b:
				case <-done:
					return
				}
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = termios(func(fd int) error { return unix.IoctlSetTermios(fd, ioctlSetTermios, old) })
			close(done)
			tty.Close()
			wg.Wait()
		})
	}
	return ch, stop, nil
}
