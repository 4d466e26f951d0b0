package oauth

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
)

// maxPasted bounds a pasted line. An authorization response is a code,
// a state and an issuer; anything this long is not one.
const maxPasted = 16 << 10

// Prompt is the Interaction of a host with no browser on its machine
// (a remote shell, a container): it prints the authorization URL for the
// user to open wherever they have a browser, and asks them to paste back
// the address that browser was redirected to. The redirect URI names a
// place nothing listens on, so the page fails to load, but its address
// (in the address bar) carries the code.
//
// Lines are read from in by one goroutine, started at the first
// Authorize, that reads only while an Authorize waits for a line. A line
// is given to the Authorize waiting when it ends, and dropped when none
// is. The goroutine ends when in reports an error or end of input, or at
// Close once its Read in progress returns; a reader that never returns
// (a terminal nobody types into) keeps it until the process ends, which
// is why Prompt suits a command-line host's stdin and little else.
type Prompt struct {
	redirectURI string
	redirect    *url.URL
	redirectErr error
	in          io.Reader
	out         io.Writer

	start     sync.Once
	wake      chan struct{} // asks the reader for a line
	stop      chan struct{} // closed by Close
	stopOnce  sync.Once
	readerEnd chan struct{} // closed when the reader goroutine returns

	mu      sync.Mutex
	busy    bool            // an Authorize is running
	waiter  chan pastedLine // where the next line goes; nil: nobody waits
	readErr error           // why the reader ended

	// dropped, when set (by tests), is called after a line is dropped
	// because no Authorize waited for it.
	dropped func()
}

// pastedLine is one line read, or why none could be.
type pastedLine struct {
	text string
	err  error
}

// errLineTooLong reports a line longer than maxPasted; the reader goes on
// with the next one.
var errLineTooLong = errors.New("the line is too long")

// NewPrompt returns a Prompt for redirectURI (the one registered with
// the authorization server; the browser is sent there) that prints to
// out and reads the pasted address from in. A redirectURI that is not an
// absolute URL makes every Authorize fail.
func NewPrompt(redirectURI string, in io.Reader, out io.Writer) *Prompt {
	p := &Prompt{
		redirectURI: redirectURI,
		in:          in,
		out:         out,
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		readerEnd:   make(chan struct{}),
	}
	u, err := url.Parse(redirectURI)
	switch {
	case err != nil:
		p.redirectErr = fmt.Errorf("oauth: prompt: redirect URI: %w", err)
	case u.Scheme == "" || u.Host == "":
		p.redirectErr = fmt.Errorf("oauth: prompt: redirect URI %q is not absolute", redirectURI)
	default:
		p.redirect = u
	}
	return p
}

// RedirectURI is the redirect URI given to NewPrompt.
func (p *Prompt) RedirectURI() string { return p.redirectURI }

// Authorize prints authURL and asks for the address the browser was
// sent to, asking again after a line that is not an authorization
// response for RedirectURI (an empty line, another address, one without
// a code or an error). It returns that address's query as it came. It
// fails at once if another Authorize is running, and when ctx ends, the
// Prompt is closed, or the input ends first.
func (p *Prompt) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	if p.redirectErr != nil {
		return nil, p.redirectErr
	}
	if err := checkAuthURL(authURL); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.busy {
		p.mu.Unlock()
		return nil, errors.New("oauth: prompt: another authorization is already waiting for its address")
	}
	p.busy = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.busy, p.waiter = false, nil
		p.mu.Unlock()
	}()
	select {
	case <-p.stop:
		return nil, errPromptClosed
	default:
	}
	p.start.Do(func() { go p.read() })

	// Each message is printed once the line that answers it has a place
	// to go, so nothing typed after it is dropped.
	msg := fmt.Sprintf("Open this address in a browser to authorize: %s\n"+
		"Then paste here the address the browser was sent to (it starts with %s and may fail to load): ",
		authURL, p.redirectURI)
	for {
		got := make(chan pastedLine, 1)
		p.mu.Lock()
		p.waiter = got
		select {
		case p.wake <- struct{}{}:
		default: // the reader is reading already
		}
		p.mu.Unlock()
		if msg != "" {
			if _, err := io.WriteString(p.out, msg); err != nil {
				return nil, fmt.Errorf("oauth: prompt: printing: %w", err)
			}
		}

		var line pastedLine
		select {
		case line = <-got:
		case <-ctx.Done():
			fmt.Fprintln(p.out)
			return nil, fmt.Errorf("oauth: prompt: waiting for the address: %w", ctx.Err())
		case <-p.stop:
			return nil, errPromptClosed
		case <-p.readerEnd:
			select {
			case line = <-got: // delivered just before it ended
			default:
				return nil, p.endErr()
			}
		}
		if line.err != nil && !errors.Is(line.err, errLineTooLong) {
			return nil, fmt.Errorf("oauth: prompt: reading the address: %w", line.err)
		}
		err := line.err
		if err == nil {
			var q url.Values
			if q, err = parsePasted(p.redirect, line.text); err == nil {
				return q, nil
			}
		}
		msg = ""
		if !errors.Is(err, errNothingPasted) {
			msg = fmt.Sprintf("That will not do: %v. Paste the address that starts with %s: ", err, p.redirectURI)
		}
	}
}

var errPromptClosed = errors.New("oauth: prompt: closed")

// endErr is why the reader ended, for an Authorize that found it gone.
func (p *Prompt) endErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("oauth: prompt: reading the address: %w", p.readErr)
}

// Close ends a waiting Authorize and makes later ones fail; the reader
// goroutine ends once its Read in progress, if any, returns. in is not
// closed: it is the caller's.
func (p *Prompt) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	return nil
}

// read is the reader goroutine: one line per wake, handed to whoever
// waits when it is complete.
func (p *Prompt) read() {
	defer close(p.readerEnd)
	br := bufio.NewReader(p.in)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		text, err := readLine(br, maxPasted)
		end := err != nil && !errors.Is(err, errLineTooLong)
		line := pastedLine{text: text, err: err}
		if end && text != "" {
			line.err = nil // a last line without a newline still counts
		}
		p.mu.Lock()
		w := p.waiter
		p.waiter = nil
		// This line answers the wake of whoever receives it; a wake
		// left over would read a line nobody asked for.
		select {
		case <-p.wake:
		default:
		}
		if end {
			p.readErr = err
		}
		p.mu.Unlock()
		if w != nil {
			w <- line // buffered, and sent to once
		} else if p.dropped != nil {
			p.dropped()
		}
		if end {
			return
		}
	}
}

// readLine reads one line without its line ending. A line longer than
// max is read to its end and reported as errLineTooLong.
func readLine(br *bufio.Reader, max int) (string, error) {
	var b []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(b)+len(chunk) > max+2 { // room for "\r\n"
			long = true
		} else {
			b = append(b, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			if err == nil {
				err = errLineTooLong
			}
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), err
	}
}

// errNothingPasted is an empty line: asked again without complaint.
var errNothingPasted = errors.New("nothing pasted")

// parsePasted checks that pasted is an address under redirect (same
// scheme, host, port and path) that carries an authorization response
// (code or error), and returns its query.
func parsePasted(redirect *url.URL, pasted string) (url.Values, error) {
	s := strings.TrimSpace(pasted)
	if s == "" {
		return nil, errNothingPasted
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("it is not a URL")
	}
	if !strings.EqualFold(u.Scheme, redirect.Scheme) || !sameHost(u, redirect) || pathOf(u) != pathOf(redirect) {
		return nil, errors.New("it is not an address under the redirect URI")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, errors.New("its query is malformed")
	}
	if !q.Has("code") && !q.Has("error") {
		return nil, errors.New("it carries no code or error")
	}
	return q, nil
}

// sameHost compares host names without regard to case, and ports with
// the scheme's default filled in.
func sameHost(a, b *url.URL) bool {
	if a.User != nil || !strings.EqualFold(a.Hostname(), b.Hostname()) {
		return false
	}
	return portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

func pathOf(u *url.URL) string {
	if u.Path == "" {
		return "/"
	}
	return u.Path
}

var _ Interaction = (*Prompt)(nil)
