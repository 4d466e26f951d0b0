package brokerkit

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The errors of a task store, which package bus exports under the same
// names.
var (
	ErrNoTask       = errors.New("bus: no such task")
	ErrTaskExists   = errors.New("bus: the task id is taken")
	ErrTaskConflict = errors.New("bus: the task changed meanwhile")
)

// MaxTaskRecord bounds a record. A NATS server takes messages of at most
// 1 MiB by default (max_payload), headers included; 4 KiB of it are left
// for the store's own framing and headers, so that every record a store
// accepts fits there. Redis takes far more, but a server tested on Redis
// must not store what a NATS deployment would refuse, and a record is
// read whole on every poll of the task: results larger than this belong
// elsewhere.
const MaxTaskRecord = 1<<20 - 4<<10

// MaxTaskID bounds a task id, in a store as on the wire; the server's
// are far shorter.
const MaxTaskID = 256

// BadTaskID says what is wrong with id, or "" when a store accepts it:
// 1 to MaxTaskID bytes of RFC 3986's unreserved characters. Every backend
// stores the same ids, and none needs quoting in a Redis key or, but for
// '.' and '~', in a NATS subject.
func BadTaskID(id string) string {
	switch {
	case id == "":
		return "the id is empty"
	case len(id) > MaxTaskID:
		return fmt.Sprintf("the id is %d bytes long, more than %d", len(id), MaxTaskID)
	case strings.ContainsFunc(id, func(r rune) bool { return !unreserved(r) }):
		return fmt.Sprintf("id %.40q holds a character other than letters, digits and \"-._~\"", id)
	}
	return ""
}

// unreserved reports whether r is one of RFC 3986's unreserved characters.
func unreserved(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '-' || r == '.' || r == '_' || r == '~'
}

// CheckTaskID is ErrNoTask, with the reason, for an id no store accepts:
// no task can have it. Get calls it before anything is sent.
func CheckTaskID(id string) error {
	if why := BadTaskID(id); why != "" {
		return fmt.Errorf("%w: %s", ErrNoTask, why)
	}
	return nil
}

// CheckTask checks what is about to be written, by op ("create" or
// "update"), before anything is sent. Create refuses a bad id with an
// error of its own, not ErrNoTask; Update reports ErrNoTask for it, as
// Get does.
func CheckTask(op, id string, rec []byte) error {
	if why := BadTaskID(id); why != "" {
		if op == "create" {
			return fmt.Errorf("bus: create task: %s", why)
		}
		return fmt.Errorf("%w: %s", ErrNoTask, why)
	}
	if len(rec) > MaxTaskRecord {
		return fmt.Errorf("bus: %s task %q: the record is %d bytes, more than the limit of %d", op, id, len(rec), MaxTaskRecord)
	}
	return nil
}

// maxMilli is the last millisecond of year 9999: later expiries are kept
// to it, within what Redis and time.Time both count.
const maxMilli = 253402300799999

// CeilMilli is t in Unix milliseconds, rounded up, so that a record
// stored to the millisecond never ends before the expiry it was given,
// and kept within 1 (long past: the record is dropped at once) and the
// last millisecond of year 9999, so that Redis never refuses it.
func CeilMilli(t time.Time) int64 {
	if t.Year() < 1970 {
		return 1
	}
	if t.Year() > 9999 {
		return maxMilli
	}
	ms := t.UnixMilli()
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ms++
	}
	return max(ms, 1)
}
