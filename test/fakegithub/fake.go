// Package fakegithub is an in-process fake of the GitHub API subset Shepherd uses: REST and
// GraphQL for pull requests, checks, reviews, issues and App installation tokens, git smart HTTP
// on real bare repositories (test/gitserver), signed webhooks, ETags with free 304s, primary and
// secondary rate limits with GitHub's headers, and GraphQL cost by GitHub's documented formula.
//
// Unit tests, envtest suites, e2e and the offline demo use it (cmd/fakegithub wraps it in a
// binary). Tests drive it through its Go API (Server methods) or the same controls over HTTP
// under /_fake/. docs/scm.md lists where it deviates from GitHub.
package fakegithub

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/test/gitserver"
)

// Options configure a Server.
type Options struct {
	// Dir holds the bare repositories (a temporary directory when empty).
	Dir string
	// Clock is the fake's time (default time.Now). Rate-limit windows, timestamps and tokens use it,
	// so a test can share a simulated clock with the adapter.
	Clock func() time.Time
	// WebhookURL receives signed webhooks (HTTP POST). WebhookHandler, when set, receives them
	// in-process instead, synchronously (tests and the benchmark).
	WebhookURL     string
	WebhookHandler http.Handler
	WebhookSecret  []byte
	// CoreLimit and GraphQLLimit are the hourly budgets per identity (default 5000 each).
	CoreLimit, GraphQLLimit int
	// SecondaryPointsPerMinute caps REST points per identity per minute (GitHub: 900; GET 1,
	// mutations 5); 0 disables. GraphQLSecondaryPointsPerMinute likewise (GitHub: 2000).
	SecondaryPointsPerMinute        int
	GraphQLSecondaryPointsPerMinute int
	// MergeableUnknownFirst makes the first read after a change report mergeable UNKNOWN, as
	// GitHub does while it computes mergeability in the background.
	MergeableUnknownFirst bool
	// Logf, when set, logs each request.
	Logf func(format string, args ...any)
}

// Server is the fake GitHub.
type Server struct {
	opts Options
	git  *gitserver.Server
	dir  string
	tmp  bool

	mu            sync.Mutex
	repos         map[string]*Repo
	tokens        map[string]*identity
	apps          map[int64]*app
	installations map[int64]*installation
	budgets       map[string]*budget
	forcedLimits  []forcedLimit
	outages       map[string]int
	routeFailures map[string][]int
	nextID        int64
	stats         Stats
	logs          map[int64]string
	deliveries    []Delivery

	listener net.Listener
	srv      *http.Server
	baseURL  string
}

// Stats counts what the fake served, the way GitHub bills it.
type Stats struct {
	// RESTCounted are REST requests that counted against the primary limit.
	RESTCounted int
	// NotModified are authorised 304 answers (free).
	NotModified int
	// GraphQLQueries and GraphQLPoints count queries and their cost.
	GraphQLQueries int
	GraphQLPoints  int
	// GraphQLMutations counts mutations (markPullRequestReadyForReview).
	GraphQLMutations int
	// PrimaryRefused and SecondaryRefused count requests refused by a rate limit.
	PrimaryRefused   int
	SecondaryRefused int
	// Unauthorized counts requests with missing or bad credentials.
	Unauthorized int
	// InstallationTokens counts installation tokens minted for GitHub Apps.
	InstallationTokens int
	// ByRoute counts REST requests by route ("GET /repos/{o}/{r}/pulls/{n}"), 304s included.
	ByRoute map[string]int
	// Webhooks counts webhook deliveries by event.
	Webhooks map[string]int
}

// Delivery is one webhook the fake sent.
type Delivery struct {
	Event, ID string
	Body      []byte
	Status    int
}

// New creates a server; Start makes it listen.
func New(opts Options) (*Server, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.CoreLimit <= 0 {
		opts.CoreLimit = 5000
	}
	if opts.GraphQLLimit <= 0 {
		opts.GraphQLLimit = 5000
	}
	s := &Server{
		opts:          opts,
		repos:         map[string]*Repo{},
		tokens:        map[string]*identity{},
		apps:          map[int64]*app{},
		installations: map[int64]*installation{},
		budgets:       map[string]*budget{},
		outages:       map[string]int{},
		logs:          map[int64]string{},
		nextID:        1000,
		stats:         Stats{ByRoute: map[string]int{}, Webhooks: map[string]int{}},
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "fakegithub-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		dir, s.tmp = d, true
	}
	s.dir = dir
	g, err := gitserver.New(filepath.Join(dir, "git"))
	if err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	g.OnPush = s.onPush
	s.git = g
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" for a free port).
func (s *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.listener = l
	s.baseURL = "http://" + l.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return nil
}

// SetBaseURL sets the URL the fake puts into links (html_url, log redirects) when it is served by
// a handler of the caller's (httptest) rather than Start.
func (s *Server) SetBaseURL(u string) { s.baseURL = strings.TrimSuffix(u, "/") }

// URL is the API base (REST at its root, GraphQL at /graphql, like api.github.com).
func (s *Server) URL() string { return s.baseURL }

// EnterpriseURL is the same API in GitHub Enterprise Server's layout (/api/v3, /api/graphql).
func (s *Server) EnterpriseURL() string { return s.baseURL + "/api/v3" }

// CloneURL is the git URL of a repository ("owner/name").
func (s *Server) CloneURL(repo string) string { return s.baseURL + "/" + repo + ".git" }

// GitDir is a repository's bare directory.
func (s *Server) GitDir(repo string) string { return s.git.Path(repo) }

// Close stops the server and removes a temporary directory.
func (s *Server) Close() error {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
	}
	if s.tmp {
		return os.RemoveAll(s.dir)
	}
	return nil
}

func (s *Server) now() time.Time { return s.opts.Clock().UTC().Truncate(time.Second) }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.ByRoute = map[string]int{}
	for k, v := range s.stats.ByRoute {
		out.ByRoute[k] = v
	}
	out.Webhooks = map[string]int{}
	for k, v := range s.stats.Webhooks {
		out.Webhooks[k] = v
	}
	return out
}

// ResetStats zeroes the counters.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = Stats{ByRoute: map[string]int{}, Webhooks: map[string]int{}}
}

// Deliveries returns the webhooks sent so far.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// Repo is a repository of the fake. Its fields are the fake's state; read them under the Server's
// lock (through Server methods).
type Repo struct {
	Owner, Name   string
	ID            int64
	DefaultBranch string
	Private       bool
	// ForkOf is the parent of a fork.
	ForkOf *Repo

	protection Protection
	pulls      map[int]*pull
	issues     map[int]*issue
	nextNumber int
	checkRuns  map[string][]*checkRun // by head SHA
	statuses   map[string][]*status   // by SHA, oldest first
	refs       map[string]string      // branch → SHA, as last seen
	graph      map[string][]string    // commit → parents; nil when stale
	mergeCache map[string]bool        // "base head" → conflicts
	ancestry   map[string]bool        // "a b" → a is an ancestor of b
	// associations are the author associations SetAssociation set, by lower-case login.
	associations map[string]string
}

// FullName is "owner/name".
func (r *Repo) FullName() string { return r.Owner + "/" + r.Name }

// association is what GitHub reports as a login's author_association on the repository: OWNER
// for the repository's owner, what SetAssociation said, and COLLABORATOR for everyone else. The
// last is the fake's choice, not GitHub's (which says NONE for a stranger): the fake's users are
// the tests' team unless a test names an outsider.
func (r *Repo) association(login string) string {
	if strings.EqualFold(login, r.Owner) {
		return "OWNER"
	}
	if a, ok := r.associations[strings.ToLower(login)]; ok {
		return a
	}
	return "COLLABORATOR"
}

// Protection is the base branch protection of a repository (one rule set for all bases).
type Protection struct {
	// RequiredChecks are check run names or status contexts that must pass.
	RequiredChecks []string
	// RequiredApprovals is how many approving reviews are needed (0: reviews not required).
	RequiredApprovals int
	// Strict requires the head to be up to date with the base (mergeStateStatus BEHIND).
	Strict bool
}

type pull struct {
	Number         int
	NodeID         string
	Title, Body    string
	State          string // open, closed
	Merged         bool
	MergedAt       time.Time
	ClosedAt       time.Time
	MergeCommitSHA string
	Draft          bool
	Author         string
	HeadRepo       *Repo
	HeadRef        string
	HeadSHA        string
	BaseRef        string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	Reviews        []*review
	Threads        []*thread
	Comments       []*comment
	Conflicting    *bool // a test's override of the real merge check
	// seenMergeable is the (base, head) pair mergeability was last reported for, for
	// MergeableUnknownFirst.
	seenMergeable string
	// diff is the changed lines of the (base, head) pair diffPair.
	diffPair string
	diff     diffStat
}

type review struct {
	ID          int64
	NodeID      string
	User        string
	State       string // APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED
	Body        string
	SubmittedAt time.Time
	CommitID    string
}

type thread struct {
	NodeID   string
	Path     string
	Line     int
	Resolved bool
	Outdated bool
	Comments []*comment
}

type comment struct {
	ID        int64
	NodeID    string
	User      string
	Body      string
	CreatedAt time.Time
	Path      string
	Line      int
}

type checkRun struct {
	ID          int64
	NodeID      string
	Name        string
	HeadSHA     string
	Status      string // queued, in_progress, completed
	Conclusion  string // success, failure, neutral, cancelled, skipped, timed_out, action_required
	DetailsURL  string
	App         string // slug
	StartedAt   time.Time
	CompletedAt time.Time
	SuiteID     int64
}

type status struct {
	ID          int64
	NodeID      string
	Context     string
	State       string // error, failure, pending, success
	TargetURL   string
	Description string
	CreatedAt   time.Time
}

type issue struct {
	Number    int
	NodeID    string
	Title     string
	Body      string
	State     string
	Labels    []string
	User      string
	Comments  []*comment
	CreatedAt time.Time
	UpdatedAt time.Time
	ClosedAt  time.Time
}

func (s *Server) id() int64 {
	s.nextID++
	return s.nextID
}

// nodeID makes a GitHub-looking global node id.
func nodeID(kind string, id int64) string {
	return kind + "_" + strings.TrimRight(base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%s:%d", kind, id))), "=")
}

func etagOf(body []byte) string {
	h := sha256.Sum256(body)
	return `W/"` + hex.EncodeToString(h[:16]) + `"`
}

func (s *Server) repo(full string) *Repo { return s.repos[full] }

func (s *Server) repoNames() []string {
	out := make([]string, 0, len(s.repos))
	for n := range s.repos {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}
