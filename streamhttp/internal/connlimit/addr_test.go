package connlimit

import (
	"net"
	"net/netip"
	"testing"
)

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// TestClientAddr: connections are counted by IP, an IPv4-mapped IPv6
// address as its IPv4 one, and an IPv6 address by its /64.
func TestClientAddr(t *testing.T) {
	for _, c := range []struct {
		remote net.Addr
		want   string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 4000}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 4000}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 4000}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::9"), Port: 5000}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 4000, Zone: "eth0"}, "fe80::"},
		{&net.UnixAddr{Name: "/tmp/sock", Net: "unix"}, "invalid IP"},
	} {
		got := clientAddr(addrConn{remote: c.remote})
		if got.String() != c.want {
			t.Errorf("clientAddr(%v) = %v, want %v", c.remote, got, c.want)
		}
	}
	if clientAddr(addrConn{remote: &net.TCPAddr{IP: net.ParseIP("2001:db8::1")}}) == (netip.Addr{}) {
		t.Error("an IPv6 client has no address")
	}
}
