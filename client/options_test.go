package client

import (
	"reflect"
	"strings"
	"testing"
)

// TestOptionsFitTheirConstructors checks, for every constructor option,
// which constructors accept it: an option is accepted where its result
// type is assignable to the constructor's variadic parameter, the rule
// the compiler applies, so an option that only one transport honours
// does not compile with another constructor.
func TestOptionsFitTheirConstructors(t *testing.T) {
	const (
		all     = "NewHTTP NewCommand New"
		http    = "NewHTTP"
		command = "NewCommand"
	)
	options := []struct {
		name string
		fn   any
		want string
	}{
		{"WithClientInfo", WithClientInfo, all},
		{"WithElicitation", WithElicitation, all},
		{"WithSampling", WithSampling, all},
		{"WithRoots", WithRoots, all},
		{"WithMaxRounds", WithMaxRounds, all},
		{"WithTimeout", WithTimeout, all},
		{"WithCacheSize", WithCacheSize, all},
		{"WithServeStale", WithServeStale, all},
		{"WithLogger", WithLogger, all},
		{"WithServerLogs", WithServerLogs, all},
		{"WithProtocolVersion", WithProtocolVersion, all},
		{"WithoutTasks", WithoutTasks, all},
		{"WithListenIdleTimeout", WithListenIdleTimeout, http},
		{"WithAuthorization", WithAuthorization, http},
		{"WithHeader", WithHeader, http},
		{"WithHTTPClient", WithHTTPClient, http},
		{"WithAuthorizer", WithAuthorizer, http},
		{"WithStderr", WithStderr, command},
		{"WithEnv", WithEnv, command},
	}
	ctors := []struct {
		name string
		fn   any
	}{{"NewHTTP", NewHTTP}, {"NewCommand", NewCommand}, {"New", New}}
	for _, o := range options {
		result := reflect.TypeOf(o.fn).Out(0)
		var got []string
		for _, c := range ctors {
			ct := reflect.TypeOf(c.fn)
			if result.AssignableTo(ct.In(ct.NumIn() - 1).Elem()) {
				got = append(got, c.name)
			}
		}
		if g := strings.Join(got, " "); g != o.want {
			t.Errorf("%s (a %v) is accepted by %q, want %q", o.name, result, g, o.want)
		}
	}
}
