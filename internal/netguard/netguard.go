// Package netguard keeps the manager's outbound calls to addresses a Project names (scm.apiURL,
// tracker.linear.apiURL, notification webhooks and Slack URLs, the repository the git proxy
// forwards to) away from where an author could aim them to reach what only the manager can
// (server-side request forgery): loopback, link-local (cloud metadata at 169.254.169.254),
// unspecified and multicast addresses, and the cluster's own pod and Service ranges and API
// server. The check runs on the address actually dialled, after name resolution, so a name that
// resolves to a denied address (or is re-pointed at one between two lookups) is refused too.
//
// Private ranges outside the cluster stay open: a GitHub Enterprise or Gitea on the company
// network is the common case. The manager's --outbound-allow-cidrs opens a denied range (a forge
// on the node's loopback in development, an in-cluster Gitea); it is the cluster administrator's
// choice, not a Project's, because a tenant writes its Project.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrDenied is wrapped by every refused dial.
var ErrDenied = errors.New("outbound address refused")

// DeniedError is a refused dial: the address and why.
type DeniedError struct {
	Addr   string
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s: %s %s (allow it with the manager's --outbound-allow-cidrs)", ErrDenied, e.Addr, e.Reason)
}

// Is makes errors.Is(err, ErrDenied) hold.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Guard decides which addresses the manager may dial for a Project.
type Guard struct {
	// Deny are the ranges refused besides the built-in ones (the cluster's pod and Service
	// ranges).
	Deny []netip.Prefix
	// DenyAddrPorts are single endpoints refused (the API server's addresses and port).
	DenyAddrPorts []netip.AddrPort
	// Allow reopens ranges that are denied (checked first).
	Allow []netip.Prefix
}

// builtin are always refused unless allowed.
var builtin = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"), // AWS metadata over IPv6
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
}

// Check returns nil when the manager may dial addr, or an error wrapping ErrDenied that says
// why and how to allow it.
func (g *Guard) Check(addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	for _, p := range g.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	for _, ap := range g.DenyAddrPorts {
		if ap.Addr().Unmap() == ip && ap.Port() == addr.Port() {
			return &DeniedError{Addr: addr.String(), Reason: "is the cluster's API server"}
		}
	}
	for _, p := range builtin {
		if p.Contains(ip) {
			return &DeniedError{Addr: ip.String(), Reason: "is loopback, link-local, unspecified or multicast"}
		}
	}
	for _, p := range g.Deny {
		if p.Contains(ip) {
			return &DeniedError{Addr: ip.String(), Reason: "is inside the cluster's range " + p.String()}
		}
	}
	return nil
}

// control is a net.Dialer Control: it sees the resolved address of every connection.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{Addr: address, Reason: "is not an address"}
	}
	return g.Check(ap)
}

// DialContext dials through the guard. A nil Guard dials anything.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if g != nil {
		d.Control = g.control
	}
	return d.DialContext(ctx, network, address)
}

// Transport is http.DefaultTransport's settings dialling through the guard. A proxy from the
// manager's environment (HTTPS_PROXY) is kept: the guard then checks the proxy's address, and the
// proxy, which the cluster's administrator set, decides where it connects.
func (g *Guard) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = g.DialContext
	return t
}
