package gateway

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// laxURI is what a lenient upstream makes of a resource URI before it
// looks the resource up: the RFC 3986 normalizations (case of the scheme
// and host, escapes of unreserved bytes decoded, dot segments removed)
// and the sloppier ones servers are known for (escaped and back slashes
// as separators, empty segments collapsed, the fragment, the query and a
// trailing slash dropped, "file://localhost/" as "file:///").
func laxURI(uri string) string {
	uri, _, _ = strings.Cut(uri, "#")
	uri, _, _ = strings.Cut(uri, "?")
	var b strings.Builder
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if c == '%' && i+2 < len(uri) && isHex(uri[i+1]) && isHex(uri[i+2]) {
			d := unhex(upper(uri[i+1]))<<4 | unhex(upper(uri[i+2]))
			if d >= 'a' && d <= 'z' || d >= 'A' && d <= 'Z' || d >= '0' && d <= '9' || strings.IndexByte("-._~/\\", d) >= 0 {
				c = d
				i += 2
			} else {
				b.WriteString(strings.ToUpper(uri[i : i+3]))
				i += 2
				continue
			}
		}
		if c == '\\' {
			c = '/'
		}
		b.WriteByte(c)
	}
	uri = b.String()
	scheme, rest, ok := strings.Cut(uri, ":")
	if !ok {
		return uri
	}
	scheme = strings.ToLower(scheme)
	host := ""
	hasHost := false
	if r, ok := strings.CutPrefix(rest, "//"); ok {
		hasHost = true
		host, rest, _ = strings.Cut(r, "/")
		rest = "/" + rest
		host = strings.ToLower(host)
		if scheme == "file" && host == "localhost" {
			host = ""
		}
	}
	if rest != "" {
		cleaned := path.Clean(rest)
		if cleaned == "." {
			cleaned = ""
		}
		rest = cleaned
		if hasHost && rest == "/" {
			rest = ""
		}
	}
	if hasHost {
		return scheme + "://" + host + rest
	}
	return scheme + ":" + rest
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// LaxURI is laxURI for the package's external tests.
var LaxURI = laxURI

func TestCheckSpelling(t *testing.T) {
	for _, uri := range []string{
		"file:///d1/secret.txt", "file:///", "file:///dir/", "mem://doc", "mem:doc", "https://example.com/a?b=c",
		"file:///My%20Docs/a.txt", "file:///%E2%82%AC", "file:///a%25b", "urn:x:y",
	} {
		if err := checkSpelling(uri); err != nil {
			t.Errorf("%s: %v", uri, err)
		}
	}
	for uri, want := range map[string]string{
		"d1/secret.txt":            "no scheme",
		"file:///./d1/secret.txt":  `"." segment`,
		"file:///x/../secret.txt":  `".." segment`,
		"file:///d1//secret.txt":   "empty segment",
		"file:///d1/s%65cret.txt":  `%65 stands for "e"`,
		"file:///d1%2Fsecret.txt":  "path separator",
		"file:///d1%2fsecret.txt":  "lower-case hex",
		"file:///d1\\secret.txt":   "backslash",
		"FILE:///d1/secret.txt":    "scheme has capitals",
		"file://LOCALHOST/a":       "host",
		"file:///d1/secret.txt#x":  "fragment",
		"file:///a b":              "space",
		"file:///a%zz":             "does not start an escape",
		"file:///s%2565cret.txt":   "decodes twice",
		"file:///d1/secret.txt%2E": `stands for "."`,
	} {
		err := checkSpelling(uri)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", uri, err, want)
		}
	}
}

func TestURIVariants(t *testing.T) {
	got := uriVariants("file://localhost/d1/x/?q=1")
	want := []string{"file://localhost/d1/x/?q=1", "file:///d1/x/?q=1", "file:///d1/x/", "file:///d1/x"}
	if !slices.Equal(got, want) {
		t.Fatalf("variants %q, want %q", got, want)
	}
	if !excludesURI([]string{"file:///d1/*"}, "file://localhost/d1/secret.txt/?v=2") {
		t.Fatal("an exclude of file:///d1/* lets a spelling of one of its URIs through")
	}
}

// FuzzCheckSpelling holds the spelling check to its promise: a URI it
// lets through means the same to a lenient upstream as to the globs —
// laxURI leaves it as it is, or makes it one of the variants the
// excludes are matched against.
func FuzzCheckSpelling(f *testing.F) {
	for _, s := range []string{"file:///d1/secret.txt", "file:///d1/./s", "file:////x", "file:///%41", "file:///a%2F",
		"FILE:///a", "file://localhost/a/", "mem://Doc/x?y#z", "a:b/../c", "x:%25%36%35", "file:///a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		if checkSpelling(uri) != nil {
			return
		}
		if lax := laxURI(uri); !slices.Contains(uriVariants(uri), lax) {
			t.Fatalf("%q passes the spelling check, but a lenient server reads it as %q, which no rule is matched against (%q)",
				uri, lax, uriVariants(uri))
		}
	})
}
