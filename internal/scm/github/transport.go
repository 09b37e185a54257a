package github

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// maxBody bounds every response the adapter reads into memory.
const maxBody = 16 << 20

type opKey struct{}

// withOp names the operation of the requests made with ctx, for metrics.
func withOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

func opOf(req *http.Request) string {
	if op, ok := req.Context().Value(opKey{}).(string); ok {
		return op
	}
	return "other"
}

// limitState is what the forge last said about one rate-limit resource.
type limitState struct {
	known     bool
	limit     int
	remaining int
	reset     time.Time
}

type cachedResponse struct {
	etag   string
	status int
	header http.Header
	body   []byte
}

// governor is the adapter's outermost transport. For every request to the API host it counts the
// request in metrics, refuses or waits while a limit is known to be exhausted, revalidates GET
// answers with their ETag (a 304 is served from the cache and is free on GitHub), retries once
// after waiting out a rate limit, and bounds each attempt with the timeout. Requests to other
// hosts (log downloads) are only timed and counted.
type governor struct {
	next     http.RoundTripper
	apiHost  string
	clock    scm.Clock
	metrics  *scm.Metrics
	identity string
	timeout  time.Duration
	maxWait  time.Duration

	mu        sync.Mutex
	limits    map[string]*limitState
	secondary time.Time
	// secondaryStreak grows the wait for repeated secondary limits without Retry-After.
	secondaryStreak int
	cache           *lru.Cache[string, *cachedResponse]
}

func newGovernor(next http.RoundTripper, apiHost string, cfg scm.Config, identity string) *governor {
	cache, _ := lru.New[string, *cachedResponse](4096)
	return &governor{
		next:     next,
		apiHost:  apiHost,
		clock:    scm.OrReal(cfg.Clock),
		metrics:  cfg.Metrics,
		identity: identity,
		timeout:  cfg.Timeout,
		maxWait:  cfg.MaxWait,
		limits:   map[string]*limitState{},
		cache:    cache,
	}
}

func resourceOf(req *http.Request) (kind, resource string) {
	p := req.URL.Path
	switch {
	case strings.HasSuffix(p, "/graphql"):
		return scm.KindGraphQL, "graphql"
	case strings.Contains(p, "/search/"):
		return scm.KindREST, "search"
	}
	return scm.KindREST, "core"
}

func (g *governor) count(kind, op, outcome string) {
	if g.metrics != nil {
		g.metrics.Requests.WithLabelValues(providerName, kind, op, outcome).Inc()
	}
}

// RoundTrip implements http.RoundTripper.
func (g *governor) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != g.apiHost {
		resp, err := g.attempt(req)
		outcome := scm.OutcomeOK
		if err != nil {
			outcome = scm.OutcomeNetworkError
		}
		g.count("download", opOf(req), outcome)
		return resp, err
	}
	kind, resource := resourceOf(req)
	op := opOf(req)
	var body []byte
	if req.Body != nil && req.GetBody == nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		body = b
	}
	cacheKey := ""
	if req.Method == http.MethodGet {
		cacheKey = req.Header.Get("Accept") + " " + req.URL.String()
	}
	for attempt := 0; ; attempt++ {
		if err := g.waitForBudget(req.Context(), resource); err != nil {
			g.count(kind, op, scm.OutcomeRefusedBeforeSend)
			return nil, err
		}
		r := req.Clone(req.Context())
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		} else if req.GetBody != nil {
			b, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("rewind request body: %w", err)
			}
			r.Body = b
		}
		var cached *cachedResponse
		if cacheKey != "" {
			if c, ok := g.cache.Get(cacheKey); ok {
				cached = c
				r.Header.Set("If-None-Match", c.etag)
			}
		}
		resp, err := g.attempt(r)
		if err != nil {
			g.count(kind, op, scm.OutcomeNetworkError)
			return nil, err
		}
		g.observe(resource, resp.Header)
		switch {
		case resp.StatusCode == http.StatusNotModified && cached != nil:
			g.count(kind, op, scm.OutcomeNotModified)
			if g.metrics != nil {
				g.metrics.NotModified.WithLabelValues(providerName, op).Inc()
			}
			return cached.response(r, resp.Header), nil
		case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests:
			wait, secondary, limited := g.limitWait(resource, resp)
			if !limited {
				g.count(kind, op, scm.OutcomeClientError)
				return resp, nil
			}
			if secondary {
				g.count(kind, op, scm.OutcomeSecondaryLimited)
			} else {
				g.count(kind, op, scm.OutcomeRateLimited)
			}
			// Wait once and try again when the limit resets soon enough; otherwise report it
			// without trying again: hammering an exhausted limit only prolongs it.
			if attempt == 0 && wait <= g.maxWait {
				if err := g.sleep(req.Context(), wait, secondary); err != nil {
					return nil, err
				}
				continue
			}
			return nil, &scm.RateLimitError{Resource: resource, Secondary: secondary, Reset: g.clock.Now().Add(wait)}
		}
		// A GraphQL 200 may still be a refusal (GitHub answers an exhausted budget with 200 and a
		// RATE_LIMITED error): Client.GraphQL counts it once it has read the answer.
		if kind != scm.KindGraphQL || resp.StatusCode != http.StatusOK {
			g.count(kind, op, scm.OutcomeOf(resp.StatusCode))
		}
		if resp.StatusCode < 300 {
			g.succeeded()
		}
		if resp.StatusCode == http.StatusOK && cacheKey != "" {
			if etag := resp.Header.Get("ETag"); etag != "" {
				b, _ := io.ReadAll(resp.Body)
				resp.Body = io.NopCloser(bytes.NewReader(b))
				g.cache.Add(cacheKey, &cachedResponse{etag: etag, status: resp.StatusCode, header: resp.Header.Clone(), body: b})
			}
		}
		return resp, nil
	}
}

// attempt sends one request under the timeout and reads the whole body, so that the timeout
// covers the body too and the caller gets a response that needs no network any more.
func (g *governor) attempt(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), g.timeout)
	defer cancel()
	resp, err := g.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: fmt.Sprintf("%s %s", r.Method, r.URL.Path), Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: "read response", Err: err}
	}
	if len(b) > maxBody {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: fmt.Sprintf("response larger than %d bytes", maxBody)}
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return resp, nil
}

func (c *cachedResponse) response(req *http.Request, fresh http.Header) *http.Response {
	h := c.header.Clone()
	for k, v := range fresh {
		if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-") {
			h[k] = v
		}
	}
	// go-github leaves its rate bookkeeping alone for cached answers.
	h.Set("X-From-Cache", "1")
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    c.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: int64(len(c.body)),
		Request:       req,
	}
}

// observe records the rate-limit headers of a response.
func (g *governor) observe(resource string, h http.Header) {
	rem, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	reset, err2 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	if r := h.Get("X-RateLimit-Resource"); r != "" {
		resource = r
	}
	limit, _ := strconv.Atoi(h.Get("X-RateLimit-Limit"))
	g.mu.Lock()
	g.limits[resource] = &limitState{known: true, limit: limit, remaining: rem, reset: time.Unix(reset, 0)}
	g.mu.Unlock()
	if g.metrics != nil {
		g.metrics.RateLimitRemaining.WithLabelValues(providerName, g.identity, resource).Set(float64(rem))
	}
}

// waitForBudget waits while a limit is known to be exhausted, if it resets within maxWait, and
// otherwise refuses without sending: hammering an exhausted limit only prolongs it.
func (g *governor) waitForBudget(ctx context.Context, resource string) error {
	now := g.clock.Now()
	g.mu.Lock()
	var until time.Time
	secondary := false
	if now.Before(g.secondary) {
		until, secondary = g.secondary, true
	}
	if l := g.limits[resource]; l != nil && l.known && l.remaining <= 0 && now.Before(l.reset) && l.reset.After(until) {
		until, secondary = l.reset, false
	}
	g.mu.Unlock()
	if until.IsZero() {
		return nil
	}
	wait := until.Sub(now)
	if wait > g.maxWait {
		return &scm.RateLimitError{Resource: resource, Secondary: secondary, Reset: until}
	}
	return g.sleep(ctx, wait, secondary)
}

func (g *governor) sleep(ctx context.Context, d time.Duration, secondary bool) error {
	reason := "primary"
	if secondary {
		reason = "secondary"
	}
	if g.metrics != nil {
		g.metrics.RateLimitWaits.WithLabelValues(providerName, g.identity, reason).Inc()
		g.metrics.RateLimitWaitSeconds.WithLabelValues(providerName, g.identity, reason).Add(d.Seconds())
	}
	if err := g.clock.Sleep(ctx, d); err != nil {
		return fmt.Errorf("wait for %s rate limit: %w", reason, err)
	}
	return nil
}

// limitWait classifies a 403/429: a primary limit (remaining 0: wait until reset), a secondary
// limit (Retry-After, or GitHub's documented one minute, growing when it repeats), or neither
// (a permission problem).
func (g *governor) limitWait(_ string, resp *http.Response) (wait time.Duration, secondary, limited bool) {
	now := g.clock.Now()
	h := resp.Header
	if ra := h.Get("Retry-After"); ra != "" {
		secs, err := strconv.Atoi(ra)
		if err == nil {
			wait = time.Duration(secs) * time.Second
			secondary = true
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" && !secondary {
		if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(reset, 0).Sub(now), time.Second), false, true
		}
		return time.Minute, false, true
	}
	if !secondary {
		b, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		var e struct {
			Message          string `json:"message"`
			DocumentationURL string `json:"documentation_url"`
		}
		_ = json.Unmarshal(b, &e)
		if !strings.Contains(strings.ToLower(e.Message), "secondary rate limit") &&
			!strings.Contains(e.DocumentationURL, "secondary-rate-limits") {
			return 0, false, false
		}
	}
	g.mu.Lock()
	if wait == 0 {
		g.secondaryStreak++
		wait = time.Minute * time.Duration(1<<min(g.secondaryStreak-1, 4))
	}
	g.secondary = now.Add(wait)
	g.mu.Unlock()
	return wait, true, true
}

// succeeded forgets past secondary limits after a success.
func (g *governor) succeeded() {
	g.mu.Lock()
	g.secondaryStreak = 0
	g.mu.Unlock()
}

var errNoAPIHost = errors.New("API URL has no host")
