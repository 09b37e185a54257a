package egress

import (
	"fmt"
	"net/netip"
)

// defaultDenied are the destinations no allowed name may resolve to, in any cluster. The
// cluster's own pod, service and node ranges differ per cluster: the caller adds them.
var defaultDenied = []string{
	"0.0.0.0/8",         // "this network": connecting to 0.0.0.0 reaches the local host
	"127.0.0.0/8",       // loopback
	"169.254.0.0/16",    // link-local: the cloud metadata services (169.254.169.254)
	"100.64.0.0/10",     // shared address space: Alibaba Cloud metadata (100.100.100.200), CGNAT
	"168.63.129.16/32",  // Azure's host endpoint (WireServer)
	"224.0.0.0/4",       // multicast
	"240.0.0.0/4",       // reserved, and the broadcast address
	"::/128",            // unspecified
	"::1/128",           // loopback
	"fe80::/10",         // link-local
	"fd00:ec2::254/128", // AWS metadata over IPv6
	"ff00::/8",          // multicast
}

// DefaultDenied returns the destinations refused by default: loopback, unspecified, link-local
// (cloud metadata), the shared address space 100.64.0.0/10 (Alibaba Cloud's metadata lives
// there, and no public host does), the cloud host endpoints, multicast and reserved ranges.
// Private ranges (10.0.0.0/8, ...) are not in it, since an allowed name may rightly be an
// internal registry; add the cluster's pod, service and node ranges to it.
func DefaultDenied() []netip.Prefix {
	out := make([]netip.Prefix, len(defaultDenied))
	for i, s := range defaultDenied {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// nat64 is the well-known NAT64 prefix: its addresses embed an IPv4 destination, checked too.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// deniedSet holds normalized prefixes.
type deniedSet []netip.Prefix

// newDeniedSet normalizes prefixes so that an IPv4 range written as IPv4-mapped IPv6 matches the
// plain IPv4 addresses it is checked against.
func newDeniedSet(ps []netip.Prefix) (deniedSet, error) {
	out := make(deniedSet, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			return nil, fmt.Errorf("invalid denied prefix %v", p)
		}
		if a := p.Addr(); a.Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				bits = 0
			}
			p = netip.PrefixFrom(a.Unmap(), bits)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// contains reports whether a (as a resolver returned it) is a denied destination. It unmaps
// IPv4-mapped addresses and drops zones first (netip.Prefix.Contains is false for both, which
// would let ::ffff:127.0.0.1 or fe80::1%eth0 through), and looks inside NAT64 addresses.
func (d deniedSet) contains(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		if d.contains(netip.AddrFrom4([4]byte(b[12:]))) {
			return true
		}
	}
	for _, p := range d {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
