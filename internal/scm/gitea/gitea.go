// Package gitea is the Gitea adapter of internal/scm: pull requests, commit statuses, reviews and
// merges over Gitea's REST API (/api/v1) with an access token. Gitea has no GraphQL and serves no
// ETags on the JSON endpoints the adapter reads, so Refresh batches what REST allows: one list of a
// repository's open pull requests (50 per page) answers every probe of that repository, and the
// combined status of each head is one more request. Importing it registers the "gitea" provider.
//
// docs/gitea.md lists where Gitea differs from GitHub and how each difference is handled.
package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

const providerName = "gitea"

func init() {
	scm.Register(providerName, func(cfg scm.Config) (scm.Provider, error) { return New(cfg) })
}

// Bounds of the adapter's reads.
const (
	// batchSize is how many probes of one repository a call carries for the price of one list
	// page (plus one combined status per pull request).
	batchSize = pageSize
	// maxListPages bounds the list of open pull requests read per repository and call (1,000);
	// pull requests beyond it are read one by one.
	maxListPages = 20
	// maxPages bounds the pages of statuses and reviews read per pull request.
	maxPages = 10
	// defaultBranchTTL is how long a repository's default branch is remembered (it is the base of
	// lookups by head when the watch names none).
	defaultBranchTTL = 10 * time.Minute
	// protectionDeniedTTL is how long the adapter stops asking for protection rules after Gitea
	// refused them (reading a rule needs repository admin).
	protectionDeniedTTL = 10 * time.Minute
)

// Provider implements scm.Provider for Gitea.
type Provider struct {
	*Client

	// conflicts remembers head/base pairs whose mergeable stayed false past conflictSettle: Gitea
	// reports false both while its conflict check runs and after it found a conflict, and a
	// pair's conflict never goes away (mergeability.go).
	conflicts *lru.Cache[mergeKey, struct{}]
	// falseSince is when a head/base pair was first read as not mergeable.
	falseSince *lru.Cache[mergeKey, time.Time]
	// conflictSettle is how long a pair reads not mergeable before it is a conflict (the
	// constant; tests shorten it).
	conflictSettle time.Duration

	mu              sync.Mutex
	defaultBranches map[scm.Repo]cachedBranch
	protectionDeny  map[scm.Repo]time.Time
	login           string
}

type cachedBranch struct {
	name string
	at   time.Time
}

// New returns the Gitea provider.
func New(cfg scm.Config) (*Provider, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	conflicts, _ := lru.New[mergeKey, struct{}](4096)
	since, _ := lru.New[mergeKey, time.Time](4096)
	return &Provider{Client: c, conflicts: conflicts, falseSince: since, conflictSettle: conflictSettle,
		defaultBranches: map[scm.Repo]cachedBranch{}, protectionDeny: map[scm.Repo]time.Time{}}, nil
}

// Name is "gitea".
func (p *Provider) Name() string { return providerName }

// BatchSize is how many pull requests of one repository one list page carries.
func (p *Provider) BatchSize() int { return batchSize }

var _ scm.Provider = (*Provider)(nil)

// CheckAccess reads the repository and reports whether the token may push.
func (p *Provider) CheckAccess(ctx context.Context, repo scm.Repo) (scm.RepoInfo, error) {
	var r apiRepo
	if err := p.Get(Op(ctx, "repos.get"), repoPath(repo), nil, &r, scm.ErrRepositoryNotFound); err != nil {
		return scm.RepoInfo{}, fmt.Errorf("check access to %s: %w", repo, err)
	}
	info := scm.RepoInfo{Repo: repo, DefaultBranch: r.DefaultBranch, Private: r.Private}
	if r.Permissions != nil {
		info.CanPush = r.Permissions.Push || r.Permissions.Admin
	}
	p.rememberDefaultBranch(repo, r.DefaultBranch)
	return info, nil
}

// defaultBranch returns the repository's default branch, remembered for defaultBranchTTL.
func (p *Provider) defaultBranch(ctx context.Context, repo scm.Repo) (string, error) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	c, ok := p.defaultBranches[repo]
	p.mu.Unlock()
	if ok && now.Sub(c.at) < defaultBranchTTL {
		return c.name, nil
	}
	info, err := p.CheckAccess(ctx, repo)
	if err != nil {
		return "", err
	}
	return info.DefaultBranch, nil
}

func (p *Provider) rememberDefaultBranch(repo scm.Repo, name string) {
	if name == "" {
		return
	}
	p.mu.Lock()
	p.defaultBranches[repo] = cachedBranch{name: name, at: p.cfg.Clock.Now()}
	p.mu.Unlock()
}

// PushCredential returns the token itself (Gitea accepts it as the git HTTP password, whatever
// the user name) with the token owner's login as the user name. Gitea tokens do not expire on
// their own.
func (p *Provider) PushCredential(ctx context.Context, repo scm.Repo) (scm.Credential, error) {
	p.mu.Lock()
	login := p.login
	p.mu.Unlock()
	if login == "" {
		var u apiUser
		if err := p.Get(Op(ctx, "user.get"), "/user", nil, &u, scm.ErrTokenRejected); err != nil {
			return scm.Credential{}, fmt.Errorf("push credential for %s: %w", repo, err)
		}
		login = u.Login
		p.mu.Lock()
		p.login = login
		p.mu.Unlock()
	}
	return scm.Credential{Username: login, Password: p.token}, nil
}

// CloneURL is the repository's HTTP clone URL on this forge.
func (p *Provider) CloneURL(repo scm.Repo) string {
	return p.webBase + "/" + url.PathEscape(repo.Owner) + "/" + url.PathEscape(repo.Name) + ".git"
}

// headSpec is how Gitea names a head in create and lookup calls: the branch for the repository
// itself, owner:branch for a fork of the same name.
func headSpec(repo scm.Repo, head scm.Head) string {
	if head.Owner != "" && !strings.EqualFold(head.Owner, repo.Owner) {
		return head.Owner + ":" + head.Branch
	}
	return head.Branch
}

// getPull reads one pull request; nil without error when it does not exist.
func (p *Provider) getPull(ctx context.Context, repo scm.Repo, number int) (*apiPull, error) {
	var g apiPull
	err := p.Get(Op(ctx, "pulls.get"), fmt.Sprintf("%s/pulls/%d", repoPath(repo), number), nil, &g, scm.ErrNotFound)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &g, nil
}

// pullByBaseHead reads the pull request of base and head (Gitea's list endpoint ignores head=).
// Gitea answers one pull request of the pair, not necessarily the newest: see locate.
func (p *Provider) pullByBaseHead(ctx context.Context, repo scm.Repo, base string, head scm.Head) (*apiPull, error) {
	var g apiPull
	path := fmt.Sprintf("%s/pulls/%s/%s", repoPath(repo), url.PathEscape(base), escapeBranch(headSpec(repo, head)))
	err := p.Get(Op(ctx, "pulls.get_by_base_head"), path, nil, &g, scm.ErrNotFound)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &g, nil
}

// escapeBranch escapes each segment of a branch name (the head is the rest of the path, so its
// slashes stay).
func escapeBranch(b string) string {
	parts := strings.Split(b, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// listOpen reads pages [firstPage, firstPage+pages) of the repository's open pull requests, most
// recently updated first, stopping at a short page. It returns them and Gitea's total count (-1
// when it did not say).
func (p *Provider) listOpen(ctx context.Context, repo scm.Repo, firstPage, pages int) ([]*apiPull, int, error) {
	var all []*apiPull
	total := -1
	for page := firstPage; page < firstPage+pages; page++ {
		var batch []*apiPull
		q := url.Values{"state": {"open"}, "sort": {"recentupdate"}, "page": {fmt.Sprint(page)}, "limit": {fmt.Sprint(pageSize)}}
		resp, err := p.call(Op(ctx, "pulls.list_open"), http.MethodGet, repoPath(repo)+"/pulls", q, nil, &batch, scm.ErrRepositoryNotFound)
		if err != nil {
			return nil, 0, err
		}
		if t := resp.totalCount(); t >= 0 {
			total = t
		}
		all = append(all, batch...)
		if len(batch) < pageSize {
			break
		}
	}
	return all, total, nil
}

func isNotFound(err error) bool { return errors.Is(err, scm.ErrNotFound) }
