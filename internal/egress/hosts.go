package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// HostPatternRegexp is the syntax of one entry of spec.network.egress.hosts, the same expression
// as the API's validation marker (a test keeps the two equal).
const HostPatternRegexp = `^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?$`

// maxPatternLen is the API's MaxLength for one entry.
const maxPatternLen = 260

var hostPattern = regexp.MustCompile(HostPatternRegexp)

// defaultPorts are the ports a pattern without ":port" allows.
var defaultPorts = [...]uint16{80, 443}

// ValidatePattern reports whether p is an acceptable host pattern: an exact lower-case name
// (registry.npmjs.org) or a wildcard for its subdomains (*.example.org), optionally with a port.
// It accepts exactly what the API accepts, so a pattern the API let through is never refused
// here; a pattern that passes but can never match (port 0, a name ending in a digit label) is
// simply never matched.
func ValidatePattern(p string) error {
	if len(p) > maxPatternLen {
		return fmt.Errorf("host pattern is longer than %d characters", maxPatternLen)
	}
	if !hostPattern.MatchString(p) {
		return fmt.Errorf("host pattern %q must be a lower-case host name or *.domain, optionally with :port", p)
	}
	return nil
}

// pattern is a parsed host pattern.
type pattern struct {
	name     string // the exact name, or the suffix after "*." for a wildcard
	wildcard bool
	port     int // 0: the default ports
}

// parsePattern parses a valid pattern; ok is false for anything ValidatePattern refuses or that
// names an impossible port, so a bad entry fails closed.
func parsePattern(p string) (pattern, bool) {
	if ValidatePattern(p) != nil {
		return pattern{}, false
	}
	var pt pattern
	if name, port, found := strings.Cut(p, ":"); found {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return pattern{}, false
		}
		p, pt.port = name, n
	}
	pt.name, pt.wildcard = strings.CutPrefix(p, "*.")
	return pt, true
}

// matches reports whether the normalized host and port fall under the pattern. A wildcard needs
// at least one whole label before its suffix: *.example.org matches a.example.org and
// a.b.example.org, never example.org or evilexample.org.
func (pt pattern) matches(host string, port uint16) bool {
	if !pt.portMatches(port) {
		return false
	}
	if !pt.wildcard {
		return host == pt.name
	}
	prefix, found := strings.CutSuffix(host, "."+pt.name)
	return found && prefix != ""
}

func (pt pattern) portMatches(port uint16) bool {
	if pt.port != 0 {
		return int(port) == pt.port
	}
	for _, d := range defaultPorts {
		if port == d {
			return true
		}
	}
	return false
}

// Allows reports whether the policy lets its client reach host on port. The host is normalized
// first (lower case, one trailing dot dropped); a host that is not a DNS name is never allowed.
// Patterns that are not valid are skipped, never widened.
func (p Policy) Allows(host string, port uint16) bool {
	h, err := normalizeHost(host)
	if err != nil {
		return false
	}
	for _, s := range p.Hosts {
		if pt, ok := parsePattern(s); ok && pt.matches(h, port) {
			return true
		}
	}
	return false
}

var (
	errIPLiteral   = errors.New("an IP address, not a host name")
	errInvalidHost = errors.New("not a valid host name")
)

// normalizeHost returns host in the form patterns are matched against: lower case, without the
// trailing dot of an absolute name. It refuses IP literals, and names whose last label starts
// with a digit: no top-level domain does, and resolvers read such names ("127.1", "2130706433",
// "0x7f000001") as addresses, which would let an address through disguised as a name. IDNs must
// arrive in their ASCII (punycode) form and are compared literally.
func normalizeHost(host string) (string, error) {
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return "", errIPLiteral
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || len(h) > 253 {
		return "", errInvalidHost
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", errInvalidHost
		}
	}
	if last := labels[len(labels)-1]; last[0] >= '0' && last[0] <= '9' {
		return "", errIPLiteral
	}
	return h, nil
}

// validLabel is the DNS label syntax of the API's pattern: letters, digits and inner hyphens.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
