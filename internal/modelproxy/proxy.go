// Package modelproxy is the model API proxy the runner serves inside an agent's pod, on
// loopback. The agent's CLI (Claude Code, Codex, OpenCode, Aider, Gemini CLI) is pointed at it
// with a placeholder key; the proxy forwards the model API calls it knows to the configured
// upstream with the real key, which only the runner can read, streams the answers back as they
// come, and counts every request and token of the session, cutting it off at its budget.
//
// The agent is treated as hostile (it may be steered by what it reads): it never sees the
// key, reaches only the generation, token counting and model listing endpoints, and cannot
// exhaust the proxy's memory or escape the count by cutting streams short.
package modelproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	"github.com/go-logr/logr"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Config configures a Proxy.
type Config struct {
	// Kind is the wire protocol the CLI speaks and the upstream serves.
	Kind agentsv1alpha1.ModelAPIKind
	// Upstream is the API's base URL without the version path: https://api.anthropic.com,
	// https://generativelanguage.googleapis.com, or a gateway's base with a path prefix, which
	// is kept (https://gw.example.com/anthropic receives /anthropic/v1/messages).
	Upstream *url.URL
	// Key returns the real API key, read for every request so that a rotated key takes effect;
	// surrounding white space (a file's last newline) is trimmed. Nil or "" sends none.
	Key func() (string, error)
	// Transport reaches the upstream. Nil is a transport with bounded dial, TLS and
	// response-header times that honours the HTTP(S)_PROXY environment.
	Transport http.RoundTripper
	// Limits is the session's budget; zero is unlimited.
	Limits Limits
	// Initial is the usage carried over from before a restart.
	Initial Usage
	// OnUsage is called after each generation request with the session's new totals, one call
	// at a time and in order, but not under a lock requests wait for.
	OnUsage func(Usage)
	// MaxRequestBody caps a request body; larger ones are answered 413. Zero is 32 MiB, the
	// Messages API's own limit.
	MaxRequestBody int64
	// MaxConcurrent caps the requests in progress (each may hold a body of MaxRequestBody);
	// more wait for a turn. Zero is 16.
	MaxConcurrent int
	// Log receives a line per request (never a key or a body); the zero Logger discards.
	Log logr.Logger
}

const (
	defaultMaxRequestBody = 32 << 20
	defaultMaxConcurrent  = 16
	// bodyReadTimeout bounds reading a request body, so that a client dribbling one cannot
	// hold a turn forever.
	bodyReadTimeout = 2 * time.Minute
	// streamIdleTimeout ends an answer the upstream stops sending. Thinking models go quiet
	// for long stretches; the APIs send pings meanwhile, and this is the response-header
	// timeout's bound again.
	streamIdleTimeout = 5 * time.Minute
	relayBufferBytes  = 32 << 10
)

// Proxy is the model API proxy of one session. It is an http.Handler for the root of a
// loopback listener: the CLI's base URL is http://127.0.0.1:PORT and it calls /v1/....
type Proxy struct {
	kind      agentsv1alpha1.ModelAPIKind
	upstream  *url.URL
	key       func() (string, error)
	transport http.RoundTripper
	maxBody   int64
	turns     chan struct{}
	ledger    *ledger
	log       logr.Logger
}

// New checks cfg and returns its Proxy.
func New(cfg Config) (*Proxy, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	p := &Proxy{
		kind: cfg.Kind, upstream: cfg.Upstream, key: cfg.Key, transport: cfg.Transport,
		maxBody: cfg.MaxRequestBody, log: cfg.Log,
		ledger: newLedger(cfg.Limits, cfg.Initial, cfg.OnUsage),
	}
	if p.transport == nil {
		p.transport = defaultTransport()
	}
	if p.maxBody == 0 {
		p.maxBody = defaultMaxRequestBody
	}
	n := cfg.MaxConcurrent
	if n == 0 {
		n = defaultMaxConcurrent
	}
	p.turns = make(chan struct{}, n)
	return p, nil
}

func validate(cfg Config) error {
	if _, ok := endpoints[cfg.Kind]; !ok {
		return fmt.Errorf("unknown model API kind %q", cfg.Kind)
	}
	u := cfg.Upstream
	switch {
	case u == nil:
		return errors.New("no upstream URL")
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("upstream %q is not an http(s) URL with a host", u.Redacted())
	case u.User != nil:
		// The key is the only credential, and a URL ends up in logs and errors.
		return fmt.Errorf("upstream %q must not carry credentials", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("upstream %q must be a base URL, without query or fragment", u.Redacted())
	case cfg.MaxRequestBody < 0, cfg.MaxConcurrent < 0, cfg.Limits.MaxRequests < 0, cfg.Limits.MaxTokens < 0:
		return errors.New("limits must not be negative")
	case cfg.Initial.Requests < 0 || cfg.Initial.InputTokens < 0 ||
		cfg.Initial.OutputTokens < 0 || cfg.Initial.CacheReadTokens < 0 || cfg.Initial.CacheWriteTokens < 0:
		return errors.New("initial usage must not be negative")
	}
	return nil
}

// defaultTransport bounds each step of reaching the upstream. The answer's body is not bounded
// in time here (a long answer streams for minutes); the relay's idle timeout is.
func defaultTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  5 * time.Minute,
		ExpectContinueTimeout:  time.Second,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    8,
		MaxConnsPerHost:        64,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Exhausted says whether the budget is used up and, if so, the message refused requests get,
// naming the limit ("Shepherd: this session's model budget is used up (maxRequests 50)").
func (p *Proxy) Exhausted() (bool, string) { return p.ledger.exhausted() }

// Carry adds the usage of the session's earlier pods or runner processes (the manager's last
// word, in the task) to a proxy that has forwarded nothing yet, so that its totals, and the
// budget, continue from them. It refuses once a request went through: the counts would mix.
func (p *Proxy) Carry(prior Usage) error { return p.ledger.carry(prior) }

// Usage returns the session's totals so far.
func (p *Proxy) Usage() Usage { return p.ledger.usage() }

// Serve answers on l until ctx ends, with the limits a hostile local client calls for. The
// listener should be loopback: whoever reaches it spends the key.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    1 << 20,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("model proxy: %w", err)
	}
	return nil
}

// ServeHTTP forwards one model API call.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep, id, ok := route(p.kind, r)
	if !ok {
		p.log.V(1).Info("Refused unknown model API endpoint", "method", clip.Marked(r.Method, 16, "…"), "path", clip.Marked(r.URL.Path, 128, "…"))
		writeError(w, p.kind, http.StatusNotFound, fmt.Sprintf("Shepherd: %s %q is not a model API endpoint the proxy forwards",
			clip.Marked(r.Method, 16, "…"), clip.Marked(r.URL.Path, 128, "…")))
		return
	}
	if exhausted, why := p.Exhausted(); exhausted && ep.generation {
		writeError(w, p.kind, http.StatusForbidden, why) // without reading a body for nothing
		return
	}
	select {
	case p.turns <- struct{}{}:
		defer func() { <-p.turns }()
	case <-r.Context().Done():
		return
	}
	body, ok := p.readBody(w, r, ep)
	if !ok {
		return
	}
	model := ""
	if ep.generation {
		model, body = inspect(ep, id, body)
	}
	key, err := p.readKey()
	if err != nil {
		p.log.Error(err, "Cannot read the model API key")
		writeError(w, p.kind, http.StatusInternalServerError, "Shepherd: the model API key could not be read")
		return
	}
	var bucket string
	if ep.generation {
		// The check that counts: reserving under the ledger's lock, so that concurrent
		// requests cannot pass MaxRequests.
		var refusal string
		if bucket, refusal = p.ledger.reserve(model); refusal != "" {
			p.log.Info("Refused a model request: the budget is used up", "endpoint", ep.name, "model", model)
			writeError(w, p.kind, http.StatusForbidden, refusal)
			return
		}
	}
	p.forward(w, r, ep, id, body, key, bucket)
}

// readBody reads a POST body within the size and time bounds; a GET's body is not forwarded.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, ep endpoint) ([]byte, bool) {
	if ep.method != http.MethodPost {
		return nil, true
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.maxBody))
	_ = rc.SetReadDeadline(time.Time{})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, p.kind, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("Shepherd: the request body is larger than the proxy's limit of %d bytes", p.maxBody))
		return nil, false
	case err != nil:
		writeError(w, p.kind, http.StatusBadRequest, "Shepherd: the request body could not be read")
		return nil, false
	}
	return body, true
}

func (p *Proxy) readKey() (string, error) {
	if p.key == nil {
		return "", nil
	}
	key, err := p.key()
	if err != nil {
		return "", err
	}
	key = strings.TrimSpace(key)
	if !validKey(key) {
		return "", errors.New("the key holds control characters")
	}
	return key, nil
}

// forward sends the request upstream and relays the answer. bucket is set for a generation
// request, whose reservation it settles whatever happens.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ep endpoint, id string, body []byte, key, bucket string) {
	// Cancelled when the client goes away, or the upstream goes quiet: the transport then
	// abandons the upstream request.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var reqBody io.Reader = http.NoBody
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, ep.method, target(p.upstream, ep, id, r.URL.Query()).String(), reqBody)
	if err != nil {
		p.settle(ep, bucket, tokens{}, false)
		writeError(w, p.kind, http.StatusInternalServerError, "Shepherd: the upstream request could not be made")
		return
	}
	out.Header = outgoingHeader(r.Header, p.kind, key)
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.settle(ep, bucket, tokens{}, false)
		if r.Context().Err() == nil {
			p.log.Error(err, "Cannot reach the model API", "endpoint", ep.name)
			writeError(w, p.kind, http.StatusBadGateway, "Shepherd: the model API could not be reached")
		}
		return
	}
	defer func() { _ = resp.Body.Close() }()
	p.answer(w, resp, cancel, ep, len(body), bucket)
}

// answer relays the upstream's answer, unchanged, and settles a generation request with the
// usage read from a successful one.
func (p *Proxy) answer(w http.ResponseWriter, resp *http.Response, cancel context.CancelFunc, ep endpoint, requestBytes int, bucket string) {
	copyResponseHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	var m *meter
	if ep.generation && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		m = newMeter(ep.parser(), resp.Header.Get("Content-Type"))
	}
	relayErr := relay(w, resp.Body, m, cancel)
	var t tokens
	var unmetered bool
	if m != nil {
		t, unmetered = m.finish(requestBytes)
	}
	p.settle(ep, bucket, t, unmetered)
	p.log.V(1).Info("Model request", "endpoint", ep.name, "model", bucket, "status", resp.StatusCode,
		"inputTokens", t.input, "outputTokens", t.output, "cacheReadTokens", t.cacheRead, "cacheWriteTokens", t.cacheWrite,
		"unmetered", unmetered, "cut", relayErr != nil)
}

func (p *Proxy) settle(ep endpoint, bucket string, t tokens, unmetered bool) {
	if ep.generation {
		p.ledger.settle(bucket, t, unmetered)
	}
}

// relay copies the answer to the client as it arrives, flushing each piece so that a stream
// reaches the CLI event by event, and feeds m on the way. It stops at the first failure of
// either side. Neither side can hold it forever: an upstream silent for streamIdleTimeout is
// cancelled, and a client that stops reading for as long fails the write.
func relay(w http.ResponseWriter, body io.Reader, m *meter, cancel context.CancelFunc) error {
	idle := time.AfterFunc(streamIdleTimeout, cancel)
	defer idle.Stop()
	rc := http.NewResponseController(w)
	// The deadline is the connection's: it must not outlive this answer on a kept-alive one.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	buf := make([]byte, relayBufferBytes)
	for {
		n, err := body.Read(buf)
		idle.Reset(streamIdleTimeout)
		if n > 0 {
			if m != nil {
				m.write(buf[:n])
			}
			_ = rc.SetWriteDeadline(time.Now().Add(streamIdleTimeout))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
