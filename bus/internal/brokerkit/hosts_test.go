package brokerkit

import (
	"strings"
	"testing"
)

// TestParseURLHosts: a comma-separated host list is read host by host,
// each given the default port when it names none, IPv6 literals
// included; the URL's Host keeps the list for Redacted; and a host that
// is none, perhaps a password cut at a '/', is refused without being
// quoted.
func TestParseURLHosts(t *testing.T) {
	u, hosts, err := ParseURLHosts("redis+sentinel://u:pw@h1:1,h2,[::1]:3,[fe80::1],10.0.0.1/m/0?channel=c", "26379")
	if err != nil {
		t.Fatal(err)
	}
	want := "h1:1 h2:26379 [::1]:3 [fe80::1]:26379 10.0.0.1:26379"
	if got := strings.Join(hosts, " "); got != want {
		t.Errorf("hosts %q, want %q", got, want)
	}
	if u.Scheme != "redis+sentinel" || u.Path != "/m/0" || u.Query().Get("channel") != "c" || u.User.Username() != "u" {
		t.Errorf("parsed %#v", u)
	}
	if got := u.Redacted(); got != "redis+sentinel://u:xxxxx@h1:1,h2,[::1]:3,[fe80::1],10.0.0.1/m/0?channel=c" {
		t.Errorf("redacted %q", got)
	}
	if _, hosts, err := ParseURLHosts("nats://h1,h2:4222/subject", ""); err != nil || strings.Join(hosts, " ") != "h1 h2:4222" {
		t.Errorf("without a default port: %q, %v", hosts, err)
	}
	for _, bad := range []string{
		"redis+sentinel://u:secret/x@h1/m",
		"redis+sentinel://h1,,h2/m",
		"redis+sentinel://h1:port/m",
		"redis+sentinel://::1/m",
		"redis+sentinel://[::1/m",
		"redis+sentinel://u:secret%zz@h1/m",
	} {
		if _, _, err := ParseURLHosts(bad, "26379"); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURLHosts(%q): %v, want an error without the password", bad, err)
		}
	}
}
