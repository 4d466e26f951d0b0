//go:build !unix

package dirsource

import "os"

// openFlags are the flags every file is opened with. Systems outside unix
// have no named pipes that an open could block on in the same way; the
// type check before the open is what guards them.
const openFlags = os.O_RDONLY
