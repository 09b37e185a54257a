package egress

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"
)

// maxInterim bounds the 1xx responses an upstream may send before its answer.
const maxInterim = 8

// forward carries one plain HTTP request in absolute form (GET http://host/path): the same
// checks as CONNECT on the URI's host, then one exchange with the resolved address.
func (s *Server) forward(ctx context.Context, c *conn, br *bufio.Reader, head []byte, rq *requestHead, pol Policy, d Decision) {
	peer := peerAddr(c)
	u, port, ref := plainTarget(rq)
	if ref != nil {
		s.answer(c, peer, d, ref)
		return
	}
	d.Target = clip.Marked(net.JoinHostPort(u.Hostname(), strconv.Itoa(int(port))), 260, "...")
	name, addrs, ref := s.checkTarget(ctx, pol, u.Hostname(), port)
	if ref != nil {
		s.answer(c, peer, d, ref)
		return
	}
	d.Target = net.JoinHostPort(name, strconv.Itoa(int(port)))
	// Parse again with net/http, for the body's framing; the head is what was already checked.
	req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(head), br)))
	if err != nil {
		s.answer(c, peer, d, refuse(400, ReasonBadRequest, "egress refused: malformed request"))
		return
	}
	up, err := s.dial(ctx, addrs, port)
	if err != nil {
		s.answer(c, peer, d, s.dialFailed(err, d.Target))
		return
	}
	defer up.Close()
	d.Allowed, d.Reason = true, ReasonAllowed
	s.report(d, peer)
	s.exchange(c, up, req, u, d.Target)
}

// plainTarget checks that a request is a proxy request for an http:// URI whose Host header, if
// any, agrees with it; virtual hosting upstream must not route by a name that was not checked.
func plainTarget(rq *requestHead) (*url.URL, uint16, *refusal) {
	u, err := url.ParseRequestURI(rq.target)
	switch {
	case err != nil || !u.IsAbs() || u.Host == "":
		return nil, 0, refuse(400, ReasonBadRequest,
			"egress refused: not a proxy request: send CONNECT host:port, or a request for an absolute http:// URI")
	case u.Scheme == "https":
		return nil, 0, refuse(400, ReasonBadRequest,
			"egress refused: https:// goes through a CONNECT tunnel (HTTPS_PROXY); the proxy does not open TLS for its clients")
	case u.Scheme != "http":
		return nil, 0, refuse(400, ReasonBadRequest, "egress refused: the proxy carries http:// requests and CONNECT tunnels only")
	case u.User != nil:
		return nil, 0, refuse(400, ReasonBadRequest, "egress refused: credentials in the request URI are not forwarded")
	}
	port := uint64(80)
	if p := u.Port(); p != "" {
		if port, err = strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
			return nil, 0, refuse(400, ReasonBadRequest, "egress refused: invalid port in the request URI")
		}
	}
	if hosts := rq.header.Values("Host"); len(hosts) > 1 || len(hosts) == 1 && authorityKey(hosts[0]) != authorityKey(u.Host) {
		return nil, 0, refuse(400, ReasonBadRequest, "egress refused: the Host header does not match the host of the request URI")
	}
	return u, uint16(port), nil
}

// authorityKey is host:port in the form two spellings of one authority share.
func authorityKey(a string) string {
	u := url.URL{Host: a}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), port)
}

// exchange sends the request to the upstream and its answer back, then the connection closes.
func (s *Server) exchange(c *conn, up net.Conn, req *http.Request, u *url.URL, target string) {
	clock := newIdleClock(s.cfg.IdleTimeout, c.Conn, up)
	c.clock = clock
	upc := &conn{Conn: up, clock: clock}
	http11 := req.ProtoAtLeast(1, 1)
	// The proxy answers 100 Continue itself and sends the body at once: simpler than relaying it.
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return
		}
	}
	prepareRequest(req, u)
	if err := req.Write(upc); err != nil {
		s.upstreamFailed(c, target, err)
		return
	}
	resp, err := readResponse(upc, req, s.cfg.MaxHeaderBytes)
	if err != nil {
		s.upstreamFailed(c, target, err)
		return
	}
	defer resp.Body.Close()
	prepareResponse(resp, http11)
	bw := bufio.NewWriter(c)
	resp.Body = flushingBody{ReadCloser: resp.Body, w: bw}
	if err := resp.Write(writerOnly{bw}); err == nil {
		_ = bw.Flush()
	}
}

// writerOnly hides bufio.Writer's ReadFrom, which reads into the buffer that flushingBody
// flushes under it; plain writes copy through a buffer of their own.
type writerOnly struct{ io.Writer }

// upstreamFailed answers 502 when the upstream fails before its answer started; the request was
// already reported allowed.
func (s *Server) upstreamFailed(c net.Conn, target string, err error) {
	s.log.V(1).Info("Egress upstream failed", "target", target, "error", err.Error())
	_, _ = c.Write(refuse(502, ReasonDialFailed, "egress to %s failed: the upstream did not answer", target).bytes())
}

// readResponse reads the upstream's answer with a bounded header, skipping interim responses
// (the proxy sent its own 100 Continue). A protocol switch is refused: Upgrade is not forwarded.
// The header is read apart first because net/http drops "Connection: close, X-Name" whole, and
// with it the names of the hop-by-hop headers to remove.
func readResponse(up io.Reader, req *http.Request, maxHeader int) (*http.Response, error) {
	br := bufio.NewReader(up)
	for i := 0; ; i++ {
		head, err := readHead(br, maxHeader)
		if err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(bytes.NewReader(head), br)), req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errSwitchedProtocols
		case resp.StatusCode >= 100 && resp.StatusCode < 200 && i < maxInterim:
			continue
		}
		removeHopByHop(resp.Header, connectionHeader(head))
		return resp, nil
	}
}

// connectionHeader is the Connection header of a response head.
func connectionHeader(head []byte) []string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil
	}
	h, _ := tp.ReadMIMEHeader()
	return h.Values("Connection")
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1), plus the proxy's own.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop removes the hop-by-hop headers, and those the Connection header names.
func removeHopByHop(h http.Header, connection []string) {
	for _, v := range connection {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// prepareRequest turns the client's proxy request into the origin request: path-only request
// line, Host from the checked URI, no hop-by-hop or Proxy-* headers (the client's proxy
// credentials stay here), no Expect (already answered), and Connection: close.
func prepareRequest(req *http.Request, u *url.URL) {
	req.RequestURI = ""
	req.Host = u.Host
	removeHopByHop(req.Header, req.Header.Values("Connection"))
	for k := range req.Header {
		if strings.HasPrefix(k, "Proxy-") {
			delete(req.Header, k)
		}
	}
	req.Header.Del("Expect")
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep net/http from adding its own
	}
	req.Close = true
}

// prepareResponse ends the exchange with the response (readResponse removed its hop-by-hop
// headers). An
// HTTP/1.0 client cannot read chunked encoding: it gets the body delimited by the close.
func prepareResponse(resp *http.Response, http11 bool) {
	resp.Close = true
	if !http11 {
		resp.TransferEncoding = nil
	}
}

// flushingBody flushes what was written to the client before waiting on the upstream for more,
// so a streamed response streams.
type flushingBody struct {
	io.ReadCloser
	w *bufio.Writer
}

func (b flushingBody) Read(p []byte) (int, error) {
	if b.w.Buffered() > 0 {
		if err := b.w.Flush(); err != nil {
			return 0, err
		}
	}
	return b.ReadCloser.Read(p)
}
