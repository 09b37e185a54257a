package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
)

// ModelConfig configures the runner's model proxy: the agent's CLI calls it with a placeholder
// key and it forwards to the Project's model API with the real one.
type ModelConfig struct {
	API agentsv1alpha1.ModelAPIKind
	// Upstream is the API's base URL (agent.modelAPI.url).
	Upstream string
	// KeyFile holds the API key, mounted in the runner's container only; "" sends none.
	KeyFile string
	Limits  modelproxy.Limits
	// EgressProxy is the egress proxy the runner reaches a named upstream through (the pod has
	// no other way out); "" goes direct. An upstream given by IP address always goes direct:
	// the egress proxy lets nobody leave without a name, and the Project's NetworkPolicy allows
	// that address instead.
	EgressProxy string
	// TokenFile authenticates the runner to the egress proxy (the projected runner token), which
	// then allows the model API's host to the runner alone: the agent in the same pod gets the
	// Project's host list, not the model API (which it would reach without a key, but could
	// still use to send data out with a key of its own).
	TokenFile string
}

func (m *ModelConfig) proxy(onUsage func(modelproxy.Usage)) (*modelproxy.Proxy, error) {
	raw := m.Upstream
	if raw == "" {
		raw = m.API.DefaultURL()
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("model API URL %q must be http(s)://host[/path]", raw)
	}
	tr, err := m.transport(u)
	if err != nil {
		return nil, err
	}
	cfg := modelproxy.Config{Kind: m.API, Upstream: u, Transport: tr, Limits: m.Limits, OnUsage: onUsage}
	if m.KeyFile != "" {
		file := m.KeyFile
		cfg.Key = func() (string, error) {
			b, err := os.ReadFile(file)
			if err != nil {
				return "", fmt.Errorf("read the model API key: %w", err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return modelproxy.New(cfg)
}

// transport reaches the upstream: through the egress proxy with the runner's token for a
// named host, directly for an IP address.
func (m *ModelConfig) transport(upstream *url.URL) (http.RoundTripper, error) {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
	if m.EgressProxy == "" || net.ParseIP(upstream.Hostname()) != nil {
		return tr, nil
	}
	pu, err := url.Parse(m.EgressProxy)
	if err != nil || pu.Host == "" {
		return nil, fmt.Errorf("egress proxy URL %q is not a URL", m.EgressProxy)
	}
	tr.Proxy = http.ProxyURL(pu)
	auth := func() (string, error) {
		b, err := os.ReadFile(m.TokenFile)
		if err != nil {
			return "", fmt.Errorf("read the runner token: %w", err)
		}
		return "Bearer " + strings.TrimSpace(string(b)), nil
	}
	tr.GetProxyConnectHeader = func(context.Context, *url.URL, string) (http.Header, error) {
		a, err := auth()
		if err != nil {
			return nil, err
		}
		return http.Header{"Proxy-Authorization": {a}}, nil
	}
	// A plain-HTTP upstream is forwarded by the proxy, not tunnelled: the credential rides on
	// the request itself.
	return proxyAuthorizing{next: tr, auth: auth}, nil
}

type proxyAuthorizing struct {
	next http.RoundTripper
	auth func() (string, error)
}

func (p proxyAuthorizing) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "http" {
		return p.next.RoundTrip(r)
	}
	a, err := p.auth()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Proxy-Authorization", a)
	return p.next.RoundTrip(r)
}

// modelEndpoint is the proxy as the agent's CLI reaches it, or nil without a model proxy.
func (r *runner) modelEndpoint() *agent.ModelEndpoint {
	if r.modelProxy == nil {
		return nil
	}
	return &agent.ModelEndpoint{API: r.cfg.Model.API, BaseURL: "http://" + r.localAddr}
}

// budgetSpent says why the model proxy refuses the session, or "".
func (r *runner) budgetSpent() string {
	if r.modelProxy == nil {
		return ""
	}
	if spent, why := r.modelProxy.Exhausted(); spent {
		return why
	}
	return ""
}
