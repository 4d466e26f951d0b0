package natsbus

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestParseSeeds: a URL lists one seed or several, whole, and gives the
// subject and the replica count once, after the last; every seed is
// dialled with the first seed's user and password, and the URL shown in
// errors has none.
func TestParseSeeds(t *testing.T) {
	for _, c := range []struct {
		url      string
		servers  []string
		subject  string
		replicas int
		redacted string
	}{
		{"nats://127.0.0.1:4222", []string{"nats://127.0.0.1:4222"}, "tidings", 0, "nats://127.0.0.1:4222"},
		{"nats://u:secret@a:1/s.t?replicas=3", []string{"nats://u:secret@a:1"}, "s.t", 3, "nats://u:xxxxx@a:1/s.t?replicas=3"},
		{"nats://a:1,nats://b:2,nats://c:3", []string{"nats://a:1", "nats://b:2", "nats://c:3"}, "tidings", 0,
			"nats://a:1,nats://b:2,nats://c:3"},
		{"nats://u:secret@a:1, nats://b:2,nats://u:secret@c:3/s?replicas=1",
			[]string{"nats://u:secret@a:1", "nats://u:secret@b:2", "nats://u:secret@c:3"}, "s", 1,
			"nats://u:xxxxx@a:1,nats://b:2,nats://u:xxxxx@c:3/s?replicas=1"},
		{"tls://tok@a:1,tls://b:2/s", []string{"tls://tok@a:1", "tls://tok@b:2"}, "s", 0, "tls://tok@a:1,tls://b:2/s"},
		{"nats://u:a%2Cb@a:1,nats://b:2", []string{"nats://u:a,b@a:1", "nats://u:a,b@b:2"}, "tidings", 0,
			"nats://u:xxxxx@a:1,nats://b:2"},
	} {
		e, err := parse(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(e.servers, c.servers) || e.subject != c.subject || e.replicas != c.replicas || e.redacted != c.redacted {
			t.Errorf("%s: servers %q, subject %q, replicas %d, shown as %q; want %q, %q, %d, %q",
				c.url, e.servers, e.subject, e.replicas, e.redacted, c.servers, c.subject, c.replicas, c.redacted)
		}
	}
}

// TestParseRefusesSeeds: a list of seeds that could be read more than one
// way, or not at all, is refused with an error that says what to write,
// and never shows the password, nor a piece of one a comma cut off.
func TestParseRefusesSeeds(t *testing.T) {
	for url, want := range map[string]string{
		"nats://a:1/s,nats://b:2/s":                   "seed 1 of 2: a subject or parameters before the last seed",
		"nats://a:1?replicas=3,nats://b:2":            "seed 1 of 2: a subject or parameters before the last seed",
		"nats://a:1,tls://b:2":                        "seed 2 of 2: the seeds mix nats:// and tls://",
		"nats://u:secret@a:1,nats://v:secret@b:2":     "seed 2 of 2: a user or password other than the first seed's",
		"nats://u:secret@a:1,nats://u:other@b:2":      "seed 2 of 2: a user or password other than the first seed's",
		"nats://a:1,b:2":                              "seed 2 of 2: it is not a nats:// or tls:// URL",
		"nats://a:1,redis://b:2":                      "seed 2 of 2: it is not a nats:// or tls:// URL",
		"nats://a:1,,nats://b:2":                      "seed 2 of 3: empty",
		"nats://a:1,":                                 "seed 2 of 2: empty",
		"nats://u:sec,ret:x@a:1":                      "seed 1 of 2: the URL does not parse",
		"nats://u:1,secret:x@a:1":                     "seed 2 of 2: it is not a nats:// or tls:// URL",
		"nats://u:1,secret@a:1":                       "seed 2 of 2: ",
		"nats://,nats://b:2":                          "seed 1 of 2: no host",
		"nats:opaque,nats://b:2":                      "seed 1 of 2: it is not a nats:// or tls:// URL",
		"nats://a:1,nats://b:2/s?replicas=6":          "replicas=\"6\" is not a replica count from 1 to 5",
		"nats://a:1/s?replicas=0":                     "replicas=\"0\" is not a replica count from 1 to 5",
		"nats://a:1/s?replicas=three":                 "replicas=\"three\" is not a replica count",
		"nats://a:1/s?replicas=3&replicas=3":          "replicas is given 2 times",
		"nats://a:1,nats://b:2/s?replica=3":           "takes no parameters but replicas=N",
		"nats://a:1,nats://b:2/s.*":                   "not a NATS subject",
		"nats://user:secret@a:1,nats://b:2/s?queue=x": "takes no parameters but replicas=N",
	} {
		_, err := parse(url)
		if err == nil {
			t.Errorf("%s: parsed", url)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", url, err, want)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sec") {
			t.Errorf("%s: the error shows the password: %v", url, err)
		}
	}
}

// FuzzParseHidesThePassword: a URL of any shape is read or refused
// without a panic, and the password of one that holds a single one, at
// the first seed, shows neither in the error nor in the form kept for
// errors and logs. shape holds {pw} where the password goes.
func FuzzParseHidesThePassword(f *testing.F) {
	for _, s := range [][2]string{
		{"nats://u:{pw}@127.0.0.1:4222/tidings", "secret"},
		{"tls://u:{pw}@a:4222,tls://b:4222/x.y?replicas=3", "p4ss"},
		{"nats://u:{pw}@a:4222,nats://b/sub", "pw"},
		{"nats://:{pw}@[::1]:4222?replicas=9", "x"},
		{"nats://u:{pw}@h:4222/bad subject", "s"},
		{"http://u:{pw}@h", "s"},
		{"nats://u:{pw}@a:4222/x,nats://b:4222", "q"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, shape, pw string) {
		secret := "Zq9" + pw
		e, err := parse(strings.ReplaceAll(shape, "{pw}", secret))
		first, _, _ := strings.Cut(strings.ReplaceAll(shape, "{pw}", secret), ",")
		if strings.Count(shape, "{pw}") != 1 || strings.Contains(strings.ReplaceAll(shape, "{pw}", ""), "Zq9") || !passwordIs(first, secret) {
			return // not a URL whose password is the secret alone
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("the error shows the password: %v", err)
		}
		if err == nil && strings.Contains(e.redacted, secret) {
			t.Fatalf("the URL kept for errors shows the password: %s", e.redacted)
		}
	})
}

// passwordIs reports whether raw parses as a URL with the password pw.
func passwordIs(raw, pw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	got, ok := u.User.Password()
	return ok && got == pw
}
