package github

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	gh "github.com/google/go-github/v88/github"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// restError maps a go-github error to a typed scm error. notFound is the kind a 404 means for
// the call (a repository for CheckAccess, a pull request elsewhere).
func restError(err error, notFound error) error {
	if err == nil {
		return nil
	}
	var rl *scm.RateLimitError
	if errors.As(err, &rl) {
		return rl
	}
	var ae *scm.APIError
	if errors.As(err, &ae) {
		return ae
	}
	var er *gh.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		status := er.Response.StatusCode
		kind := scm.ErrInvalid
		switch {
		case status == http.StatusUnauthorized:
			kind = scm.ErrTokenRejected
		case status == http.StatusForbidden:
			kind = scm.ErrPermissionDenied
		case status == http.StatusNotFound:
			kind = notFound
		case status == http.StatusMethodNotAllowed:
			kind = scm.ErrNotMergeable
		case status >= 500:
			kind = scm.ErrUnavailable
		}
		msg := er.Message
		for _, e := range er.Errors {
			if e.Message != "" {
				msg += "; " + e.Message
			}
		}
		return &scm.APIError{Kind: kind, Status: status, Message: msg, Err: err}
	}
	return mapTransportError(err)
}

// CheckAccess reads the repository (revalidated with its ETag, so a healthy Project costs
// nothing) and reports whether the credentials may push.
func (p *Provider) CheckAccess(ctx context.Context, repo scm.Repo) (scm.RepoInfo, error) {
	r, _, err := p.rest.Repositories.Get(withOp(ctx, "repos.get"), repo.Owner, repo.Name)
	if err != nil {
		return scm.RepoInfo{}, fmt.Errorf("check access to %s: %w", repo, restError(err, scm.ErrRepositoryNotFound))
	}
	info := scm.RepoInfo{Repo: repo, DefaultBranch: r.GetDefaultBranch(), Private: r.GetPrivate()}
	if perms := r.GetPermissions(); perms != nil {
		info.CanPush = perms.GetPush() || perms.GetAdmin() || perms.GetMaintain()
	} else if a, ok := p.auth.(*appAuth); ok {
		// Installation tokens get no permissions block: the token's own permissions say.
		if tp, err := a.itr.Permissions(); err == nil {
			info.CanPush = tp.GetContents() == "write"
		}
	}
	return info, nil
}

// openPullForHead lists the open pull request of a head (owner:branch), revalidated by ETag.
func (p *Provider) openPullForHead(ctx context.Context, repo scm.Repo, head scm.Head) (*gh.PullRequest, error) {
	owner := head.Owner
	if owner == "" {
		owner = repo.Owner
	}
	prs, _, err := p.rest.PullRequests.List(withOp(ctx, "pulls.list_by_head"), repo.Owner, repo.Name, &gh.PullRequestListOptions{
		State: "open", Head: owner + ":" + head.Branch, ListOptions: gh.ListOptions{PerPage: 10},
	})
	if err != nil {
		return nil, restError(err, scm.ErrRepositoryNotFound)
	}
	if len(prs) == 0 {
		return nil, nil
	}
	return prs[0], nil
}

// CreatePullRequest opens a pull request or returns (and updates) the open one of the same head.
func (p *Provider) CreatePullRequest(ctx context.Context, repo scm.Repo, in scm.NewPullRequest) (*scm.PullRequest, error) {
	if in.Head.Branch == "" || in.Base == "" || in.Title == "" {
		return nil, fmt.Errorf("create pull request: %w: head, base and title are required", scm.ErrInvalid)
	}
	existing, err := p.openPullForHead(ctx, repo, in.Head)
	if err != nil {
		return nil, fmt.Errorf("create pull request for %s: %w", in.Head, err)
	}
	if existing == nil {
		head := in.Head.Branch
		if in.Head.Owner != "" && in.Head.Owner != repo.Owner {
			head = in.Head.Owner + ":" + in.Head.Branch
		}
		created, _, err := p.rest.PullRequests.Create(withOp(ctx, "pulls.create"), repo.Owner, repo.Name, &gh.NewPullRequest{
			Title: gh.Ptr(in.Title), Head: gh.Ptr(head), Base: gh.Ptr(in.Base), Body: gh.Ptr(in.Body), Draft: gh.Ptr(in.Draft),
		})
		if err == nil {
			return p.restPR(repo, created), nil
		}
		// A concurrent create (or a lost answer to ours) wins: return that one.
		if existing, lerr := p.openPullForHead(ctx, repo, in.Head); lerr == nil && existing != nil {
			return p.updateIfDifferent(ctx, repo, existing, in)
		}
		return nil, fmt.Errorf("create pull request for %s: %w", in.Head, restError(err, scm.ErrRepositoryNotFound))
	}
	return p.updateIfDifferent(ctx, repo, existing, in)
}

func (p *Provider) updateIfDifferent(ctx context.Context, repo scm.Repo, existing *gh.PullRequest, in scm.NewPullRequest) (*scm.PullRequest, error) {
	if existing.GetTitle() == in.Title && existing.GetBody() == in.Body {
		return p.restPR(repo, existing), nil
	}
	return p.UpdatePullRequest(ctx, repo, existing.GetNumber(), scm.PullRequestUpdate{Title: &in.Title, Body: &in.Body})
}

// UpdatePullRequest changes the title and/or body.
func (p *Provider) UpdatePullRequest(ctx context.Context, repo scm.Repo, number int, upd scm.PullRequestUpdate) (*scm.PullRequest, error) {
	edit := &gh.PullRequest{Title: upd.Title, Body: upd.Body}
	pr, _, err := p.rest.PullRequests.Edit(withOp(ctx, "pulls.update"), repo.Owner, repo.Name, number, edit)
	if err != nil {
		return nil, fmt.Errorf("update pull request %s#%d: %w", repo, number, restError(err, scm.ErrNotFound))
	}
	return p.restPR(repo, pr), nil
}

var headModified = regexp.MustCompile(`(?i)head branch was modified|sha.*(does not match|mismatch)`)

// MergePullRequest merges, guarded by the expected head SHA (GitHub refuses with 409 when the
// head moved). An already merged pull request with that head returns its merge commit.
func (p *Provider) MergePullRequest(ctx context.Context, repo scm.Repo, number int, opts scm.MergeOptions) (scm.MergeResult, error) {
	if opts.ExpectedHeadSHA == "" {
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w: the expected head SHA is required", repo, number, scm.ErrInvalid)
	}
	method := opts.Method
	if method == "" {
		method = scm.MergeSquash
	}
	res, _, err := p.rest.PullRequests.Merge(withOp(ctx, "pulls.merge"), repo.Owner, repo.Name, number, opts.CommitMessage, &gh.PullRequestOptions{
		CommitTitle: opts.CommitTitle, SHA: opts.ExpectedHeadSHA, MergeMethod: string(method),
		DontDefaultIfBlank: opts.CommitMessage == "",
	})
	if err == nil && res.GetMerged() {
		return scm.MergeResult{SHA: res.GetSHA()}, nil
	}
	var er *gh.ErrorResponse
	if errors.As(err, &er) && er.Response != nil && (er.Response.StatusCode == http.StatusConflict || headModified.MatchString(er.Message)) {
		cur, gerr := p.getREST(ctx, repo, number)
		actual := ""
		if gerr == nil {
			actual = cur.HeadSHA
		}
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, &scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: actual})
	}
	// Refused: it may be merged already (a retry after a lost answer).
	cur, gerr := p.getREST(ctx, repo, number)
	if gerr == nil && cur.State == scm.StateMerged {
		if cur.HeadSHA != opts.ExpectedHeadSHA {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: merged at another head: %w", repo, number,
				&scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: cur.HeadSHA})
		}
		return scm.MergeResult{SHA: cur.MergeCommitSHA}, nil
	}
	if gerr == nil && cur.HeadSHA != "" && cur.HeadSHA != opts.ExpectedHeadSHA {
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, &scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: cur.HeadSHA})
	}
	if err == nil {
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w: %s", repo, number, scm.ErrNotMergeable, res.GetMessage())
	}
	return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, restError(err, scm.ErrNotFound))
}

// Comment adds a comment to the pull request's conversation.
func (p *Provider) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	_, _, err := p.rest.Issues.CreateComment(withOp(ctx, "issues.comment"), repo.Owner, repo.Name, number, &gh.IssueComment{Body: gh.Ptr(body)})
	if err != nil {
		return fmt.Errorf("comment on %s#%d: %w", repo, number, restError(err, scm.ErrNotFound))
	}
	return nil
}

// ClosePullRequest closes the pull request; closing a closed or merged one succeeds.
func (p *Provider) ClosePullRequest(ctx context.Context, repo scm.Repo, number int) error {
	cur, err := p.getREST(ctx, repo, number)
	if err != nil {
		return fmt.Errorf("close %s#%d: %w", repo, number, err)
	}
	if cur.State != scm.StateOpen {
		return nil
	}
	_, _, err = p.rest.PullRequests.Edit(withOp(ctx, "pulls.close"), repo.Owner, repo.Name, number, &gh.PullRequest{State: gh.Ptr("closed")})
	if err != nil {
		return fmt.Errorf("close %s#%d: %w", repo, number, restError(err, scm.ErrNotFound))
	}
	return nil
}

// markReadyMutation is GitHub's way to take a pull request out of draft: REST cannot.
const markReadyMutation = `mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }`

// MarkReadyForReview takes the pull request out of draft (the GraphQL mutation
// markPullRequestReadyForReview, by the pull request's node id read over REST). A pull request
// that is not an open draft is left as it is.
func (p *Provider) MarkReadyForReview(ctx context.Context, repo scm.Repo, number int) error {
	g, _, err := p.rest.PullRequests.Get(withOp(ctx, "pulls.get"), repo.Owner, repo.Name, number)
	if err != nil {
		return fmt.Errorf("mark %s#%d ready: %w", repo, number, restError(err, scm.ErrNotFound))
	}
	if !g.GetDraft() || g.GetState() != "open" {
		return nil
	}
	var data struct {
		Mark *struct {
			PullRequest struct {
				IsDraft bool `json:"isDraft"`
			} `json:"pullRequest"`
		} `json:"markPullRequestReadyForReview"`
	}
	errs, err := p.GraphQL(ctx, "pulls.ready", markReadyMutation, map[string]any{"id": g.GetNodeID()}, 1, &data)
	if err != nil {
		return fmt.Errorf("mark %s#%d ready: %w", repo, number, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("mark %s#%d ready: %s: %w", repo, number, errs[0].Message, scm.ErrInvalid)
	}
	if data.Mark == nil || data.Mark.PullRequest.IsDraft {
		return fmt.Errorf("mark %s#%d ready: GitHub answered without taking it out of draft", repo, number)
	}
	return nil
}

// getREST reads one pull request over REST (ETag-revalidated).
func (p *Provider) getREST(ctx context.Context, repo scm.Repo, number int) (*scm.PullRequest, error) {
	pr, _, err := p.rest.PullRequests.Get(withOp(ctx, "pulls.get"), repo.Owner, repo.Name, number)
	if err != nil {
		return nil, restError(err, scm.ErrNotFound)
	}
	return p.restPR(repo, pr), nil
}

// restPR converts a REST pull request. REST does not carry reviews, threads or checks; the
// Poller fills those from GraphQL.
func (p *Provider) restPR(repo scm.Repo, g *gh.PullRequest) *scm.PullRequest {
	return ConvertREST(repo, g, p.cfg.Clock.Now())
}

// ConvertREST maps a REST pull request object to the neutral type (state, head, base,
// mergeability; no reviews or checks).
func ConvertREST(repo scm.Repo, g *gh.PullRequest, fetched time.Time) *scm.PullRequest {
	pr := &scm.PullRequest{
		Repo:      repo,
		Number:    g.GetNumber(),
		URL:       g.GetHTMLURL(),
		Title:     g.GetTitle(),
		Body:      g.GetBody(),
		Draft:     g.GetDraft(),
		Additions: g.GetAdditions(),
		Deletions: g.GetDeletions(),
		HeadSHA:   g.GetHead().GetSHA(),
		BaseRef:   g.GetBase().GetRef(),
		UpdatedAt: g.GetUpdatedAt().Time,
		FetchedAt: fetched,
		Checks:    scm.Checks{State: scm.ChecksNone},
		// REST's review decision is not in the pull request object.
		ReviewDecision: scm.ReviewNone,
	}
	pr.Head = scm.Head{Branch: g.GetHead().GetRef()}
	if r := g.GetHead().GetRepo(); r != nil {
		pr.Head.Owner = r.GetOwner().GetLogin()
	} else if u := g.GetHead().GetUser(); u != nil {
		pr.Head.Owner = u.GetLogin()
	}
	switch {
	case g.GetMerged() || g.MergedAt != nil:
		pr.State = scm.StateMerged
		pr.MergeCommitSHA = g.GetMergeCommitSHA()
	case g.GetState() == "closed":
		pr.State = scm.StateClosed
	default:
		pr.State = scm.StateOpen
	}
	switch {
	case g.Mergeable == nil:
		pr.Mergeable = scm.MergeableUnknown
	case *g.Mergeable:
		pr.Mergeable = scm.MergeableTrue
	default:
		pr.Mergeable = scm.MergeableFalse
	}
	pr.MergeState = convertMergeState(strings.ToUpper(g.GetMergeableState()))
	return pr
}

// Log excerpts of failed GitHub Actions jobs.
const (
	maxLogsPerRefresh = 10
	maxLogsPerPR      = 3
	maxLogRead        = 4 << 20
	maxExcerpt        = 4000
	excerptBefore     = 25
	excerptAfter      = 5
)

// attachLogs fills the log excerpt of failed Actions jobs (cached per job: a finished job's log
// never changes) and returns how many logs it downloaded.
func (p *Provider) attachLogs(ctx context.Context, pr *scm.PullRequest, budget int) int {
	used := 0
	perPR := 0
	for i := range pr.Checks.FailedChecks {
		c := &pr.Checks.FailedChecks[i]
		if c.JobID == 0 || perPR == maxLogsPerPR {
			continue
		}
		perPR++
		if ex, ok := p.jobLogs.Get(c.JobID); ok {
			c.LogExcerpt = ex
			continue
		}
		if used >= budget {
			continue
		}
		used++
		ex, err := p.jobLogExcerpt(ctx, pr.Repo, c.JobID)
		if err != nil {
			// A log is a convenience: the check's name and URL still tell the agent where to
			// look. A log that does not exist (expired, not an Actions job after all) never
			// will, so that answer is kept too; other errors are retried next time.
			if errors.Is(err, scm.ErrNotFound) {
				p.jobLogs.Add(c.JobID, "")
			}
			continue
		}
		p.jobLogs.Add(c.JobID, ex)
		c.LogExcerpt = ex
	}
	return used
}

func (p *Provider) jobLogExcerpt(ctx context.Context, repo scm.Repo, jobID int64) (string, error) {
	ctx = withOp(ctx, "actions.job_logs")
	u, _, err := p.rest.Actions.GetWorkflowJobLogs(ctx, repo.Owner, repo.Name, jobID, 1)
	if err != nil {
		return "", restError(err, scm.ErrNotFound)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("job log request: %w", err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", mapTransportError(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", &scm.APIError{Kind: scm.ErrUnavailable, Status: resp.StatusCode, Message: "download job log"}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLogRead))
	if err != nil {
		return "", fmt.Errorf("read job log: %w", err)
	}
	return LogExcerpt(string(b)), nil
}

var (
	ansiEscape   = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)
	logTimestamp = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z ?`)
)

// LogExcerpt picks the lines an agent needs from a GitHub Actions job log: those before and
// around the last "##[error]" line (or the end of the log), without timestamps and colour codes,
// at most a few KB.
func LogExcerpt(log string) string {
	lines := strings.Split(strings.ReplaceAll(log, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = ansiEscape.ReplaceAllString(logTimestamp.ReplaceAllString(l, ""), "")
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	end := len(lines)
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "##[error]") {
			end = min(i+1+excerptAfter, len(lines))
			break
		}
	}
	startAt := max(0, end-excerptBefore-excerptAfter)
	out := strings.Join(lines[startAt:end], "\n")
	if len(out) > maxExcerpt {
		cut := len(out) - maxExcerpt
		for cut < len(out) && out[cut]&0xC0 == 0x80 {
			cut++ // keep UTF-8 whole
		}
		out = out[cut:]
	}
	return out
}
