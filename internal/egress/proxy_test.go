package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
)

// The test world: names the proxy's Lookup knows, the one client's credentials and list.
const (
	clientAuth     = "agent-a:secret-a"
	clientIdentity = "team-a/session-1"
)

var (
	loopback4  = netip.MustParseAddr("127.0.0.1")
	testLookup = map[string][]netip.Addr{
		"allowed.test":  {loopback4},
		"api.wild.test": {loopback4},
		"wild.test":     {loopback4},
		"ported.test":   {loopback4},
		"other.test":    {loopback4},
		"evil.test":     {loopback4},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":    {loopback4, netip.MustParseAddr("169.254.169.254")},
		"mapped.test":   {netip.MustParseAddr("::ffff:169.254.169.254")},
	}
	clientHosts = []string{"allowed.test", "*.wild.test", "ported.test:8443", "metadata.test", "mixed.test", "mapped.test", "nowhere.test", "allowed.test:9999"}
)

func basic(userPass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
}

// testResolver knows one client, on loopback, by its proxy credentials.
var testResolver = ResolverFunc(func(_ context.Context, peer netip.Addr, auth string) (Policy, error) {
	switch {
	case !peer.IsLoopback():
		return Policy{}, ErrUnknownClient
	case auth == "":
		return Policy{}, ErrProxyAuthRequired
	case auth == basic(clientAuth):
		return Policy{Identity: clientIdentity, Hosts: clientHosts}, nil
	case auth == basic("broken:x"):
		return Policy{}, errors.New("informer not synced")
	}
	return Policy{}, ErrUnknownClient
})

func lookupTestName(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := testLookup[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// withoutLoopback is the default Denied list with loopback let through, where the test
// upstreams listen.
func withoutLoopback() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range DefaultDenied() {
		if !p.Contains(loopback4) && !p.Contains(netip.IPv6Loopback()) {
			out = append(out, p)
		}
	}
	return out
}

// testCert is a self-signed certificate for the test names, and a pool that trusts it.
var testCert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test"},
		DNSNames:  []string{"allowed.test", "*.wild.test", "ported.test", "other.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
})

// countingListener counts the connections an upstream accepted and closed, and every byte it
// received on them: "the upstream saw nothing" is then a number.
type countingListener struct {
	net.Listener
	accepted, closed, bytes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.bytes.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	c.once.Do(func() { c.l.closed.Add(1) })
	return c.Conn.Close()
}

// seen is what an upstream received in one request.
type seen struct {
	Host, RequestURI, Body string
	Header                 http.Header
}

// upstream is a real HTTP or HTTPS server on loopback.
type upstream struct {
	srv  *httptest.Server
	ln   *countingListener
	mu   sync.Mutex
	reqs []seen
}

func newUpstream(t *testing.T, useTLS bool) *upstream {
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hangup":
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
			return
		case "/big-header":
			w.Header().Set("X-Big", strings.Repeat("a", 40<<10))
		case "/stream":
			for _, part := range []string{"one,", "two"} {
				_, _ = io.WriteString(w, part)
				w.(http.Flusher).Flush()
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{Host: r.Host, RequestURI: r.RequestURI, Body: string(body), Header: r.Header.Clone()})
		u.mu.Unlock()
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Connection", "close, X-Hop") // net/http keeps it as long as it says close
		w.Header().Set("X-Hop", "dropped")
		_, _ = fmt.Fprintf(w, "hello from %s%s body=%q", r.Host, r.URL.Path, body)
	}))
	u.ln = &countingListener{Listener: u.srv.Listener}
	u.srv.Listener = u.ln
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes would be noise
	if useTLS {
		cert, _ := testCert()
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

// env is a proxy on loopback with its upstreams. Its Dial stands in for the network: the ports
// 443 and 8443 of 127.0.0.1 lead to the TLS upstream, 80 to the plain one, anything else fails.
type env struct {
	tlsUp, plainUp *upstream
	srv            *Server
	addr           string
	served         chan error

	mu        sync.Mutex
	decisions []Decision
	dials     []string
	logs      strings.Builder
}

func newEnv(t *testing.T, tweak func(*Config)) *env {
	g := NewWithT(t)
	e := &env{tlsUp: newUpstream(t, true), plainUp: newUpstream(t, false), served: make(chan error, 1)}
	cfg := Config{
		Resolver: testResolver, Lookup: lookupTestName, Dial: e.dial, Denied: withoutLoopback(),
		HandshakeTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, DialTimeout: 5 * time.Second,
		OnDecision: func(d Decision) { e.mu.Lock(); e.decisions = append(e.decisions, d); e.mu.Unlock() },
		Log: funcr.New(func(prefix, args string) {
			e.mu.Lock()
			e.logs.WriteString(prefix + " " + args + "\n")
			e.mu.Unlock()
		}, funcr.Options{Verbosity: 1}),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	e.srv, e.addr = srv, l.Addr().String()
	go func() { e.served <- srv.Serve(l) }()
	t.Cleanup(func() {
		// Every test closes what it opened: Shutdown returning nil means no connection, and no
		// goroutine serving one, was left behind.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		NewWithT(t).Expect(srv.Shutdown(ctx)).To(Succeed())
		NewWithT(t).Expect(<-e.served).To(MatchError(ErrServerClosed))
	})
	return e
}

func (e *env) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e.mu.Lock()
	e.dials = append(e.dials, addr)
	e.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Addr() != loopback4 {
		return nil, fmt.Errorf("the proxy dialed %q, not a checked loopback address", addr)
	}
	to := map[uint16]string{443: e.tlsUp.ln.Addr().String(), 8443: e.tlsUp.ln.Addr().String(), 80: e.plainUp.ln.Addr().String()}[ap.Port()]
	if to == "" {
		return nil, fmt.Errorf("connection refused: %s", addr)
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

func (e *env) lastDecision() Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.decisions) == 0 {
		return Decision{}
	}
	return e.decisions[len(e.decisions)-1]
}

func (e *env) dialed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.dials...)
}

func (e *env) logText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.String()
}

// client is an http.Client using the proxy with the given credentials ("" for none).
func (e *env) client(t *testing.T, auth string) *http.Client {
	proxy := &url.URL{Scheme: "http", Host: e.addr}
	if user, pass, ok := strings.Cut(auth, ":"); ok {
		proxy.User = url.UserPassword(user, pass)
	}
	_, pool := testCert()
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool},
		DisableKeepAlives: true, ExpectContinueTimeout: 30 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// rawConn is a client connection to the proxy, read through the reader that parsed the answer.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *rawConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// send opens a connection to the proxy and writes head; the deadline only keeps a broken test
// from hanging, it asserts nothing.
func (e *env) send(t *testing.T, head string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, head)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// answer reads the proxy's response to a request with the given method, and its body.
func (c *rawConn) answer(t *testing.T, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	if method == http.MethodConnect && resp.StatusCode == http.StatusOK {
		return resp, "" // the tunnel follows
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// fragmentingConn sends its first write, a ClientHello in one record, as records of 100 bytes:
// TLS allows it, and the server reassembles them.
type fragmentingConn struct {
	*rawConn
	done bool
}

func (c *fragmentingConn) Write(p []byte) (int, error) {
	if c.done {
		return c.rawConn.Write(p)
	}
	c.done = true
	if _, err := c.rawConn.Write(fragment(p, 100)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// closedByProxy tells a connection the proxy closed (EOF, or a reset when it left bytes unread)
// from one the test's own guard deadline ended.
func closedByProxy(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func connectHead(target, auth string) string {
	h := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		h += "Proxy-Authorization: " + basic(auth) + "\r\n"
	}
	return h + "\r\n"
}

// openTunnel CONNECTs to target and completes a TLS handshake with serverName through it.
func (e *env) openTunnel(t *testing.T, target, serverName string) *tls.Conn {
	t.Helper()
	g := NewWithT(t)
	c := e.send(t, connectHead(target, clientAuth))
	resp, _ := c.answer(t, http.MethodConnect)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_, pool := testCert()
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: pool})
	g.Expect(tc.Handshake()).To(Succeed())
	return tc
}

func getOver(t *testing.T, c net.Conn, host, path string) string {
	t.Helper()
	g := NewWithT(t)
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func TestHTTPSThroughConnect(t *testing.T) {
	e := newEnv(t, nil)
	cases := []struct{ url, target, want string }{
		{"https://allowed.test/hello", "allowed.test:443", "hello from allowed.test/hello"},
		{"https://api.wild.test/x", "api.wild.test:443", "hello from api.wild.test/x"},
		{"https://ported.test:8443/p", "ported.test:8443", "hello from ported.test:8443/p"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g := NewWithT(t)
			resp, err := e.client(t, clientAuth).Get(tc.url)
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Expect(string(body)).To(HavePrefix(tc.want))
			g.Expect(e.lastDecision()).To(Equal(Decision{Identity: clientIdentity, Target: tc.target, Method: "CONNECT", Allowed: true, Reason: ReasonAllowed}))
		})
	}
	t.Run("the server name is compared without regard to case", func(t *testing.T) {
		g := NewWithT(t)
		tc := e.openTunnel(t, "Allowed.TEST:443", "ALLOWED.test")
		defer tc.Close()
		g.Expect(getOver(t, tc, "allowed.test", "/case")).To(HavePrefix("hello from allowed.test/case"))
	})
	t.Run("a ClientHello spread over several TLS records", func(t *testing.T) {
		g := NewWithT(t)
		c := e.send(t, connectHead("allowed.test:443", clientAuth))
		resp, _ := c.answer(t, http.MethodConnect)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		_, pool := testCert()
		tc := tls.Client(&fragmentingConn{rawConn: c}, &tls.Config{ServerName: "allowed.test", RootCAs: pool})
		defer tc.Close()
		g.Expect(tc.Handshake()).To(Succeed())
		g.Expect(getOver(t, tc, "allowed.test", "/fragmented")).To(HavePrefix("hello from allowed.test/fragmented"))
	})
	t.Run("the proxy dials the addresses it checked, never a name", func(t *testing.T) {
		g := NewWithT(t)
		for _, a := range e.dialed() {
			_, err := netip.ParseAddrPort(a)
			g.Expect(err).NotTo(HaveOccurred(), a)
		}
	})
}

func TestPlainHTTP(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	c := e.client(t, clientAuth)

	req, _ := http.NewRequest(http.MethodGet, "http://allowed.test/path?q=1", nil)
	req.Header.Set("X-Test", "kept")
	req.Header.Set("Proxy-Custom", "dropped")
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(string(body)).To(Equal(`hello from allowed.test/path body=""`))
	g.Expect(resp.Header).NotTo(HaveKey("Keep-Alive"), "hop-by-hop headers stay at the proxy")
	g.Expect(resp.Header).NotTo(HaveKey("X-Hop"), "so do the headers Connection names")
	g.Expect(e.lastDecision()).To(Equal(Decision{Identity: clientIdentity, Target: "allowed.test:80", Method: "GET", Allowed: true, Reason: ReasonAllowed}))

	// A streamed body, after a 100 Continue the proxy answers itself.
	pr, pw := io.Pipe()
	go func() { _, _ = io.WriteString(pw, "streamed"); _ = pw.Close() }()
	req, _ = http.NewRequest(http.MethodPost, "http://allowed.test/upload", pr)
	req.Header.Set("Expect", "100-continue")
	resp, err = c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(Equal(`hello from allowed.test/upload body="streamed"`))

	// An upstream that fails before answering, or answers with a header over the bound.
	for _, path := range []string{"/hangup", "/big-header"} {
		resp, err = c.Get("http://allowed.test" + path)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadGateway), path)
		g.Expect(string(body)).To(Equal("egress to allowed.test:80 failed: the upstream did not answer\n"), path)
	}

	// A streamed answer reaches an HTTP/1.0 client delimited by the close, not chunked.
	raw := e.send(t, "GET http://allowed.test/stream HTTP/1.0\r\nProxy-Authorization: "+basic(clientAuth)+"\r\n\r\n")
	resp, body10 := raw.answer(t, http.MethodGet)
	g.Expect(resp.TransferEncoding).To(BeEmpty())
	g.Expect(body10).To(Equal("one,two"))

	got := e.plainUp.requests() // /hangup and /stream record nothing
	g.Expect(got).To(HaveLen(3))
	g.Expect(got[0].Host).To(Equal("allowed.test"))
	g.Expect(got[0].RequestURI).To(Equal("/path?q=1"), "origin form upstream")
	g.Expect(got[0].Header.Get("X-Test")).To(Equal("kept"))
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Proxy-Custom", "Expect"} {
		g.Expect(got[0].Header).NotTo(HaveKey(h))
		g.Expect(got[1].Header).NotTo(HaveKey(h))
	}
}

func TestRefusals(t *testing.T) {
	e := newEnv(t, nil)
	notAllowed := func(target string) string {
		return "egress to " + target + " is not allowed for " + clientIdentity + ": add it to spec.network.egress.hosts\n"
	}
	cases := []struct {
		name, head string
		status     int
		body       string // the whole body when it ends in a newline, else a part of it
		reason     Reason
	}{
		{"a name not on the list", connectHead("evil.test:443", clientAuth), 403, notAllowed("evil.test:443"), ReasonHostNotAllowed},
		{"a wildcard's own domain", connectHead("wild.test:443", clientAuth), 403, notAllowed("wild.test:443"), ReasonHostNotAllowed},
		{"a wildcard's name under another domain", connectHead("api.wild.test.evil.test:443", clientAuth), 403, notAllowed("api.wild.test.evil.test:443"), ReasonHostNotAllowed},
		{"a port not listed", connectHead("ported.test:443", clientAuth), 403, notAllowed("ported.test:443"), ReasonHostNotAllowed},
		{"beyond the default ports", connectHead("allowed.test:8443", clientAuth), 403, notAllowed("allowed.test:8443"), ReasonHostNotAllowed},
		{"an IPv4 literal", connectHead("127.0.0.1:443", clientAuth), 403, "no name, no exit", ReasonIPLiteral},
		{"an IPv6 literal", connectHead("[::1]:443", clientAuth), 403, "no name, no exit", ReasonIPLiteral},
		{"an address written as a number", connectHead("2130706433:443", clientAuth), 403, "no name, no exit", ReasonIPLiteral},
		{"a name resolving to cloud metadata", connectHead("metadata.test:443", clientAuth), 403, "metadata.test resolves to 169.254.169.254", ReasonDeniedAddress},
		{"a name with one denied address among others", connectHead("mixed.test:443", clientAuth), 403, "resolves to 169.254.169.254", ReasonDeniedAddress},
		{"a name resolving to an IPv4-mapped denied address", connectHead("mapped.test:443", clientAuth), 403, "resolves to ::ffff:169.254.169.254", ReasonDeniedAddress},
		{"a name that does not resolve", connectHead("nowhere.test:443", clientAuth), 502, "cannot resolve nowhere.test", ReasonLookupFailed},
		{"a destination that does not answer", connectHead("allowed.test:9999", clientAuth), 502, "egress to allowed.test:9999 failed: cannot connect\n", ReasonDialFailed},
		{"CONNECT without a port", connectHead("allowed.test", clientAuth), 400, "CONNECT needs host:port", ReasonBadRequest},
		{"not a host name", connectHead("bad_name.test:443", clientAuth), 400, "not a valid host name", ReasonInvalidHost},
		{"no credentials", connectHead("allowed.test:443", ""), 407, "proxy authentication required", ReasonProxyAuthRequired},
		{"unknown credentials", connectHead("allowed.test:443", "mallory:guess"), 403, "not a known agent pod", ReasonUnknownClient},
		{"the resolver failing", connectHead("allowed.test:443", "broken:x"), 503, "cannot tell which session", ReasonResolverError},
		{"plain HTTP to a name not on the list", "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n",
			403, notAllowed("evil.test:80"), ReasonHostNotAllowed},
		{"plain HTTP to an address", "GET http://127.0.0.1/ HTTP/1.1\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n", 403, "no name, no exit", ReasonIPLiteral},
		{"plain HTTP to cloud metadata", "GET http://metadata.test/latest/meta-data/ HTTP/1.1\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n",
			403, "resolves to 169.254.169.254", ReasonDeniedAddress},
		{"a relative URI is no proxy request", "GET / HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n",
			400, "not a proxy request", ReasonBadRequest},
		{"a Host header naming another host", "GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n",
			400, "Host header does not match", ReasonBadRequest},
		{"https:// without CONNECT", "GET https://allowed.test/ HTTP/1.1\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n", 400, "CONNECT", ReasonBadRequest},
		{"another scheme", "GET ftp://allowed.test/ HTTP/1.1\r\nProxy-Authorization: " + basic(clientAuth) + "\r\n\r\n", 400, "http:// requests and CONNECT", ReasonBadRequest},
		{"HTTP/2", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "HTTP/1.0 and HTTP/1.1", ReasonBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			method, _, _ := strings.Cut(tc.head, " ")
			resp, body := e.send(t, tc.head).answer(t, method)
			g.Expect(resp.StatusCode).To(Equal(tc.status))
			if strings.HasSuffix(tc.body, "\n") {
				g.Expect(body).To(Equal(tc.body))
			} else {
				g.Expect(body).To(ContainSubstring(tc.body))
				g.Expect(strings.Count(body, "\n")).To(Equal(1), "one line")
			}
			if tc.status == http.StatusProxyAuthRequired {
				g.Expect(resp.Header.Get("Proxy-Authenticate")).To(HavePrefix("Basic"))
			}
			d := e.lastDecision()
			g.Expect(d.Allowed).To(BeFalse())
			g.Expect(d.Reason).To(Equal(tc.reason))
		})
	}
	g := NewWithT(t)
	g.Expect(e.dialed()).To(Equal([]string{"127.0.0.1:9999"}), "every other refusal came before a connection")
	g.Expect(e.tlsUp.ln.accepted.Load() + e.plainUp.ln.accepted.Load()).To(BeZero())
}

func TestDefaultDeniedRefusesLoopback(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, func(c *Config) { c.Denied = nil })
	resp, body := e.send(t, connectHead("allowed.test:443", clientAuth)).answer(t, http.MethodConnect)
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
	g.Expect(body).To(ContainSubstring("allowed.test resolves to 127.0.0.1"))
	resp, err := e.client(t, clientAuth).Get("http://allowed.test/")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden), "plain HTTP gets the refusal as its response")
	g.Expect(e.lastDecision().Reason).To(Equal(ReasonDeniedAddress))
	g.Expect(e.dialed()).To(BeEmpty())
}

func TestTunnelNeedsAClientHelloNamingTheHost(t *testing.T) {
	_, pool := testCert()
	handshake := func(serverName string) func(net.Conn) error {
		return func(c net.Conn) error {
			return tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: pool, InsecureSkipVerify: serverName == ""}).Handshake()
		}
	}
	cases := []struct {
		name    string
		timeout time.Duration
		send    func(net.Conn) error
		reason  Reason
	}{
		{"a TLS name other than the CONNECT host", 0, handshake("other.test"), ReasonSNIMismatch},
		{"no TLS server name", 0, handshake(""), ReasonNoSNI},
		{"plain HTTP inside the tunnel", 0, func(c net.Conn) error {
			_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
			return err
		}, ReasonNotTLS},
		{"nothing at all, until the handshake timeout", 200 * time.Millisecond, func(net.Conn) error { return nil }, ReasonNotTLS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t, func(c *Config) {
				if tc.timeout != 0 {
					c.HandshakeTimeout = tc.timeout
				}
			})
			c := e.send(t, connectHead("allowed.test:443", clientAuth))
			resp, _ := c.answer(t, http.MethodConnect)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			err := tc.send(c)
			if tc.reason == ReasonSNIMismatch || tc.reason == ReasonNoSNI {
				g.Expect(err).To(MatchError(ContainSubstring("access denied")), "the proxy's alert")
			}
			_, err = c.Read(make([]byte, 1))
			g.Expect(closedByProxy(err)).To(BeTrue(), "the proxy closed the tunnel: %v", err)
			// The proxy had connected to the upstream; it must not have forwarded a byte.
			g.Eventually(e.tlsUp.ln.closed.Load).Should(Equal(int64(1)))
			g.Expect(e.tlsUp.ln.accepted.Load()).To(Equal(int64(1)))
			g.Expect(e.tlsUp.ln.bytes.Load()).To(BeZero())
			g.Expect(e.lastDecision()).To(Equal(Decision{Identity: clientIdentity, Target: "allowed.test:443", Method: "CONNECT", Reason: tc.reason}))
		})
	}
}

func TestConnectionLimits(t *testing.T) {
	t.Run("per client: polite refusals, then closed connections, until one ends", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, func(c *Config) { c.MaxConnsPerClient = 2 })
		first := e.openTunnel(t, "allowed.test:443", "allowed.test")
		second := e.openTunnel(t, "api.wild.test:443", "api.wild.test")
		defer second.Close()

		resp, body := e.send(t, connectHead("allowed.test:443", clientAuth)).answer(t, http.MethodConnect)
		g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
		g.Expect(body).To(Equal("egress refused: too many concurrent connections for team-a/session-1 (limit 2)\n"))
		g.Expect(e.lastDecision()).To(Equal(Decision{Identity: clientIdentity, Method: "CONNECT", Reason: ReasonTooManyConnections}))
		g.Eventually(e.srv.activeConns).Should(Equal(2))

		// Two silent connections fill the allowance of refusals; the next is closed unread.
		silent1, silent2 := e.send(t, ""), e.send(t, "")
		g.Eventually(e.srv.activeConns).Should(Equal(4))
		_, err := e.send(t, connectHead("allowed.test:443", clientAuth)).Read(make([]byte, 1))
		g.Expect(closedByProxy(err)).To(BeTrue(), "closed, not left waiting: %v", err)
		g.Eventually(e.lastDecision).Should(Equal(Decision{Reason: ReasonTooManyConnections}))
		g.Expect(silent1.Close()).To(Succeed())
		g.Expect(silent2.Close()).To(Succeed())

		// The tunnels still work, and once one ends its place is free again.
		g.Expect(getOver(t, second, "api.wild.test", "/still")).To(HavePrefix("hello from api.wild.test/still"))
		g.Expect(first.Close()).To(Succeed())
		g.Eventually(e.srv.activeConns).Should(Equal(1))
		resp, _ = e.send(t, connectHead("allowed.test:443", clientAuth)).answer(t, http.MethodConnect)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	})
	t.Run("overall", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, func(c *Config) { c.MaxConns = 1 })
		tunnel := e.openTunnel(t, "allowed.test:443", "allowed.test")
		defer tunnel.Close()
		_, err := e.send(t, connectHead("allowed.test:443", clientAuth)).Read(make([]byte, 1))
		g.Expect(closedByProxy(err)).To(BeTrue(), "closed, not left waiting: %v", err)
		g.Eventually(e.lastDecision).Should(Equal(Decision{Reason: ReasonTooManyConnections}))
	})
}

func TestHeaderBounds(t *testing.T) {
	t.Run("a header that does not arrive in time", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, func(c *Config) { c.HandshakeTimeout = 200 * time.Millisecond })
		resp, body := e.send(t, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allo").answer(t, http.MethodConnect)
		g.Expect(resp.StatusCode).To(Equal(http.StatusRequestTimeout))
		g.Expect(body).To(ContainSubstring("request header not received"))
		g.Expect(e.lastDecision().Reason).To(Equal(ReasonHeaderTimeout))
	})
	t.Run("a header too large", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, func(c *Config) { c.MaxHeaderBytes = 1024 })
		head := "CONNECT allowed.test:443 HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"
		resp, _ := e.send(t, head).answer(t, http.MethodConnect)
		g.Expect(resp.StatusCode).To(Equal(http.StatusRequestHeaderFieldsTooLarge))
		g.Expect(e.lastDecision().Reason).To(Equal(ReasonHeaderTooLarge))
	})
}

func TestTunnelEnds(t *testing.T) {
	t.Run("after the idle timeout", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
		tc := e.openTunnel(t, "allowed.test:443", "allowed.test")
		defer tc.Close()
		g.Expect(getOver(t, tc, "allowed.test", "/once")).To(HavePrefix("hello from allowed.test/once"))
		_, err := tc.Read(make([]byte, 1))
		g.Expect(closedByProxy(err)).To(BeTrue(), "the proxy closed it: %v", err)
		g.Eventually(e.srv.activeConns).Should(BeZero())
	})
	t.Run("when the client closes", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, nil)
		tc := e.openTunnel(t, "allowed.test:443", "allowed.test")
		g.Expect(tc.Close()).To(Succeed())
		g.Eventually(e.srv.activeConns).Should(BeZero())
		g.Eventually(e.tlsUp.ln.closed.Load).Should(Equal(int64(1)), "the upstream connection closed too")
	})
	t.Run("when the upstream closes", func(t *testing.T) {
		g := NewWithT(t)
		e := newEnv(t, nil)
		tc := e.openTunnel(t, "allowed.test:443", "allowed.test")
		defer tc.Close()
		e.tlsUp.srv.CloseClientConnections()
		_, err := tc.Read(make([]byte, 1))
		g.Expect(closedByProxy(err)).To(BeTrue(), "the proxy closed it: %v", err)
		g.Eventually(e.srv.activeConns).Should(BeZero())
	})
}

func TestShutdownClosesWhatOutlivesItsContext(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	tc := e.openTunnel(t, "allowed.test:443", "allowed.test")
	defer tc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	g.Expect(e.srv.Shutdown(ctx)).To(MatchError(context.DeadlineExceeded))
	g.Expect(e.srv.activeConns()).To(BeZero(), "Shutdown returns once every connection is done")
	_, err := tc.Read(make([]byte, 1))
	g.Expect(err).To(HaveOccurred())
	_, err = net.Dial("tcp", e.addr)
	g.Expect(err).To(HaveOccurred(), "no longer listening")
}

func TestLogsNameOnlyHostAndPort(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, nil)
	resp, err := e.client(t, clientAuth).Get("http://allowed.test/private-path?token=abc")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	resp, err = e.client(t, clientAuth).Get("http://evil.test/other-private-path")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	logs := e.logText()
	g.Expect(logs).To(ContainSubstring("allowed.test:80"))
	g.Expect(logs).To(ContainSubstring("evil.test:80"))
	for _, secret := range []string{"secret-a", basic(clientAuth), "private-path", "token=abc"} {
		g.Expect(logs).NotTo(ContainSubstring(secret))
	}
}

func TestNewChecksItsConfig(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Config{})
	g.Expect(err).To(MatchError(ContainSubstring("Resolver is required")))
	_, err = New(Config{Resolver: testResolver, MaxConns: -1})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Config{Resolver: testResolver, IdleTimeout: -time.Second})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Config{Resolver: testResolver, Denied: []netip.Prefix{{}}})
	g.Expect(err).To(HaveOccurred())
	s, err := New(Config{Resolver: testResolver})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.cfg.MaxConnsPerClient).To(Equal(64))
	g.Expect(s.cfg.MaxConns).To(Equal(4096))
	g.Expect(s.cfg.Denied).To(Equal(DefaultDenied()))
}
