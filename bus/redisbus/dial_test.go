package redisbus

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// TestRefusesOtherSchemes: each constructor refuses a URL that names
// another broker, or none, saying which schemes it takes, before
// anything is dialled, and without showing the password.
func TestRefusesOtherSchemes(t *testing.T) {
	open := map[string]func(context.Context, string, ...bus.Option) (any, error){
		"Dial":      func(ctx context.Context, u string, o ...bus.Option) (any, error) { return Dial(ctx, u, o...) },
		"OpenState": func(ctx context.Context, u string, o ...bus.Option) (any, error) { return OpenState(ctx, u, o...) },
		"OpenTasks": func(ctx context.Context, u string, o ...bus.Option) (any, error) { return OpenTasks(ctx, u, o...) },
	}
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	for name, fn := range open {
		for url, want := range map[string]string{
			"nats://user:secret@127.0.0.1:1/a":    "is not redis, rediss",
			"127.0.0.1:6379":                      "first path segment",
			"redis://user:secret@127.0.0.1:1/x/y": "invalid URL path",
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := fn(ctx, url, quiet)
			cancel()
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%q): %v, want an error that mentions %q and not the password", name, url, err, want)
			}
		}
	}
}

// TestSentinelURL: a redis+sentinel URL names the Sentinels (port 26379
// unless given), the master and the db; its user and password are the
// Redis servers', the Sentinels' own are parameters; a write waits for
// one replica unless wait says otherwise; and no error shows a password.
func TestSentinelURL(t *testing.T) {
	tg, err := parse("rediss+sentinel://u:pw@10.0.0.1:5000,sent2,[::1]:5001,[fe80::1]/mymaster/3?channel=c&sentinel_password=spw&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	fo := tg.failover
	if fo == nil || tg.opt != nil {
		t.Fatalf("not a failover client: %+v", tg)
	}
	want := []string{"10.0.0.1:5000", "sent2:26379", "[::1]:5001", "[fe80::1]:26379"}
	if strings.Join(fo.SentinelAddrs, " ") != strings.Join(want, " ") {
		t.Errorf("sentinels %q, want %q", fo.SentinelAddrs, want)
	}
	if fo.MasterName != "mymaster" || fo.DB != 3 || fo.Username != "u" || fo.Password != "pw" ||
		fo.SentinelPassword != "spw" || fo.DialTimeout != 2*time.Second || fo.TLSConfig == nil || fo.TLSConfig.ServerName != "" {
		t.Errorf("options %+v", fo)
	}
	if tg.channel != "c" || tg.wait != 1 || tg.waitFor != defaultWaitTimeout {
		t.Errorf("channel %q, wait %d for %v", tg.channel, tg.wait, tg.waitFor)
	}
	if strings.Contains(tg.redacted, "pw") {
		t.Errorf("redacted URL %q shows a password", tg.redacted)
	}
	tg, err = parse("redis+sentinel://127.0.0.1/m?wait=0")
	if err != nil || tg.wait != 0 || tg.failover.DB != 0 || tg.channel != "tidings" {
		t.Errorf("wait=0: %+v, %v", tg, err)
	}
	tg, err = parse("redis://127.0.0.1:6379?wait=2&wait_timeout=250ms")
	if err != nil || tg.opt == nil || tg.wait != 2 || tg.waitFor != 250*time.Millisecond {
		t.Errorf("redis:// with wait=2: %+v, %v", tg, err)
	}
	for url, want := range map[string]string{
		"redis+sentinel://u:secret@127.0.0.1/":                          "the path is not /master",
		"redis+sentinel://u:secret@127.0.0.1/m/0/x":                     "the path is not /master",
		"redis+sentinel://u:secret@127.0.0.1/m/x":                       "is not a number",
		"redis+sentinel://u:secret@127.0.0.1,,h2/m":                     "not host or host:port",
		"redis+sentinel://u:secret@h1:x/m":                              "not host or host:port",
		"redis+sentinel://u:secret/x@h1/m":                              "not host or host:port",
		"redis+sentinel://h1/m?wait=-1&sentinel_password=secret":        "not a count of replicas",
		"redis+sentinel://h1/m?wait_timeout=1&sentinel_password=secret": "wait_timeout",
		"redis+sentinel://h1/m?bogus=1&sentinel_password=secret":        "unexpected option",
		"redis+sentinel://u:secret@h1/m?bogus=1":                        "unexpected option",
		"redis+sentinel://u:secret@h1/m?max_retries=x&sentinel_user=u":  "max_retries",
		"redisx+sentinel://u:secret@h1/m?sentinel_password=secret&x=2":  "scheme",
	} {
		_, err := parse(url)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("parse(%q): %v, want an error that mentions %q and no password", url, err, want)
		}
	}
}

// FuzzParseHidesThePasswords: a URL of any shape is read or refused
// without a panic, and neither the Redis password nor the Sentinels'
// own (sentinel_password) shows in the error or in the form kept for
// errors and logs. shape holds {pw} where a password goes, once.
func FuzzParseHidesThePasswords(f *testing.F) {
	for _, s := range [][2]string{
		{"redis://u:{pw}@127.0.0.1:6379/0?channel=c", "secret"},
		{"rediss://:{pw}@h:6380?wait=2&wait_timeout=5ms", "p4ss"},
		{"redis+sentinel://a:26379,b,[::1]:26380/mymaster/1?sentinel_password={pw}", "sp"},
		{"redis+sentinel://u:{pw}@a,b/m?wait=x", "x"},
		{"rediss+sentinel://:{pw}@a/m/notanumber", "q"},
		{"nats://u:{pw}@h", "s"},
		{"redis://u:{pw}@h?wait_timeout=soon", "t"},
		{"redis://u:{pw}@[0]/0", "pass"},
		{"rediss://:{pw}@[0]?channel=c", "s"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, shape, pw string) {
		secret := "Zq9" + pw
		raw := strings.ReplaceAll(shape, "{pw}", secret)
		tg, err := parse(raw)
		if strings.Count(shape, "{pw}") != 1 || strings.Contains(strings.ReplaceAll(shape, "{pw}", ""), "Zq9") || !holdsPassword(raw, secret) {
			return // not a URL whose one password is the secret
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("the error shows the password: %v", err)
		}
		if err == nil && strings.Contains(tg.redacted, secret) {
			t.Fatalf("the URL kept for errors shows the password: %s", tg.redacted)
		}
	})
}

// holdsPassword reports whether raw, read as the package reads it, has
// pw for its password or its sentinel_password.
func holdsPassword(raw, pw string) bool {
	u, _, err := brokerkit.ParseURLHosts(raw, sentinelPort)
	if err != nil {
		return false
	}
	if got, ok := u.User.Password(); ok && got == pw {
		return true
	}
	return u.Query().Get("sentinel_password") == pw
}
