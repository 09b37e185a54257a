package scm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"
)

// AccessChecker verifies that credentials reach a repository. The Project controller maps its
// errors to conditions: ErrTokenRejected, ErrPermissionDenied, ErrRepositoryNotFound,
// ErrRateLimited (with RateLimitError.Reset) and ErrUnavailable.
type AccessChecker interface {
	CheckAccess(ctx context.Context, repo Repo) (RepoInfo, error)
}

// PullRequestReader reads pull requests.
type PullRequestReader interface {
	// FindPullRequest returns the pull request whose head is head: the open one if there is one,
	// else the most recently created (a merged or closed one). ErrNotFound when there is none.
	FindPullRequest(ctx context.Context, repo Repo, head Head) (*PullRequest, error)
	// GetPullRequests reads many pull requests with as few requests as the forge allows. The
	// result is in the order of refs; a missing pull request is nil with no error.
	GetPullRequests(ctx context.Context, refs []PRRef) ([]*PullRequest, error)
}

// PullRequestWriter changes pull requests. Every method is safe to retry.
type PullRequestWriter interface {
	// CreatePullRequest opens a pull request, or returns the open one for the same head (with
	// title and body updated to the request's), so that a retry never opens a second one.
	CreatePullRequest(ctx context.Context, repo Repo, pr NewPullRequest) (*PullRequest, error)
	UpdatePullRequest(ctx context.Context, repo Repo, number int, upd PullRequestUpdate) (*PullRequest, error)
	// MergePullRequest merges if the head is still opts.ExpectedHeadSHA (HeadChangedError
	// otherwise). Merging an already merged pull request returns its merge commit.
	MergePullRequest(ctx context.Context, repo Repo, number int, opts MergeOptions) (MergeResult, error)
	Comment(ctx context.Context, repo Repo, number int, body string) error
	ClosePullRequest(ctx context.Context, repo Repo, number int) error
	// MarkReadyForReview takes an open draft out of draft (GitHub's draft flag, Gitea's WIP
	// title prefix); anything else is left as it is.
	MarkReadyForReview(ctx context.Context, repo Repo, number int) error
}

// CredentialIssuer hands out git credentials for the runner.
type CredentialIssuer interface {
	// PushCredential returns a credential that may push to repo. With a GitHub App it is an
	// installation token scoped to that one repository (contents and pull requests: write) that
	// expires within an hour; with a personal access token it is the token itself.
	PushCredential(ctx context.Context, repo Repo) (Credential, error)
}

// RefreshRequest asks for the state of one pull request, by number or, before its number is
// known, by head branch.
type RefreshRequest struct {
	Ref  PRRef // Ref.Number == 0: find the pull request for Head
	Head Head
	// Base is the branch the pull request targets, when known. A forge that looks pull requests
	// up by base and head (Gitea) uses the repository's default branch when it is empty; GitHub
	// finds them by head alone and ignores it.
	Base string
	// Full asks for reviews, threads and each check too; otherwise a cheap probe that reads the
	// state, head, mergeability, review decision and the checks' overall state.
	Full bool
}

// RefreshResult answers one RefreshRequest.
type RefreshResult struct {
	// PullRequest is nil when no pull request exists for the head (or the number).
	PullRequest *PullRequest
	// Fingerprint changes whenever anything a probe can see changes; the Poller compares it to
	// decide when a full read is due.
	Fingerprint string
	// Err is this item's error (the whole call's error is returned separately).
	Err error
	// RecheckAfter asks for a full read again after this long, because the forge was still
	// computing something the answer depends on (Gitea's conflict check: mergeability Unknown).
	// Zero when nothing is pending. The Poller treats it like a webhook hint for the item.
	RecheckAfter time.Duration
}

// Refresher is the batched read the Poller drives.
type Refresher interface {
	Refresh(ctx context.Context, reqs []RefreshRequest) ([]RefreshResult, error)
	// BatchSize is how many probes one call can carry for the price of one; the Poller fills
	// calls up to it with the pull requests closest to their deadline.
	BatchSize() int
}

// Provider is everything an SCM adapter offers.
type Provider interface {
	// Name is the registry name ("github").
	Name() string
	AccessChecker
	PullRequestReader
	PullRequestWriter
	CredentialIssuer
	Refresher
}

// AppCredentials authenticate as a GitHub App installation.
type AppCredentials struct {
	AppID          int64
	InstallationID int64
	// PrivateKey is the App's PEM-encoded RSA private key.
	PrivateKey []byte
}

// Config is what an adapter needs. The controller fills it from the Project and the Secrets it
// read; adapters never see Kubernetes objects.
type Config struct {
	// Provider is the registry name; empty means "github".
	Provider string
	// APIURL is the API base: empty for the public forge, https://HOST/api/v3 for GitHub
	// Enterprise Server, or a test server's URL.
	APIURL string
	// Token is a personal or fine-grained access token. Exactly one of Token and App.
	Token []byte
	App   *AppCredentials
	// Transport is the base HTTP transport (default http.DefaultTransport).
	Transport http.RoundTripper
	// Timeout bounds every request (default 30s).
	Timeout time.Duration
	// MaxWait is the longest a call waits for a rate limit to reset before returning a
	// RateLimitError instead (default 1m). Waiting is done with Clock.
	MaxWait time.Duration
	// Clock is the time source and sleeper (default the real clock).
	Clock Clock
	// Metrics counts requests; nil counts nothing. Share one Metrics between all adapters.
	Metrics *Metrics
	// Identity labels this budget in metrics (default: derived from the App installation, or
	// "token"). Keep it low-cardinality.
	Identity string
	// UserAgent sent with every request.
	UserAgent string
}

// Factory builds a Provider from a Config.
type Factory func(Config) (Provider, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a provider available by name. Adapters call it from init; registering a name
// twice panics, as two adapters claiming one name is a programming error.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("scm: provider %q registered twice", name))
	}
	registry[name] = f
}

// New builds the provider cfg.Provider names.
func New(cfg Config) (Provider, error) {
	name := cfg.Provider
	if name == "" {
		name = "github"
	}
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("scm provider %q: %w (registered: %v)", name, ErrUnsupported, Providers())
	}
	p, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("scm provider %q: %w", name, err)
	}
	return p, nil
}

// Providers lists the registered names.
func Providers() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// GetPullRequestsByRefresh implements PullRequestReader.GetPullRequests with an adapter's
// batched Refresh, in full.
func GetPullRequestsByRefresh(ctx context.Context, r Refresher, refs []PRRef) ([]*PullRequest, error) {
	reqs := make([]RefreshRequest, len(refs))
	for i, ref := range refs {
		if ref.Number <= 0 {
			return nil, fmt.Errorf("pull request %s: %w: number must be positive", ref, ErrInvalid)
		}
		reqs[i] = RefreshRequest{Ref: ref, Full: true}
	}
	res, err := r.Refresh(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("get %d pull requests: %w", len(refs), err)
	}
	out := make([]*PullRequest, len(res))
	var errs []error
	for i, rr := range res {
		if rr.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", refs[i], rr.Err))
		}
		out[i] = rr.PullRequest
	}
	return out, errors.Join(errs...)
}

// FindPullRequestByRefresh implements PullRequestReader.FindPullRequest with an adapter's
// Refresh: the pull request of head, in full, or ErrNotFound.
func FindPullRequestByRefresh(ctx context.Context, r Refresher, repo Repo, head Head) (*PullRequest, error) {
	res, err := r.Refresh(ctx, []RefreshRequest{{Ref: PRRef{Repo: repo}, Head: head, Full: true}})
	if err != nil {
		return nil, fmt.Errorf("find pull request for %s in %s: %w", head, repo, err)
	}
	if res[0].Err != nil {
		return nil, fmt.Errorf("find pull request for %s in %s: %w", head, repo, res[0].Err)
	}
	if res[0].PullRequest == nil {
		return nil, fmt.Errorf("pull request for %s in %s: %w", head, repo, ErrNotFound)
	}
	return res[0].PullRequest, nil
}
