// Package sse writes and reads Server-Sent Events as MCP's Streamable HTTP
// transport uses them: one JSON-RPC message per event, comments as
// keep-alives, no event ids (2026-07-28 has no resumption).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// AppendEvent appends one "message" event carrying data to dst. Data that
// contains line breaks is split over several data lines, so a conforming
// reader gets the payload back with each line break (CR, LF or CRLF) as
// LF; SSE cannot carry a bare CR. JSON keeps its meaning, since raw line
// breaks in JSON text can only be whitespace between tokens.
func AppendEvent(dst, data []byte) []byte {
	dst = append(dst, "event: message\n"...)
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		dst = append(dst, "data: "...)
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// AppendComment appends a comment line, which readers ignore. Servers send
// one periodically so that idle streams are not cut by proxies.
func AppendComment(dst []byte, text string) []byte {
	dst = append(dst, ':')
	if text != "" {
		dst = append(dst, ' ')
		dst = append(dst, text...)
	}
	return append(dst, '\n', '\n')
}

// Event is one parsed event.
type Event struct {
	// Name is the event field ("message" for every MCP event), or empty
	// when the event had none.
	Name string
	// ID is the id field; 2026-07-28 servers send none, since there is no
	// resumption, but a 2025-11-25 server may.
	ID string
	// Data is the event's data lines joined by LF.
	Data []byte
}

// ErrTooLarge is returned when an event exceeds the reader's limit.
var ErrTooLarge = errors.New("sse: event too large")

// Reader parses an event stream.
type Reader struct {
	r   *bufio.Reader
	max int
	// skipLF is set after a line ended in CR: an LF that follows belongs
	// to that line break. Deciding lazily keeps a complete event from
	// waiting on the next byte of a live stream.
	skipLF bool
	// line is readLine's buffer, reused from line to line: a line is
	// looked at, and its value copied, before the next is read.
	line []byte
}

// NewReader returns a Reader over r that refuses events larger than max
// bytes (max <= 0 means 16 MiB).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = 16 << 20
	}
	return &Reader{r: bufio.NewReaderSize(r, 4096), max: max}
}

// Next returns the next event that carries data. Comments and empty
// events are skipped. The size limit applies to each event's field lines
// alone: comments and the blank lines between events are not counted, so
// keep-alives on a long idle stream never add up to ErrTooLarge. An event
// is dispatched only once a blank line ends it; at end of stream a
// partial event is discarded and Next returns io.ErrUnexpectedEOF, or
// io.EOF when nothing was pending.
func (r *Reader) Next() (Event, error) {
	var ev Event
	var data []byte
	hasData := false
	pending := false // a field line of the current event has been read
	size := 0
	for {
		line, err := r.readLine(r.max)
		if err != nil {
			if err == io.EOF && pending {
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				ev.Data = data
				return ev, nil
			}
			ev, pending, size = Event{}, false, 0
			continue
		}
		if line[0] == ':' {
			continue
		}
		size += len(line)
		if size > r.max {
			return Event{}, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, r.max)
		}
		pending = true
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			ev.Name = string(value)
		case "id":
			ev.ID = string(value)
		}
	}
}

// maxKeptLine bounds the line buffer a Reader keeps between lines, so
// that one huge line does not stay pinned for the stream's life.
const maxKeptLine = 64 << 10

// readLine reads one line without its terminator (LF, CR or CRLF). A
// line cut short by the end of the stream is returned as it is; the next
// call reports io.EOF. The line is valid until the next call.
func (r *Reader) readLine(limit int) ([]byte, error) {
	line := r.line[:0]
	defer func() {
		if cap(line) <= maxKeptLine {
			r.line = line[:0]
		}
	}()
	for {
		b, err := r.r.ReadByte()
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
		if r.skipLF {
			r.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return line, nil
		case '\r':
			r.skipLF = true
			return line, nil
		}
		if len(line) >= limit {
			return nil, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, r.max)
		}
		line = append(line, b)
	}
}
