package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckRefusesWhatOnlyTheManagerReaches(t *testing.T) {
	g := &Guard{
		Deny:          []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")},
		DenyAddrPorts: []netip.AddrPort{netip.MustParseAddrPort("192.168.1.10:6443")},
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"169.254.169.254:80", false},    // cloud metadata
		{"[fd00:ec2::254]:80", false},    // AWS metadata over IPv6
		{"127.0.0.1:8080", false},        // the manager's own metrics
		{"[::1]:8091", false},            // loopback
		{"[::ffff:127.0.0.1]:80", false}, // loopback, mapped
		{"0.0.0.0:80", false},
		{"10.244.3.7:8090", false},   // a pod
		{"10.96.0.1:443", false},     // a Service (the API server's)
		{"192.168.1.10:6443", false}, // the API server's address and port
		{"192.168.1.10:3000", true},  // a forge on the node's address, another port
		{"10.20.0.5:443", true},      // a GitHub Enterprise on the company network
		{"140.82.112.3:443", true},   // api.github.com
	} {
		err := g.Check(netip.MustParseAddrPort(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("Check(%s) = %v, want allowed %v", tc.addr, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "--outbound-allow-cidrs")) {
			t.Errorf("Check(%s): %v does not say how to allow it", tc.addr, err)
		}
	}
	g.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if err := g.Check(netip.MustParseAddrPort("127.0.0.1:8080")); err != nil {
		t.Errorf("an allowed range: %v", err)
	}
}

// The check is on the dialled address, after resolution: a name that resolves to loopback is
// refused as the address itself is.
func TestTransportRefusesADeniedTargetByNameAndAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("internal secret")) }))
	defer srv.Close()
	g := &Guard{}
	c := &http.Client{Transport: g.Transport(), Timeout: 5 * time.Second}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/"} {
		resp, err := c.Get(u)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("GET %s: reached the loopback server", u)
		}
		if !errors.Is(err, ErrDenied) {
			t.Errorf("GET %s: %v, want ErrDenied", u, err)
		}
	}
	var open *Guard
	conn, err := open.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("a nil guard dials anything: %v", err)
	}
	_ = conn.Close()
}
