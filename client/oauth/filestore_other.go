//go:build !unix

package oauth

import (
	"context"
	"io/fs"
)

// checkPrivate accepts any file: permission bits say nothing of who may
// read a file here.
func checkPrivate(string, fs.FileInfo) error { return nil }

// lockFile takes no lock between processes here; the FileStore's own
// turn still orders its goroutines.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }

// syncDir has nothing to do where a directory cannot be synced.
func syncDir(string) error { return nil }
