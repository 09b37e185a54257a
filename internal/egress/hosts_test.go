package egress

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestPolicyAllows(t *testing.T) {
	cases := []struct {
		name     string
		patterns []string
		host     string
		port     uint16
		want     bool
	}{
		{"an exact name on 443", []string{"registry.npmjs.org"}, "registry.npmjs.org", 443, true},
		{"an exact name on 80", []string{"registry.npmjs.org"}, "registry.npmjs.org", 80, true},
		{"an exact name on another port needs it listed", []string{"registry.npmjs.org"}, "registry.npmjs.org", 8443, false},
		{"a listed port", []string{"example.org:8443"}, "example.org", 8443, true},
		{"a listed port replaces the defaults", []string{"example.org:8443"}, "example.org", 443, false},
		{"a subdomain of an exact name is not the name", []string{"example.org"}, "www.example.org", 443, false},
		{"case does not matter in the host", []string{"example.org"}, "Example.ORG", 443, true},
		{"a trailing dot is the same name", []string{"example.org"}, "example.org.", 443, true},
		{"two trailing dots are not a name", []string{"example.org"}, "example.org..", 443, false},
		{"a wildcard matches one label", []string{"*.example.org"}, "a.example.org", 443, true},
		{"a wildcard matches several labels", []string{"*.example.org"}, "a.b.example.org", 443, true},
		{"a wildcard does not match its own suffix", []string{"*.example.org"}, "example.org", 443, false},
		{"a wildcard needs a label boundary", []string{"*.example.org"}, "evilexample.org", 443, false},
		{"a wildcard does not match a longer suffix", []string{"*.example.org"}, "a.example.org.evil.com", 443, false},
		{"a wildcard with a port", []string{"*.example.org:8080"}, "a.example.org", 8080, true},
		{"a wildcard with a port refuses the defaults", []string{"*.example.org:8080"}, "a.example.org", 80, false},
		{"an empty label before the suffix", []string{"*.example.org"}, ".example.org", 443, false},
		{"punycode matches literally", []string{"xn--bcher-kva.example"}, "xn--bcher-kva.example", 443, true},
		{"unicode is not its punycode", []string{"xn--bcher-kva.example"}, "bücher.example", 443, false},
		{"unicode is not a host name at all", []string{"*.example"}, "bücher.example", 443, false},
		{"an IP literal never matches", []string{"127.0.0.1"}, "127.0.0.1", 443, false},
		{"a numeric last label never matches", []string{"127.1"}, "127.1", 443, false},
		{"an IPv6 literal never matches", []string{"*.example.org"}, "::1", 443, false},
		{"underscores are not host names", []string{"*.example.org"}, "a_b.example.org", 443, false},
		{"an invalid pattern is skipped, not widened", []string{"*example.org", "EXAMPLE.org", "*.*.org"}, "example.org", 443, false},
		{"a pattern with an impossible port matches nothing", []string{"example.org:0", "example.org:99999"}, "example.org", 0, false},
		{"any of several patterns", []string{"a.test", "*.example.org", "b.test:8080"}, "b.test", 8080, true},
		{"no patterns, no exit", nil, "example.org", 443, false},
		{"a single label name", []string{"localhost"}, "localhost", 80, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Policy{Hosts: tc.patterns}.Allows(tc.host, tc.port)).To(Equal(tc.want))
		})
	}
}

func TestValidatePattern(t *testing.T) {
	cases := []struct {
		pattern string
		ok      bool
	}{
		{"registry.npmjs.org", true},
		{"*.example.org", true},
		{"example.org:8443", true},
		{"*.example.org:8443", true},
		{"localhost", true},
		{"xn--bcher-kva.example", true},
		{"a-b.example", true},
		{"Example.org", false},
		{"example.org.", false},
		{"*example.org", false},
		{"*.*.example.org", false},
		{"a.*.example.org", false},
		{"*", false},
		{"-a.example", false},
		{"a-.example", false},
		{"a..example", false},
		{"example.org:", false},
		{"example.org:123456", false},
		{"http://example.org", false},
		{"example.org/path", false},
		{"[::1]", false},
		{"bücher.example", false},
		{"", false},
		{strings.Repeat("a.", 130) + "org", false}, // longer than the API's 260
	}
	for _, tc := range cases {
		t.Run(tc.pattern, func(t *testing.T) {
			g := NewWithT(t)
			if tc.ok {
				g.Expect(ValidatePattern(tc.pattern)).To(Succeed())
			} else {
				g.Expect(ValidatePattern(tc.pattern)).NotTo(Succeed())
			}
		})
	}
}

// The API validates spec.network.egress.hosts with the same expression: if one changes, so
// must the other, or the proxy would skip entries the API accepted.
func TestPatternRegexpIsTheAPIs(t *testing.T) {
	g := NewWithT(t)
	src, err := os.ReadFile("../../api/v1alpha1/project_types.go")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(src)).To(ContainSubstring("+kubebuilder:validation:items:Pattern=`" + HostPatternRegexp + "`"))
	g.Expect(string(src)).To(ContainSubstring("+kubebuilder:validation:items:MaxLength=260"))
}

func TestNormalizeHost(t *testing.T) {
	cases := []struct {
		host string
		want string
		err  error
	}{
		{"Example.ORG.", "example.org", nil},
		{"a-b.example", "a-b.example", nil},
		{"1password.com", "1password.com", nil},
		{"127.0.0.1", "", errIPLiteral},
		{"[::1]", "", errIPLiteral},
		{"fe80::1%eth0", "", errIPLiteral},
		{"127.1", "", errIPLiteral},
		{"2130706433", "", errIPLiteral},
		{"0x7f000001", "", errIPLiteral},
		{"example.123", "", errIPLiteral},
		{"", "", errInvalidHost},
		{".", "", errInvalidHost},
		{"a..b", "", errInvalidHost},
		{"-a.example", "", errInvalidHost},
		{"a b.example", "", errInvalidHost},
		{strings.Repeat("a", 64) + ".example", "", errInvalidHost},
		{strings.Repeat("abc.", 64) + "org", "", errInvalidHost},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			g := NewWithT(t)
			got, err := normalizeHost(tc.host)
			if tc.err != nil {
				g.Expect(err).To(MatchError(tc.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestDeniedSet(t *testing.T) {
	custom, err := newDeniedSet([]netip.Prefix{netip.MustParsePrefix("::ffff:10.96.0.0/108")})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defaults, err := newDeniedSet(DefaultDenied())
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	cases := []struct {
		name string
		set  deniedSet
		addr string
		want bool
	}{
		{"cloud metadata", defaults, "169.254.169.254", true},
		{"loopback", defaults, "127.0.0.53", true},
		{"IPv4-mapped loopback", defaults, "::ffff:127.0.0.1", true},
		{"IPv6 loopback", defaults, "::1", true},
		{"this network", defaults, "0.0.0.0", true},
		{"IPv6 unspecified", defaults, "::", true},
		{"IPv6 link-local with a zone", defaults, "fe80::1%eth0", true},
		{"Alibaba metadata", defaults, "100.100.100.200", true},
		{"AWS metadata over IPv6", defaults, "fd00:ec2::254", true},
		{"Azure host endpoint", defaults, "168.63.129.16", true},
		{"multicast", defaults, "239.1.2.3", true},
		{"broadcast", defaults, "255.255.255.255", true},
		{"NAT64 of the metadata address", defaults, "64:ff9b::a9fe:a9fe", true},
		{"NAT64 of a public address", defaults, "64:ff9b::808:808", false},
		{"a public address", defaults, "140.82.112.3", false},
		{"a public IPv6 address", defaults, "2606:4700::1111", false},
		{"a private address is for the caller to deny", defaults, "10.0.0.1", false},
		{"a cluster range given IPv4-mapped", custom, "10.111.0.10", true},
		{"outside the cluster range", custom, "10.112.0.10", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.set.contains(netip.MustParseAddr(tc.addr))).To(Equal(tc.want))
		})
	}
	NewWithT(t).Expect(defaults.contains(netip.Addr{})).To(BeTrue(), "an invalid address is refused")
}
