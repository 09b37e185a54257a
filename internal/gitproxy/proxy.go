package gitproxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The two services of smart HTTP.
const (
	ServiceUploadPack  = "git-upload-pack"
	ServiceReceivePack = "git-receive-pack"
)

// Target is where one request goes: the repository's URL and the headers (credentials) added
// to the forwarded request.
type Target struct {
	// URL of the repository, as git clones it (https://github.com/acme/widgets.git).
	URL *url.URL
	// Header is added to the forwarded request, for example Authorization.
	Header http.Header
}

// Policy decides whether a push may update a ref. It sees every command of a push; one
// refusal refuses the whole push.
type Policy interface {
	Allow(RefUpdate) error
}

// BranchOnly allows pushes to one branch and never its deletion: a session pushes its own
// branch and nothing else (not the default branch, not another session's branch, no tags).
type BranchOnly string

// Allow implements Policy.
func (b BranchOnly) Allow(u RefUpdate) error {
	want := "refs/heads/" + string(b)
	switch {
	case string(b) == "":
		return errors.New("this session has no branch to push yet")
	case u.Ref != want:
		return fmt.Errorf("only %s may be pushed from this session", want)
	case u.Deletes():
		return fmt.Errorf("%s may not be deleted", want)
	}
	return nil
}

// Proxy forwards smart-HTTP requests (GET info/refs, POST git-upload-pack, POST
// git-receive-pack) under its mount point to a Target. Everything else is answered 404.
type Proxy struct {
	// Target gives the upstream for a request; an error is answered 502 with its text (say what
	// to fix, never a secret).
	Target func(r *http.Request) (Target, error)
	// Policy gives the push policy for a request; nil refuses every push.
	Policy func(r *http.Request) (Policy, error)
	// Transport reaches the upstream; nil uses a default with timeouts and no proxy.
	Transport http.RoundTripper
	// MaxPush bounds a push's body (default 2 GiB): a larger push is cut off.
	MaxPush int64
	// Timeout bounds one request as a whole (default 30 minutes: a first clone of a large
	// repository over a slow link).
	Timeout time.Duration
	// OnRefused, when set, hears of each refused push (metrics, logs).
	OnRefused func(r *http.Request, cmds []RefUpdate, err error)
}

// Suffixes this proxy serves, relative to its mount point.
const (
	pathInfoRefs = "/info/refs"
	pathUpload   = "/" + ServiceUploadPack
	pathReceive  = "/" + ServiceReceivePack
)

// ServeHTTP implements http.Handler. The request path ends in one of the smart-HTTP suffixes;
// whatever precedes it (a mount prefix, the repository's name) is ignored: a proxy serves one
// repository.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	r = r.WithContext(ctx)
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, pathInfoRefs):
		svc := r.URL.Query().Get("service")
		if svc != ServiceUploadPack && svc != ServiceReceivePack {
			http.Error(w, "only smart HTTP is served: info/refs?service=git-upload-pack or git-receive-pack", http.StatusForbidden)
			return
		}
		p.forward(w, r, pathInfoRefs+"?service="+svc, nil)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, pathUpload):
		p.forward(w, r, pathUpload, r.Body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, pathReceive):
		p.receivePack(w, r)
	default:
		http.Error(w, "not a git smart-HTTP request", http.StatusNotFound)
	}
}

// receivePack checks every ref update of a push before a byte of it goes upstream. The body is
// forwarded exactly as it came (the bytes read while checking, then the rest), with its
// encoding and length: a CGI git server refuses chunked request bodies.
func (p *Proxy) receivePack(w http.ResponseWriter, r *http.Request) {
	maxPush := p.MaxPush
	if maxPush == 0 {
		maxPush = 2 << 30
	}
	body := http.MaxBytesReader(w, r.Body, maxPush)
	var seen bytes.Buffer
	decoded := io.TeeReader(body, &seen)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(decoded)
		if err != nil {
			http.Error(w, "bad gzip body", http.StatusBadRequest)
			return
		}
		defer func() { _ = zr.Close() }()
		decoded = zr
	}
	cmds, caps, _, err := ReadCommands(bufio.NewReaderSize(decoded, 4<<10))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.check(r, cmds); err != nil {
		if p.OnRefused != nil {
			p.OnRefused(r, cmds, err)
		}
		// Read what git sends before answering (it writes the whole pack, then reads), bounded by
		// the request's own limit.
		_, _ = io.Copy(io.Discard, body)
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(refusal(cmds, caps, "shepherd: "+err.Error()))
		return
	}
	p.forward(w, r, pathReceive, io.MultiReader(&seen, body))
}

func (p *Proxy) check(r *http.Request, cmds []RefUpdate) error {
	if p.Policy == nil {
		return errors.New("pushes are not accepted here")
	}
	pol, err := p.Policy(r)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := pol.Allow(c); err != nil {
			return err
		}
	}
	return nil
}

// Request headers git sends that the upstream needs; everything else (cookies, the caller's own
// Authorization) stays behind.
var forwardedRequestHeaders = []string{"Accept", "Content-Type", "Git-Protocol", "User-Agent", "Accept-Encoding"}

// Response headers passed back. WWW-Authenticate is not: git would then ask a credential helper
// for a password it must not have.
var forwardedResponseHeaders = []string{"Content-Type", "Cache-Control", "Pragma", "Expires", "Content-Encoding"}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, suffix string, body io.Reader) {
	t, err := p.Target(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	u := strings.TrimRight(t.URL.String(), "/") + suffix
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u, body)
	if err != nil {
		http.Error(w, "bad upstream URL", http.StatusBadGateway)
		return
	}
	if body != nil {
		req.ContentLength = r.ContentLength
	}
	for _, h := range forwardedRequestHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	// Bodies are forwarded as they came, so they keep their encoding (git gzips large ones).
	if ce := r.Header.Get("Content-Encoding"); ce != "" && body != nil {
		req.Header.Set("Content-Encoding", ce)
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	resp, err := p.transport().RoundTrip(req)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		http.Error(w, "the repository did not answer: "+redact(err), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for _, h := range forwardedResponseHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			w.Header()[h] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	copyFlushing(w, resp.Body)
}

// redact keeps a transport error's text without the URL's query or user info.
func redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// copyFlushing streams the answer as it arrives: git reads progress and packs incrementally.
func copyFlushing(w http.ResponseWriter, r io.Reader) {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) transport() http.RoundTripper {
	if p.Transport != nil {
		return p.Transport
	}
	return defaultTransport
}

var defaultTransport = NewTransport(nil)

// NewTransport is the proxy's transport to the forge, dialling through dial (nil: a plain
// dialer): no proxy from the environment, and long enough a wait for the first byte of a clone
// or fetch of a large repository.
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.ResponseHeaderTimeout = 5 * time.Minute
	tr.MaxIdleConnsPerHost = 16
	if dial != nil {
		tr.DialContext = dial
	}
	return tr
}
