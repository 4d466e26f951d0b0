package dirsource

import (
	"bytes"
	"fmt"
	"mime"
	"net/url"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// fileURI returns the canonical file URI of an absolute, clean path. The
// same spelling is used for listing, reading and notifying, because
// clients match resources/updated against the URI they subscribed to
// byte for byte.
func fileURI(abs string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive path, C:/x → /C:/x
	}
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// pathFromURI returns the absolute path a file URI names. Only the
// canonical spelling that fileURI produces is accepted: an alias (other
// percent-encoding, "localhost" host, "." or ".." segments, a query) would
// read a file under a URI that never receives its change notifications.
func pathFromURI(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Opaque != "" || u.User != nil || u.Host != "" ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || !strings.HasPrefix(u.Path, "/") {
		return "", false
	}
	p := u.Path
	if runtime.GOOS == "windows" {
		p = strings.TrimPrefix(p, "/")
	}
	abs := filepath.FromSlash(p)
	if filepath.Clean(abs) != abs || fileURI(abs) != uri {
		return "", false
	}
	return abs, true
}

// cleanRel validates a slash-separated path relative to the root, as
// tools receive it. "" and "." name the root itself (returned as "").
// Absolute paths, ".." and hidden components are refused.
func cleanRel(p string) (string, bool) {
	if p == "" {
		return "", true
	}
	if strings.ContainsRune(p, 0) || strings.Contains(p, `\`) || path.IsAbs(p) {
		return "", false
	}
	p = path.Clean(p)
	if p == "." {
		return "", true
	}
	if hidden(p) {
		return "", false
	}
	return p, true
}

// hidden reports whether any component of a slash-separated relative path
// starts with a dot. That covers ".." too, so a path that passes never
// climbs out of the root lexically.
func hidden(rel string) bool {
	for c := range strings.SplitSeq(rel, "/") {
		if c == "" || c[0] == '.' {
			return true
		}
	}
	return false
}

// mimeType guesses a file's media type from its extension, and for names
// without a known extension from the first bytes of its content.
func mimeType(name string, head []byte) string {
	if t := mime.TypeByExtension(filepath.Ext(name)); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil {
			return mt
		}
		return t
	}
	if looksText(head, true) {
		return "text/plain"
	}
	return "application/octet-stream"
}

// looksText reports whether b is UTF-8 without NUL bytes. With partial
// set, b may be a prefix cut in the middle of a character.
func looksText(b []byte, partial bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	if partial {
		// Drop an incomplete final character (at most 3 bytes).
		for i := 1; i <= 3 && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	return utf8.Valid(b)
}

// displayName returns a slash-separated path as valid UTF-8 text, for
// resource names, tool results and descriptions, which JSON carries as
// text. Linux allows any bytes but "/" and NUL in a name, and a name that
// is not UTF-8 (a Latin-1 "café" from an old archive) cannot be put in
// JSON as it is. Such a component is shown with every byte that is not
// part of a UTF-8 character written %XX, and "%" itself written %25, so
// that the text says which bytes are there and pathFromDisplay can go
// back; a component that is valid UTF-8 is shown unchanged. URIs never
// use this form: they percent-encode the exact bytes.
func displayName(p string) string {
	if utf8.ValidString(p) {
		return p
	}
	var b strings.Builder
	for i, c := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if utf8.ValidString(c) {
			b.WriteString(c)
			continue
		}
		for len(c) > 0 {
			r, n := utf8.DecodeRuneInString(c)
			switch {
			case r == utf8.RuneError && n == 1:
				fmt.Fprintf(&b, "%%%02X", c[0])
			case r == '%':
				b.WriteString("%25")
			default:
				b.WriteString(c[:n])
			}
			c = c[n:]
		}
	}
	return b.String()
}

// componentFromDisplay undoes displayName for one component of a path a
// client read from a tool result and passes back: %25 and the escapes of
// bytes 80 to FF are decoded, when that yields a name that is not UTF-8
// (which displayName would have shown so). It reports false when that
// does not apply. A valid name can read like such an escape (a file
// literally named "caf%E9.txt"), so the name as given is looked up first;
// see Source.fromShown.
func componentFromDisplay(c string) (string, bool) {
	var b []byte
	for i := 0; i < len(c); i++ {
		if c[i] == '%' && i+2 < len(c) {
			if v, err := strconv.ParseUint(c[i+1:i+3], 16, 8); err == nil && (v == '%' || v >= 0x80) {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, c[i])
	}
	if utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}
