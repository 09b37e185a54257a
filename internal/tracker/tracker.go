// Package tracker turns tracker issues (GitHub Issues, Linear) into what a session needs: a
// title, a body, a branch name and a prompt. Adapters live in subpackages and register
// themselves by provider name; callers pass values (API keys, tokens), never Kubernetes objects.
package tracker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Issue is a tracker issue as Shepherd needs it.
type Issue struct {
	// ID is how the user names the issue: "42" for GitHub, "ENG-123" for Linear.
	ID string
	// Key is the stable, branch-safe form of the ID ("42", "eng-123").
	Key    string
	Title  string
	Body   string
	URL    string
	Labels []string
	// State is the tracker's own word ("open", "closed", "In Progress", …).
	State string
	// Completed is true once the issue is done or cancelled.
	Completed bool
	Comments  []Comment
	// OmittedComments counts comments left out because the Project does not trust their
	// authors (set by the caller that applies the Project's policy).
	OmittedComments int
}

// Comment is one comment on an issue.
type Comment struct {
	Author string
	// Association is the author's relation to the repository (Member for Linear).
	Association scm.Association
	Body        string
	CreatedAt   time.Time
}

// ListOptions select issues for the backlog.
type ListOptions struct {
	// Labels the issues must all carry.
	Labels []string
	// Limit bounds the result (default 50, at most 250).
	Limit int
}

// Tracker is what an adapter offers. Every method is safe to retry.
type Tracker interface {
	Name() string
	// GetIssue reads an issue with its comments. ErrNotFound (scm.ErrNotFound) when missing.
	GetIssue(ctx context.Context, id string) (*Issue, error)
	// IsCompleted reports whether the issue is done (closed, completed or cancelled).
	IsCompleted(ctx context.Context, id string) (bool, error)
	// Closed reports which of ids are done (closed, completed or cancelled), each with the
	// tracker's word for its state, in as few requests as the tracker allows: one for any number
	// of ids in the common case. since bounds the look-back: none of the issues was closed
	// before it (their sessions started after). ids are as the user names them ("42", "ENG-7").
	Closed(ctx context.Context, ids []string, since time.Time) (map[string]string, error)
	// AddLabels adds labels (present ones are kept); RemoveLabels removes them (absent ones are
	// ignored).
	AddLabels(ctx context.Context, id string, labels ...string) error
	RemoveLabels(ctx context.Context, id string, labels ...string) error
	// ListIssues returns open issues carrying all the labels, newest first, without comments.
	ListIssues(ctx context.Context, opts ListOptions) ([]Issue, error)
}

// Config is what an adapter needs.
type Config struct {
	// Provider is the registry name: "github", "gitea" or "linear".
	Provider string
	// APIURL overrides the API endpoint (GitHub Enterprise, the fakes).
	APIURL string
	// Token is a GitHub token or a Linear API key.
	Token []byte
	// App authenticates GitHub as an App installation instead of Token.
	App *scm.AppCredentials
	// Repo is the GitHub repository whose issues are read.
	Repo scm.Repo
	// TeamKey is the Linear team (ENG).
	TeamKey   string
	Transport http.RoundTripper
	// Timeout bounds every request (default 30s).
	Timeout time.Duration
	Clock   scm.Clock
	Metrics *scm.Metrics
}

// ErrNotFound is returned for a missing issue (it is scm.ErrNotFound, so one check serves both).
var ErrNotFound = scm.ErrNotFound

// ErrInvalidID is returned for an issue id the tracker cannot use.
var ErrInvalidID = errors.New("invalid issue id")

// Factory builds a Tracker.
type Factory func(Config) (Tracker, error)

var (
	mu       sync.RWMutex
	registry = map[string]Factory{}
)

// Register makes a tracker available by name (from an adapter's init).
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("tracker: provider %q registered twice", name))
	}
	registry[name] = f
}

// New builds the tracker cfg.Provider names.
func New(cfg Config) (Tracker, error) {
	mu.RLock()
	f, ok := registry[cfg.Provider]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("tracker provider %q: %w (registered: %v)", cfg.Provider, scm.ErrUnsupported, Providers())
	}
	t, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("tracker provider %q: %w", cfg.Provider, err)
	}
	return t, nil
}

// Providers lists the registered names.
func Providers() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// SCMConfig is the forge client configuration of a tracker that lives in the forge (GitHub and
// Gitea issues): the same API, credentials and budget as the SCM adapter.
func (c Config) SCMConfig() scm.Config {
	return scm.Config{APIURL: c.APIURL, Token: c.Token, App: c.App, Transport: c.Transport,
		Timeout: c.Timeout, Clock: c.Clock, Metrics: c.Metrics}
}

// ParseNumber reads an issue number: "42" or "#42".
func ParseNumber(id string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(id), "#"))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("issue %q: %w: want a number such as 42 or #42", id, ErrInvalidID)
	}
	return n, nil
}

// MaxClosedQuery bounds the ids one Closed call takes; callers split larger sets.
const MaxClosedQuery = 250

// ClosedOneByOne asks IsCompleted for each of ids not yet in found (at most MaxClosedQuery), the
// fallback of a listing that could not cover them all. A missing issue counts as not closed: the
// session's own read reports it.
func ClosedOneByOne(ctx context.Context, t Tracker, ids []string, found map[string]string, word string) error {
	asked := 0
	for _, id := range ids {
		if _, ok := found[id]; ok || asked == MaxClosedQuery {
			continue
		}
		asked++
		done, err := t.IsCompleted(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if done {
			found[id] = word
		}
	}
	return nil
}

// NumberedIDs maps the issue numbers of ids ("42", "#42") to the ids as named; ids that are not
// numbers are left out (a forge's Closed has nothing to ask about them).
func NumberedIDs(ids []string) map[int]string {
	out := make(map[int]string, len(ids))
	for _, id := range ids {
		if n, err := ParseNumber(id); err == nil {
			out[n] = id
		}
	}
	return out
}
