package runnerapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// Client is the runner side of the channel.
type Client struct {
	// BaseURL of the manager's runner endpoint, for example https://shepherd-runner-api.shepherd-system.svc:8443.
	BaseURL string
	// TokenFile holds the projected service account token. It is read on every request because
	// the kubelet rotates it.
	TokenFile string
	// HTTP is the client used; its Timeout should be zero (each call sets its own deadline).
	HTTP *http.Client
	// Timeout bounds every call but the long poll; default 20s.
	Timeout time.Duration
}

// NewClient returns a client for baseURL that authenticates with the token in tokenFile and,
// when caFile is set, trusts only that CA bundle.
func NewClient(baseURL, tokenFile, caFile string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("manager URL %q must be http(s)://host[:port]", baseURL)
	}
	if tokenFile == "" {
		return nil, fmt.Errorf("a token file is required")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The manager is inside the cluster: the channel never goes through the HTTP(S)_PROXY an
	// agent may be given for the outside world (the token must not reach a proxy either).
	tr.Proxy = nil
	if caFile != "" {
		pool := &caPool{path: caFile}
		if _, err := pool.get(); err != nil {
			return nil, err
		}
		// The bundle is read again when it changes (the kubelet refreshes the projected file
		// after a CA rotation), so a long-running runner follows a rotation without a restart.
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			roots, err := pool.get()
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
				Config: &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}}
			return d.DialContext(ctx, network, addr)
		}
	} else if u.Scheme == "https" {
		return nil, fmt.Errorf("manager URL %q is https: the CA that signs the manager's certificate is needed (--ca-file)", baseURL)
	}
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), TokenFile: tokenFile, HTTP: &http.Client{Transport: tr}}, nil
}

// caPool is a CA bundle file, read again when it changes.
type caPool struct {
	path string

	mu    sync.Mutex
	mod   time.Time
	size  int64
	roots *x509.CertPool
}

func (p *caPool) get() (*x509.CertPool, error) {
	st, err := os.Stat(p.path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.roots != nil && st.ModTime().Equal(p.mod) && st.Size() == p.size {
		return p.roots, nil
	}
	pem, err := os.ReadFile(p.path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificates in %s", p.path)
	}
	p.roots, p.mod, p.size = pool, st.ModTime(), st.Size()
	return pool, nil
}

// APIError is a 4xx or 5xx answer.
type APIError struct {
	Status       int
	Message      string
	LastSequence uint64
}

func (e *APIError) Error() string {
	return fmt.Sprintf("manager answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IsStatus reports whether err is an APIError with the status code.
func IsStatus(err error, code int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == code
}

// Retryable reports whether a failed call may succeed if repeated: network errors and 5xx.
func Retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return err != nil && !errors.Is(err, context.Canceled)
}

// Task fetches the session's task.
func (c *Client) Task(ctx context.Context) (*Task, error) {
	var t Task
	if err := c.do(ctx, http.MethodGet, PathTask, nil, &t, c.timeout()); err != nil {
		return nil, err
	}
	return &t, nil
}

// Report sends a report. A 409 carries the last accepted sequence in the APIError.
func (c *Client) Report(ctx context.Context, r Report) error {
	return c.do(ctx, http.MethodPost, PathReports, r, nil, c.timeout())
}

// Pending long-polls for messages, waiting up to wait for one to arrive.
func (c *Client) Pending(ctx context.Context, wait time.Duration) ([]Message, error) {
	var l MessageList
	path := PathMessages + "?wait=" + url.QueryEscape(wait.String())
	if err := c.do(ctx, http.MethodGet, path, nil, &l, wait+c.timeout()); err != nil {
		return nil, err
	}
	return l.Messages, nil
}

// Ack acknowledges message id as delivered to the agent.
func (c *Client) Ack(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, AckPath(url.PathEscape(id)), nil, nil, c.timeout())
}

// OpenPullRequest asks the manager to open or update the session's pull request.
func (c *Client) OpenPullRequest(ctx context.Context, req PullRequestRequest) (*PullRequestResult, error) {
	var res PullRequestResult
	if err := c.do(ctx, http.MethodPost, PathPullRequest, req, &res, c.timeout()); err != nil {
		return nil, err
	}
	return &res, nil
}

// Transcript sends a batch of transcript entries; the answer says what the manager held before.
func (c *Client) Transcript(ctx context.Context, b transcript.Batch) (*transcript.BatchResult, error) {
	var res transcript.BatchResult
	if err := c.do(ctx, http.MethodPost, PathTranscript, b, &res, c.timeout()); err != nil {
		return nil, err
	}
	return &res, nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 20 * time.Second
}

func (c *Client) do(ctx context.Context, method, path string, in, out any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return fmt.Errorf("read service account token: %w", err)
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	} else if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var eb ErrorBody
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(raw))
		}
		return &APIError{Status: resp.StatusCode, Message: eb.Error, LastSequence: eb.LastSequence}
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}
