package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/shepherd-dev/shepherd/internal/clip"
)

// maxDialAttempts bounds how many resolved addresses one request tries.
const maxDialAttempts = 3

// checkTarget decides whether the client may reach host:port, and resolves the name: the
// normalized name and its addresses, all outside Denied, or the refusal. The order matters to
// what the client learns: a name off the list is refused before it is looked up.
func (s *Server) checkTarget(ctx context.Context, pol Policy, host string, port uint16) (string, []netip.Addr, *refusal) {
	name, err := normalizeHost(host)
	if errors.Is(err, errIPLiteral) {
		return "", nil, refuse(403, ReasonIPLiteral,
			"egress to %s is not allowed: the proxy connects only to host names, not addresses (no name, no exit); add the name to spec.network.egress.hosts and use it",
			clip.Marked(net.JoinHostPort(host, strconv.Itoa(int(port))), 64, "..."))
	}
	if err != nil {
		return "", nil, refuse(400, ReasonInvalidHost, "egress to %q refused: not a valid host name", clip.Marked(host, 64, "..."))
	}
	target := net.JoinHostPort(name, strconv.Itoa(int(port)))
	if !pol.Allows(name, port) {
		return "", nil, refuse(403, ReasonHostNotAllowed,
			"egress to %s is not allowed for %s: add it to spec.network.egress.hosts", target, pol.Identity)
	}
	addrs, err := s.lookup(ctx, name)
	if err != nil {
		return "", nil, refuse(502, ReasonLookupFailed, "egress to %s failed: cannot resolve %s", target, name)
	}
	for _, a := range addrs {
		if s.denied.contains(a) {
			return "", nil, refuse(403, ReasonDeniedAddress,
				"egress to %s is not allowed: %s resolves to %s, a loopback, link-local, metadata or cluster address", target, name, a)
		}
	}
	return name, addrs, nil
}

func (s *Server) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	addrs, err := s.cfg.Lookup(ctx, name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	return addrs, err
}

// dial connects to the first of the checked addresses that answers, by address: the name is
// never resolved again, so a second, different answer cannot slip past the check.
func (s *Server) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var errs []error
	for i, a := range addrs {
		if i == maxDialAttempts {
			break
		}
		dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
		c, err := s.cfg.Dial(dctx, "tcp", netip.AddrPortFrom(a.WithZone("").Unmap(), port).String())
		cancel()
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial: %w", errors.Join(errs...))
}

// dialFailed is the refusal when no address answered; the error goes to the log, not the client.
func (s *Server) dialFailed(err error, target string) *refusal {
	s.log.V(1).Info("Egress dial failed", "target", target, "error", err.Error())
	return refuse(502, ReasonDialFailed, "egress to %s failed: cannot connect", target)
}
