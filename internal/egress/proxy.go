// Package egress is the egress proxy of agent pods. Their NetworkPolicy lets them reach it and
// little else, and HTTP_PROXY/HTTPS_PROXY point at it; it carries a connection only to a host
// name on the pod's Project list (spec.network.egress.hosts). No name, no exit:
//
//   - the client must name its destination (CONNECT host:port, or an absolute http:// URI); an
//     IP literal is refused, and so is a name not on the list;
//   - the proxy resolves the name itself, refuses it if any address is denied (loopback,
//     link-local and cloud metadata, the cluster's ranges), and dials the address it checked, so
//     DNS rebinding cannot turn an allowed name into an internal address;
//   - through CONNECT the first bytes must be a TLS ClientHello naming the same host (SNI), or the
//     tunnel closes before a byte reaches the destination: the name checked is the name served.
//
// It cannot see inside TLS: a destination that serves other names than the one in the SNI (domain
// fronting) is as open as the name on the list. Each proxy connection carries one request: a
// tunnel, or one plain HTTP exchange answered with Connection: close.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Policy is what one client may reach.
type Policy struct {
	// Identity names the client in logs, refusals and metric labels, for example
	// "namespace/session". The Resolver keeps the set of identities bounded.
	Identity string
	// Hosts are the patterns the client may reach (spec.network.egress.hosts): exact names,
	// *.suffix wildcards, each with an optional :port (default 80 and 443).
	Hosts []string
}

// Resolver says who a client is and what it may reach, from the TCP peer address and the value
// of the request's Proxy-Authorization header ("" when there is none). It is called once per
// request and must be safe for concurrent use. It returns an error wrapping ErrUnknownClient
// (answered 403) or ErrProxyAuthRequired (407) for clients it does not know; any other error is
// answered 503, failing closed.
type Resolver interface {
	PolicyFor(ctx context.Context, peer netip.Addr, proxyAuth string) (Policy, error)
}

// ResolverFunc adapts a function to a Resolver.
type ResolverFunc func(ctx context.Context, peer netip.Addr, proxyAuth string) (Policy, error)

// PolicyFor calls f.
func (f ResolverFunc) PolicyFor(ctx context.Context, peer netip.Addr, proxyAuth string) (Policy, error) {
	return f(ctx, peer, proxyAuth)
}

var (
	// ErrUnknownClient is what a Resolver returns for a client that is no agent it knows.
	ErrUnknownClient = errors.New("unknown client")
	// ErrProxyAuthRequired is what a Resolver returns when it needs credentials it did not get.
	ErrProxyAuthRequired = errors.New("proxy authentication required")
	// ErrServerClosed is returned by Serve after Shutdown.
	ErrServerClosed = errors.New("egress: server closed")
)

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	// Resolver identifies clients. Required.
	Resolver Resolver
	// Lookup resolves a host name (lower case, without trailing dot) to addresses. Default:
	// net.DefaultResolver, asked for the absolute name so that search domains never apply.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address the proxy resolved and checked ("tcp", "ip:port"); it must not
	// resolve anything itself. Default: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Denied are destinations refused whatever name resolves to them. Nil means DefaultDenied();
	// a non-nil list replaces it, so start from DefaultDenied() and append the cluster's pod,
	// service and node ranges.
	Denied []netip.Prefix
	// MaxConnsPerClient bounds the concurrent connections from one peer address (default 64);
	// as many again are answered 429, and beyond that connections are closed unread.
	MaxConnsPerClient int
	// MaxConns bounds all concurrent connections (default 4096); beyond it they are closed unread.
	MaxConns int
	// MaxHeaderBytes bounds a request's header, and the header of an upstream's response
	// (default 32 KiB).
	MaxHeaderBytes int
	// IdleTimeout closes a tunnel or exchange after this long without a byte either way (default
	// 10 minutes, for model calls that think long before answering).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds reading the request header, and then the TLS ClientHello (default
	// 10s).
	HandshakeTimeout time.Duration
	// DialTimeout bounds the lookup, and each connection attempt (default 10s).
	DialTimeout time.Duration
	// OnDecision, if set, is told of every allowed and refused request, from many goroutines.
	OnDecision func(Decision)
	// Log receives a line per refusal (at most refusalLogsPerSecond a second: clients choose how
	// many they provoke) and, at V(1), per allowed request; never more of a request than its
	// host:port.
	Log logr.Logger
}

const (
	defaultMaxConnsPerClient = 64
	defaultMaxConns          = 4096
	defaultMaxHeaderBytes    = 32 << 10
	defaultIdleTimeout       = 10 * time.Minute
	defaultHandshakeTimeout  = 10 * time.Second
	defaultDialTimeout       = 10 * time.Second
)

// Server is the egress proxy.
type Server struct {
	cfg    Config
	denied deniedSet
	log    logr.Logger
	// ctx is canceled when Shutdown gives up waiting, to abort lookups and dials in flight.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	perPeer   map[netip.Addr]int
	wg        sync.WaitGroup
	logBudget logBudget
}

// New checks cfg, fills in the defaults and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("egress: a Resolver is required")
	}
	if err := applyDefaults(&cfg); err != nil {
		return nil, err
	}
	denied, err := newDeniedSet(cfg.Denied)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, denied: denied, log: cfg.Log, ctx: ctx, cancel: cancel,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, perPeer: map[netip.Addr]int{},
	}, nil
}

func applyDefaults(cfg *Config) error {
	for _, v := range []struct {
		p   *int
		def int
	}{{&cfg.MaxConnsPerClient, defaultMaxConnsPerClient}, {&cfg.MaxConns, defaultMaxConns}, {&cfg.MaxHeaderBytes, defaultMaxHeaderBytes}} {
		if *v.p < 0 {
			return errors.New("egress: limits must not be negative")
		}
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	for _, v := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&cfg.IdleTimeout, defaultIdleTimeout}, {&cfg.HandshakeTimeout, defaultHandshakeTimeout}, {&cfg.DialTimeout, defaultDialTimeout}} {
		if *v.p < 0 {
			return errors.New("egress: timeouts must not be negative")
		}
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	if cfg.Lookup == nil {
		cfg.Lookup = lookupAbsolute
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: cfg.DialTimeout}).DialContext
	}
	if cfg.Denied == nil {
		cfg.Denied = DefaultDenied()
	}
	return nil
}

// lookupAbsolute resolves host as an absolute name: in a pod, resolv.conf's search domains would
// otherwise try registry.npmjs.org.<namespace>.svc.cluster.local first.
func lookupAbsolute(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host+".")
}

// Serve accepts connections on l until Shutdown, and returns ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error {
	if !s.trackListener(l, true) {
		_ = l.Close()
		return ErrServerClosed
	}
	defer s.trackListener(l, false)
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Running out of file descriptors passes; keep serving, slower.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Error(err, "Accept failed; retrying", "after", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.admit(c)
	}
}

// Shutdown stops accepting, waits for the connections in progress to end, and when ctx is done
// first closes them all; it returns once every connection's goroutine has returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		_ = l.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

func (s *Server) trackListener(l net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.listeners, l)
		return true
	}
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// admit counts a new connection against the limits and serves it, or closes it unread when the
// proxy, or the client beyond its allowance of polite refusals, is over the limit: closing costs
// nothing, so a flood cannot make the proxy spend a goroutine per connection.
func (s *Server) admit(c net.Conn) {
	peer := peerAddr(c)
	overLimit, ok := s.register(c, peer)
	if !ok {
		s.report(Decision{Reason: ReasonTooManyConnections}, peer)
		_ = c.Close()
		return
	}
	go s.serveConn(c, peer, overLimit)
}

// register records c; overLimit is true when the client is past MaxConnsPerClient but within
// twice it, where it gets a 429 that says why.
func (s *Server) register(c net.Conn, peer netip.Addr) (overLimit, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.perPeer[peer] + 1
	if s.closed || len(s.conns) >= s.cfg.MaxConns || n > 2*s.cfg.MaxConnsPerClient {
		return false, false
	}
	s.perPeer[peer] = n
	s.conns[c] = struct{}{}
	s.wg.Add(1) // under mu, before Shutdown can see closed and Wait
	return n > s.cfg.MaxConnsPerClient, true
}

func (s *Server) release(c net.Conn, peer netip.Addr) {
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	if s.perPeer[peer]--; s.perPeer[peer] <= 0 {
		delete(s.perPeer, peer)
	}
	s.mu.Unlock()
	s.wg.Done()
}

// activeConns is how many connections are being served (for tests).
func (s *Server) activeConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// peerAddr is the client's IP address, IPv4-mapped addresses unmapped so a client has one key.
func peerAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// serveConn reads one request and carries or refuses it.
func (s *Server) serveConn(raw net.Conn, peer netip.Addr, overLimit bool) {
	defer s.release(raw, peer)
	c := &conn{Conn: raw}
	br := bufio.NewReaderSize(c, 4<<10)
	_ = raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	head, err := readHead(br, s.cfg.MaxHeaderBytes)
	if err != nil {
		s.refuseHead(c, peer, head, err)
		return
	}
	rq, ref := parseHead(head)
	if ref != nil {
		s.answer(c, peer, Decision{}, ref)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	d := Decision{Method: methodLabel(rq.method)}
	pol, ref := s.identify(ctx, peer, rq.header.Get("Proxy-Authorization"))
	if ref != nil {
		s.answer(c, peer, d, ref)
		return
	}
	d.Identity = pol.Identity
	if overLimit {
		s.answer(c, peer, d, refuse(429, ReasonTooManyConnections,
			"egress refused: too many concurrent connections for %s (limit %d)", pol.Identity, s.cfg.MaxConnsPerClient))
		return
	}
	if rq.method == "CONNECT" {
		s.connect(ctx, c, br, rq, pol, d)
		return
	}
	s.forward(ctx, c, br, head, rq, pol, d)
}

// refuseHead answers a request whose header could not be read: too large, too slow. A client
// that left before sending a byte is not a decision.
func (s *Server) refuseHead(c net.Conn, peer netip.Addr, head []byte, err error) {
	switch {
	case errors.Is(err, errHeaderTooLarge):
		s.answer(c, peer, Decision{}, refuse(431, ReasonHeaderTooLarge, "egress refused: request header larger than %d bytes", s.cfg.MaxHeaderBytes))
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.answer(c, peer, Decision{}, refuse(408, ReasonHeaderTimeout, "egress refused: request header not received within %v", s.cfg.HandshakeTimeout))
	case len(head) > 0:
		s.report(Decision{Reason: ReasonBadRequest}, peer)
	}
}

// identify asks the Resolver who the client is.
func (s *Server) identify(ctx context.Context, peer netip.Addr, auth string) (Policy, *refusal) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	pol, err := s.cfg.Resolver.PolicyFor(ctx, peer, auth)
	switch {
	case err == nil:
		return pol, nil
	case errors.Is(err, ErrProxyAuthRequired):
		return Policy{}, refuse(407, ReasonProxyAuthRequired, "egress refused: proxy authentication required")
	case errors.Is(err, ErrUnknownClient):
		return Policy{}, refuse(403, ReasonUnknownClient, "egress refused: this client is not a known agent pod")
	default:
		s.log.Error(err, "Cannot identify an egress client", "peer", peer)
		return Policy{}, refuse(503, ReasonResolverError, "egress refused: cannot tell which session this client belongs to; try again")
	}
}

// answer refuses: reports the decision, writes the refusal and lets the client read it before
// the connection closes.
func (s *Server) answer(c net.Conn, peer netip.Addr, d Decision, r *refusal) {
	d.Allowed, d.Reason = false, r.reason
	s.report(d, peer)
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if _, err := c.Write(r.bytes()); err == nil {
		lingerClose(c)
	}
}

// report logs a decision and hands it to OnDecision.
func (s *Server) report(d Decision, peer netip.Addr) {
	if d.Allowed {
		s.log.V(1).Info("Egress allowed", "client", d.Identity, "peer", peer, "method", d.Method, "target", d.Target)
	} else if ok, suppressed := s.logBudget.take(time.Now()); ok {
		kv := []any{"client", d.Identity, "peer", peer, "method", d.Method, "target", d.Target, "reason", d.Reason}
		if suppressed > 0 {
			kv = append(kv, "suppressed", suppressed)
		}
		s.log.Info("Egress refused", kv...)
	}
	if s.cfg.OnDecision != nil {
		s.cfg.OnDecision(d)
	}
}

// refusalLogsPerSecond bounds refusal log lines: a hostile client can provoke refusals as fast
// as it can connect. OnDecision still sees every one.
const refusalLogsPerSecond = 20

// logBudget hands out refusalLogsPerSecond log lines per wall-clock second and counts the lines
// it withheld, for the next line to mention.
type logBudget struct {
	mu       sync.Mutex
	second   int64
	used     int
	withheld int
}

func (b *logBudget) take(now time.Time) (ok bool, withheld int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sec := now.Unix(); sec != b.second {
		b.second, b.used = sec, 0
	}
	if b.used >= refusalLogsPerSecond {
		b.withheld++
		return false, 0
	}
	b.used++
	withheld, b.withheld = b.withheld, 0
	return true, withheld
}
