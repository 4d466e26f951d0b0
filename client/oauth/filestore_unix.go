//go:build unix

package oauth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// checkPrivate refuses a store file that group or others may read or
// write.
func checkPrivate(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("oauth: %s holds tokens but has mode %04o, so other users may read it; it is not used until it is private: chmod 600 %s", path, perm, path)
	}
	return nil
}

// lockFile takes an exclusive flock(2) on path, created 0600 if need be,
// waiting for another holder until ctx ends. unlock releases it.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	flock := func(how int) error {
		var ferr error
		if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), how) }); err != nil {
			return err
		}
		return ferr
	}
	// flock(2) cannot be interrupted by a context, so ask without
	// blocking and wait between tries; holders keep it for one small
	// write.
	wait := time.Millisecond
	for {
		err := flock(unix.LOCK_EX | unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = flock(unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
