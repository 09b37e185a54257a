package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/test/gitea"
)

// The Gitea scenario's required status context and webhook secret.
const (
	giteaContext       = "ci/build"
	giteaWebhookSecret = "gitea-webhook-secret"
)

// GiteaOptions configure StartGitea.
type GiteaOptions struct {
	// Dir is Gitea's run directory (required; it must not hold a forge yet).
	Dir string
	// Host is the node's IP: Gitea listens on every address and builds its URLs (clone URLs,
	// html_url) on this one, so that pods reach it.
	Host string
	// Log receives Gitea's progress lines (the build, when it is not cached yet).
	Log io.Writer
}

// Gitea is a real Gitea (test/gitea, built from the Go module proxy) serving the scenario's
// repository: the admin owns it and is the bot (its token reads the protection rule), the
// reviewer is a write collaborator (so its reviews are official).
type Gitea struct {
	// Server is the running forge, for what the Forge interface does not say.
	Server *gitea.Server
	// Seed is the seeded commit on main.
	Seed   string
	admin  *gitea.Client
	review *gitea.Client
	issue  int

	mu        sync.Mutex
	runs      int
	failedURL string
}

var _ Forge = (*Gitea)(nil)

// StartGitea starts Gitea on opts.Host (building it first when the cache lacks it) with the
// repository <admin>/greeter seeded, main protected (status ci/build, one approval, blocked by a
// rejecting review) and the issue; HookTo adds the repository webhook.
func StartGitea(ctx context.Context, opts GiteaOptions) (*Gitea, error) {
	srv, err := gitea.Start(ctx, gitea.Options{Dir: opts.Dir, Addr: "0.0.0.0", Host: opts.Host,
		WebhookHosts: []string{"loopback", "private"}, Log: opts.Log})
	if err != nil {
		return nil, err
	}
	g := &Gitea{Server: srv, admin: srv.Client(srv.Admin), review: srv.Client(srv.Reviewer)}
	if err := g.seed(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	return g, nil
}

func (g *Gitea) owner() string { return g.Server.Admin.Name }

func (g *Gitea) seed(ctx context.Context) error {
	owner := g.owner()
	if err := g.admin.CreateRepo(ctx, RepoName); err != nil {
		return fmt.Errorf("create %s: %w", g.Repo(), err)
	}
	var err error
	if g.Seed, err = g.admin.CommitFiles(ctx, owner, RepoName, "main", "main", SeedFiles(), "Seed greeter"); err != nil {
		return fmt.Errorf("seed %s: %w", g.Repo(), err)
	}
	if err := g.admin.AddCollaborator(ctx, owner, RepoName, g.Server.Reviewer.Name, "write"); err != nil {
		return fmt.Errorf("add the reviewer: %w", err)
	}
	if err := g.admin.Protect(ctx, owner, RepoName, gitea.Protection{Branch: "main", RequiredContexts: []string{giteaContext},
		RequiredApprovals: 1, BlockOnRejectedReviews: true}); err != nil {
		return fmt.Errorf("protect main: %w", err)
	}
	n, err := g.admin.CreateIssue(ctx, owner, RepoName, IssueTitle, IssueBody)
	if err != nil {
		return fmt.Errorf("open the issue: %w", err)
	}
	g.issue = n
	return nil
}

// HookTo creates the repository's webhook to url (a private address, which this Gitea is allowed
// to deliver to). After the seeding, so that the seeding sends the manager nothing.
func (g *Gitea) HookTo(ctx context.Context, url string) error {
	if _, err := g.admin.CreateWebhook(ctx, g.owner(), RepoName, url, giteaWebhookSecret); err != nil {
		return fmt.Errorf("create the webhook: %w", err)
	}
	return nil
}

func (g *Gitea) Name() string          { return "Gitea " + g.Server.Version }
func (g *Gitea) Provider() string      { return "gitea" }
func (g *Gitea) Repo() string          { return g.owner() + "/" + RepoName }
func (g *Gitea) CloneURL() string      { return g.Server.CloneURL(g.owner(), RepoName) }
func (g *Gitea) APIURL() string        { return g.Server.APIURL }
func (g *Gitea) Token() string         { return g.Server.Admin.Token }
func (g *Gitea) WebhookSecret() string { return giteaWebhookSecret }
func (g *Gitea) Issue() int            { return g.issue }
func (g *Gitea) Check() string         { return giteaContext }
func (g *Gitea) Close() error          { return g.Server.Stop() }

// FailureEvidence is the failing status's target URL (empty before CI failed).
func (g *Gitea) FailureEvidence() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failedURL
}

type giteaPull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	State   string `json:"state"`
	Merged  bool   `json:"merged"`
	Merge   string `json:"merge_commit_sha"`
	Head    struct {
		Ref   string `json:"ref"`
		Label string `json:"label"`
		SHA   string `json:"sha"`
	} `json:"head"`
}

func (p giteaPull) convert() PullRequest {
	branch := p.Head.Ref
	if strings.HasPrefix(branch, "refs/pull/") {
		branch = p.Head.Label // the head branch was deleted; the label keeps its name
	}
	return PullRequest{Number: p.Number, URL: p.HTMLURL, HeadBranch: branch, HeadSHA: p.Head.SHA, State: p.State,
		Merged: p.Merged, MergeSHA: p.Merge}
}

func (g *Gitea) PullRequest(ctx context.Context, n int) (PullRequest, error) {
	var p giteaPull
	if err := g.admin.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", g.Repo(), n), nil, &p); err != nil {
		return PullRequest{}, err
	}
	return p.convert(), nil
}

func (g *Gitea) PullRequestsFor(ctx context.Context, branch string) ([]PullRequest, error) {
	var ps []giteaPull
	if err := g.admin.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/pulls?state=all&limit=50", g.Repo()), nil, &ps); err != nil {
		return nil, err
	}
	var out []PullRequest
	for _, p := range ps {
		if pr := p.convert(); pr.HeadBranch == branch {
			out = append(out, pr)
		}
	}
	return out, nil
}

// Commits reads /pulls/{n}/commits and orders them by parentage, oldest first.
func (g *Gitea) Commits(ctx context.Context, n int) ([]Commit, error) {
	var cs []struct {
		SHA    string `json:"sha"`
		Commit struct {
			Message string `json:"message"`
			Author  struct {
				Name string    `json:"name"`
				Date time.Time `json:"date"`
			} `json:"author"`
		} `json:"commit"`
		Parents []struct {
			SHA string `json:"sha"`
		} `json:"parents"`
	}
	if err := g.admin.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d/commits?limit=50", g.Repo(), n), nil, &cs); err != nil {
		return nil, err
	}
	// The first commit's parent is not in the pull request; follow the children from there.
	idx := map[string]int{}
	for i, c := range cs {
		idx[c.SHA] = i
	}
	child := map[string]string{}
	var first string
	for _, c := range cs {
		if len(c.Parents) == 0 {
			continue
		}
		if _, ok := idx[c.Parents[0].SHA]; ok {
			child[c.Parents[0].SHA] = c.SHA
		} else {
			first = c.SHA
		}
	}
	var out []Commit
	for sha := first; sha != "" && len(out) < len(cs); sha = child[sha] {
		c := cs[idx[sha]]
		subject, _, _ := strings.Cut(c.Commit.Message, "\n")
		out = append(out, Commit{SHA: sha, Author: c.Commit.Author.Name, When: c.Commit.Author.Date, Message: subject})
	}
	if len(out) != len(cs) {
		return nil, fmt.Errorf("pull request #%d: %d commits do not form one line", n, len(cs))
	}
	return out, nil
}

// ReportCI sets the commit status ci/build on sha, with a target URL per build as CI would.
func (g *Gitea) ReportCI(ctx context.Context, sha string, passed bool) error {
	g.mu.Lock()
	g.runs++
	target := fmt.Sprintf("https://ci.example.com/%s/builds/%d", g.Repo(), g.runs)
	g.mu.Unlock()
	state := "success"
	if !passed {
		state = "failure"
	}
	if err := g.admin.SetStatus(ctx, g.owner(), RepoName, sha, giteaContext, state, target); err != nil {
		return err
	}
	if !passed {
		g.mu.Lock()
		g.failedURL = target
		g.mu.Unlock()
	}
	return nil
}

// RequestChanges submits the reviewer's rejecting review with a line comment on greet.go:1.
func (g *Gitea) RequestChanges(ctx context.Context, n int) error {
	_, err := g.review.Review(ctx, g.owner(), RepoName, n, "REQUEST_CHANGES", ReviewBody,
		gitea.ReviewComment{Path: ReviewPath, Line: ReviewLine, Body: ReviewComment})
	return err
}

// Approve submits the reviewer's approval of the pull request's current head, which replaces
// its rejection as its official review. The head is named (as the browser does), since Shepherd
// merges only on an approval of the head it merges.
func (g *Gitea) Approve(ctx context.Context, n int) error {
	pr, err := g.PullRequest(ctx, n)
	if err != nil {
		return err
	}
	_, err = g.review.ReviewAt(ctx, g.owner(), RepoName, n, pr.HeadSHA, "APPROVED", ApprovalBody)
	return err
}
