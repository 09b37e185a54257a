// Package github is the GitHub adapter of internal/scm: REST through google/go-github (with ETag
// revalidation and rate-limit governance in its transport), batched GraphQL for reading pull
// requests, and GitHub App or token authentication. Importing it registers the "github"
// provider.
package github

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gh "github.com/google/go-github/v88/github"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

const providerName = "github"

func init() {
	scm.Register(providerName, func(cfg scm.Config) (scm.Provider, error) { return New(cfg) })
}

// Defaults of the adapter.
const (
	defaultAPIURL  = "https://api.github.com"
	defaultTimeout = 30 * time.Second
	defaultMaxWait = time.Minute
	// probeBatch is how many pull requests one probe query reads. A probe has no connections, so
	// GitHub charges the query's minimum (1 point) whatever the count; 100 keeps the query small
	// enough to answer well within GitHub's time limit.
	probeBatch = 100
	// fullBatch bounds the full reads per query: each costs 5 connection requests, so 25 full
	// reads are 125 requests, one point (GitHub rounds requests/100).
	fullBatch = 25
)

// Client is an authenticated GitHub API client: REST (go-github) and GraphQL over one governed
// transport. The tracker adapter shares it.
type Client struct {
	rest       *gh.Client
	graphqlURL string
	http       *http.Client
	gov        *governor
	auth       authenticator
	cfg        scm.Config
	identity   string
}

// NewClient builds a Client from cfg. The API URL decides the layout: empty for github.com,
// https://HOST/api/v3 for GitHub Enterprise Server (GraphQL at /api/graphql), any other URL is
// treated like api.github.com (REST at its root, GraphQL at /graphql), which is what the fake
// GitHub serves.
func NewClient(cfg scm.Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = defaultMaxWait
	}
	cfg.Clock = scm.OrReal(cfg.Clock)
	base := cfg.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	restURL, graphqlURL, err := endpoints(cfg.APIURL)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(restURL)
	if u.Host == "" {
		return nil, errNoAPIHost
	}
	auth, identity, err := newAuthenticator(cfg, base, restURL)
	if err != nil {
		return nil, err
	}
	if cfg.Identity != "" {
		identity = cfg.Identity
	}
	gov := newGovernor(&authTransport{next: base, auth: auth, apiHost: u.Host}, u.Host, cfg, identity)
	hc := &http.Client{Transport: gov}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "shepherd"
	}
	rest, err := gh.NewClient(gh.WithHTTPClient(hc), gh.WithURLs(&restURL, &restURL), gh.WithUserAgent(ua),
		// The governor enforces limits; go-github's own pre-emptive check would refuse instead
		// of waiting and cannot see GraphQL.
		gh.WithDisableRateLimitCheck())
	if err != nil {
		return nil, fmt.Errorf("github client: %w", err)
	}
	return &Client{rest: rest, graphqlURL: graphqlURL, http: hc, gov: gov, auth: auth, cfg: cfg, identity: identity}, nil
}

// REST is the go-github client (governed, authenticated).
func (c *Client) REST() *gh.Client { return c.rest }

// Op names the operation of requests made with the returned context, for metrics.
func Op(ctx context.Context, op string) context.Context { return withOp(ctx, op) }

// endpoints derives the REST base (with a trailing slash) and the GraphQL URL.
func endpoints(apiURL string) (rest, graphql string, err error) {
	if apiURL == "" {
		apiURL = defaultAPIURL
	}
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("API URL %q: want http(s)://host[/api/v3]", apiURL)
	}
	path := strings.TrimSuffix(u.Path, "/")
	if strings.HasSuffix(path, "/api/v3") {
		prefix := strings.TrimSuffix(path, "/api/v3")
		u.Path = prefix + "/api/v3/"
		rest = u.String()
		u.Path = prefix + "/api/graphql"
		return rest, u.String(), nil
	}
	u.Path = path + "/"
	rest = u.String()
	u.Path = path + "/graphql"
	return rest, u.String(), nil
}

// Provider implements scm.Provider for GitHub.
type Provider struct {
	*Client
	// threadComments caches texts by node id: the first comment of review threads, and the
	// bodies of conversation comments and reviews. They never change (edits aside), so each is
	// read once. Bodies are cut at scm.MaxTextBytes, so the cache holds at most 64 MiB of text.
	threadComments *lru.Cache[string, threadComment]
	// jobLogs caches log excerpts of finished jobs by job id: finished logs never change.
	jobLogs *lru.Cache[int64, string]
	// unknownSince is when a pull request's mergeability first read unknown at its head (see
	// mergeRecheck), by node id and head.
	unknownSince *lru.Cache[string, time.Time]

	credMu sync.Mutex
	creds  map[scm.Repo]*repoToken
}

type threadComment struct {
	Author, Body, URL string
	Association       scm.Association
}

// New returns the GitHub provider.
func New(cfg scm.Config) (*Provider, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	tc, _ := lru.New[string, threadComment](8192)
	jl, _ := lru.New[int64, string](2048)
	us, _ := lru.New[string, time.Time](4096)
	return &Provider{Client: c, threadComments: tc, jobLogs: jl, unknownSince: us, creds: map[scm.Repo]*repoToken{}}, nil
}

// Name is "github".
func (p *Provider) Name() string { return providerName }

// BatchSize is how many probes one GraphQL query carries.
func (p *Provider) BatchSize() int { return probeBatch }

var _ scm.Provider = (*Provider)(nil)
