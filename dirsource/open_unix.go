//go:build unix

package dirsource

import "syscall"

// openFlags are the flags every file is opened with. O_NONBLOCK makes the
// open itself return at once even if a named pipe or device was swapped in
// after the type check; it has no effect on regular files or directories.
const openFlags = syscall.O_RDONLY | syscall.O_NONBLOCK
