package gitea

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// maxBody bounds every answer read into memory.
const maxBody = 16 << 20

// errResponseTooLarge is wrapped by the error of an answer larger than maxBody.
var errResponseTooLarge = errors.New("response too large")

// pageSize is Gitea's default (and usual maximum) page of list endpoints ([api]
// MAX_RESPONSE_ITEMS = 50).
const pageSize = 50

// Client is an authenticated client of Gitea's REST API (/api/v1). The tracker adapter shares it.
// Every request has a timeout and is counted in metrics; answers are mapped to scm's typed errors.
type Client struct {
	base     string // https://host[/prefix]/api/v1, without a trailing slash
	webBase  string // https://host[/prefix], for clone URLs
	token    string
	http     *http.Client
	cfg      scm.Config
	identity string
	// associations caches Association's answers.
	associations *lru.Cache[associationKey, associationEntry]
}

// NewClient builds a client from cfg. cfg.APIURL is Gitea's API base (https://gitea.example.com
// or https://gitea.example.com/api/v1; /api/v1 is added when missing) and cfg.Token a Gitea access
// token. GitHub App credentials are refused: Gitea has no Apps.
func NewClient(cfg scm.Config) (*Client, error) {
	if cfg.App != nil {
		return nil, fmt.Errorf("gitea: %w: GitHub App credentials; use an access token", scm.ErrUnsupported)
	}
	tok := strings.TrimSpace(string(cfg.Token))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return nil, &scm.APIError{Kind: scm.ErrTokenRejected, Message: "gitea: the access token is empty or spans lines"}
	}
	base, web, err := endpoints(cfg.APIURL)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = time.Minute
	}
	cfg.Clock = scm.OrReal(cfg.Clock)
	transport := cfg.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	identity := cfg.Identity
	if identity == "" {
		identity = "token"
	}
	associations, _ := lru.New[associationKey, associationEntry](maxAssociations)
	return &Client{base: base, webBase: web, token: tok, http: &http.Client{Transport: transport}, cfg: cfg, identity: identity,
		associations: associations}, nil
}

// endpoints derives the API base and the web base from the configured URL.
func endpoints(apiURL string) (api, web string, err error) {
	if apiURL == "" {
		return "", "", fmt.Errorf("gitea: %w: the API URL is required (https://gitea.example.com/api/v1)", scm.ErrInvalid)
	}
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("gitea: %w: API URL %q: want http(s)://host[/prefix]/api/v1", scm.ErrInvalid, apiURL)
	}
	u.RawQuery, u.Fragment = "", ""
	path := strings.TrimSuffix(u.Path, "/")
	path = strings.TrimSuffix(path, "/api/v1")
	u.Path = path
	web = u.String()
	u.Path = path + "/api/v1"
	return u.String(), web, nil
}

type opKey struct{}

// Op names the operation of the requests made with ctx, for metrics.
func Op(ctx context.Context, op string) context.Context { return context.WithValue(ctx, opKey{}, op) }

func opOf(ctx context.Context) string {
	if op, ok := ctx.Value(opKey{}).(string); ok {
		return op
	}
	return "other"
}

// response is an answer with its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request (JSON in, JSON out) and returns the answer whatever its status; only a
// transport failure is an error. notFound is what a 404 means for the caller's mapping.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in any) (*response, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = b
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	op := opOf(ctx)
	for attempt := 0; ; attempt++ {
		resp, err := c.attempt(ctx, method, u, body)
		if err != nil {
			c.count(op, scm.OutcomeNetworkError)
			return nil, err
		}
		if resp.status == http.StatusTooManyRequests || (resp.status == http.StatusServiceUnavailable && resp.header.Get("Retry-After") != "") {
			// Gitea itself has no API rate limit; a reverse proxy in front of it may have one.
			wait := retryAfter(resp.header.Get("Retry-After"))
			c.count(op, scm.OutcomeRateLimited)
			if attempt == 0 && wait <= c.cfg.MaxWait {
				if err := c.cfg.Clock.Sleep(ctx, wait); err != nil {
					return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: "wait for the rate limit", Err: err}
				}
				continue
			}
			return nil, &scm.RateLimitError{Resource: "api", Reset: c.cfg.Clock.Now().Add(wait)}
		}
		c.count(op, scm.OutcomeOf(resp.status))
		return resp, nil
	}
}

func retryAfter(v string) time.Duration {
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs >= 0 {
		return max(time.Duration(secs)*time.Second, time.Second)
	}
	return time.Minute
}

// attempt sends one request under the timeout and reads the whole body, so that the timeout
// covers the body too.
func (c *Client) attempt(ctx context.Context, method, u string, body []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	req.Header.Set("Authorization", "token "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	ua := c.cfg.UserAgent
	if ua == "" {
		ua = "shepherd"
	}
	req.Header.Set("User-Agent", ua)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: fmt.Sprintf("%s %s", method, req.URL.Path), Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: "read response", Err: err}
	}
	if len(b) > maxBody {
		return nil, &scm.APIError{Kind: scm.ErrUnavailable, Message: fmt.Sprintf("response larger than %d bytes", maxBody), Err: errResponseTooLarge}
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (c *Client) count(op, outcome string) {
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.Requests.WithLabelValues(providerName, scm.KindREST, op, outcome).Inc()
	}
}

// message is Gitea's error text: {"message": "...", "errors": [...]} or a bare string.
func (r *response) message() string {
	var e struct {
		Message string   `json:"message"`
		Errors  []string `json:"errors"`
	}
	if json.Unmarshal(r.body, &e) == nil && (e.Message != "" || len(e.Errors) > 0) {
		msg := e.Message
		for _, x := range e.Errors {
			if x != "" && !strings.Contains(msg, x) {
				msg = strings.TrimPrefix(msg+"; "+x, "; ")
			}
		}
		return msg
	}
	var s string
	if json.Unmarshal(r.body, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(r.body[:min(len(r.body), 512)]))
}

// apiError maps a refusal to a typed error. notFound is the kind a 404 means for the call.
func (r *response) apiError(notFound error) error {
	kind := scm.ErrInvalid
	switch s := r.status; {
	case s == http.StatusUnauthorized:
		kind = scm.ErrTokenRejected
	case s == http.StatusForbidden:
		kind = scm.ErrPermissionDenied
	case s == http.StatusNotFound:
		kind = notFound
	case s == http.StatusMethodNotAllowed || s == http.StatusConflict:
		kind = scm.ErrNotMergeable
	case s >= 500 && strings.Contains(r.message(), "does not exist"):
		// Gitea answers some lookups of a missing object with 500 "… does not exist" (a comment
		// on a missing issue): the object is missing, the forge is fine.
		kind = notFound
	case s >= 500:
		kind = scm.ErrUnavailable
	}
	return &scm.APIError{Kind: kind, Status: r.status, Message: r.message()}
}

// call sends a request and decodes a 2xx answer into out; other statuses are typed errors.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any, notFound error) (*response, error) {
	resp, err := c.do(ctx, method, path, query, in)
	if err != nil {
		return nil, err
	}
	if resp.status >= 300 {
		return resp, resp.apiError(notFound)
	}
	if out != nil && len(resp.body) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return resp, &scm.APIError{Kind: scm.ErrUnavailable, Status: resp.status, Message: fmt.Sprintf("decode %s %s", method, path), Err: err}
		}
	}
	return resp, nil
}

// Get reads path into out.
func (c *Client) Get(ctx context.Context, path string, query url.Values, out any, notFound error) error {
	_, err := c.call(ctx, http.MethodGet, path, query, nil, out, notFound)
	return err
}

// Send writes in with method (POST, PATCH, PUT, DELETE) and decodes the answer into out.
func (c *Client) Send(ctx context.Context, method, path string, in, out any, notFound error) error {
	_, err := c.call(ctx, method, path, nil, in, out, notFound)
	return err
}

// totalCount is the X-Total-Count header of a list answer, or -1.
func (r *response) totalCount() int {
	n, err := strconv.Atoi(r.header.Get("X-Total-Count"))
	if err != nil {
		return -1
	}
	return n
}

// repoPath is /repos/{owner}/{name}.
func repoPath(r scm.Repo) string {
	return "/repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name)
}
