package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"
)

// tlsAccessDenied is a fatal TLS alert (access_denied), sent to a client whose ClientHello the
// proxy refused, so that its TLS library says "access denied" rather than "connection reset".
var tlsAccessDenied = []byte{21, 3, 3, 0, 2, 2, 49}

// connect carries a CONNECT request: check and resolve the target, dial it, answer 200, and
// open the tunnel only once the ClientHello names the same host.
func (s *Server) connect(ctx context.Context, c *conn, br *bufio.Reader, rq *requestHead, pol Policy, d Decision) {
	peer := peerAddr(c)
	host, port, ref := connectTarget(rq.target)
	if ref != nil {
		s.answer(c, peer, d, ref)
		return
	}
	d.Target = clip.Marked(net.JoinHostPort(host, strconv.Itoa(int(port))), 260, "...")
	name, addrs, ref := s.checkTarget(ctx, pol, host, port)
	if ref != nil {
		s.answer(c, peer, d, ref)
		return
	}
	d.Target = net.JoinHostPort(name, strconv.Itoa(int(port)))
	up, err := s.dial(ctx, addrs, port)
	if err != nil {
		s.answer(c, peer, d, s.dialFailed(err, d.Target))
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	hello, reason := checkClientHello(br, name)
	if reason != ReasonAllowed {
		d.Reason = reason
		s.report(d, peer)
		if reason != ReasonNotTLS {
			_, _ = c.Write(tlsAccessDenied)
		}
		return
	}
	d.Allowed, d.Reason = true, ReasonAllowed
	s.report(d, peer)
	s.tunnel(c, up, hello)
}

// connectTarget splits a CONNECT request's authority; it must carry a port (RFC 9110 9.3.6).
func connectTarget(target string) (string, uint16, *refusal) {
	host, p, err := net.SplitHostPort(target)
	n, perr := strconv.ParseUint(p, 10, 16)
	if err != nil || perr != nil || n == 0 || host == "" {
		return "", 0, refuse(400, ReasonBadRequest, "egress refused: CONNECT needs host:port, got %q", clip.Marked(target, 64, "..."))
	}
	return host, uint16(n), nil
}

// checkClientHello reads the client's first bytes and checks that they are a TLS ClientHello
// naming name. It returns the bytes to forward: the hello, and whatever the client sent after
// it that is already buffered.
func checkClientHello(br *bufio.Reader, name string) ([]byte, Reason) {
	raw, sni, err := readClientHello(br)
	switch {
	case errors.Is(err, errNoSNI):
		return nil, ReasonNoSNI
	case errors.Is(err, errECH):
		return nil, ReasonEncryptedClientHello
	case err != nil:
		return nil, ReasonNotTLS
	}
	if got, err := normalizeHost(sni); err != nil || got != name {
		return nil, ReasonSNIMismatch
	}
	rest, _ := br.Peek(br.Buffered())
	return append(raw, rest...), ReasonAllowed
}

// tunnel forwards the checked hello, then copies both ways until either side closes, fails or
// stays silent for IdleTimeout. Then it closes both ends, which ends the other copy too, and
// returns only when both copies have.
func (s *Server) tunnel(c *conn, up net.Conn, hello []byte) {
	clock := newIdleClock(s.cfg.IdleTimeout, c.Conn, up)
	c.clock = clock
	upc := &conn{Conn: up, clock: clock}
	if _, err := upc.Write(hello); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyThenClose(c, upc, c, upc)
	}()
	copyThenClose(upc, c, c, upc)
	<-done
}

// copyThenClose copies src to dst, then closes both connections of the tunnel.
func copyThenClose(dst io.Writer, src io.Reader, a, b net.Conn) {
	buf := make([]byte, 32<<10)
	_, _ = io.CopyBuffer(dst, src, buf)
	_ = a.Close()
	_ = b.Close()
}
