package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// wipPrefixes are Gitea's default [repository.pull-request] WORK_IN_PROGRESS_PREFIXES: Gitea has
// no draft flag, a title starting with one of them makes a pull request a draft.
var wipPrefixes = []string{"WIP:", "[WIP]"}

func wipPrefix(title string) string {
	for _, p := range wipPrefixes {
		if len(title) >= len(p) && strings.EqualFold(title[:len(p)], p) {
			return title[:len(p)]
		}
	}
	return ""
}

// draftTitle is the title a draft is created with.
func draftTitle(title string, draft bool) string {
	if !draft || wipPrefix(title) != "" {
		return title
	}
	return "WIP: " + title
}

// CreatePullRequest opens a pull request, or returns (and updates) the open one of the same head
// and base. A draft is opened with Gitea's "WIP: " title prefix.
func (p *Provider) CreatePullRequest(ctx context.Context, repo scm.Repo, in scm.NewPullRequest) (*scm.PullRequest, error) {
	if in.Head.Branch == "" || in.Base == "" || in.Title == "" {
		return nil, fmt.Errorf("create pull request: %w: head, base and title are required", scm.ErrInvalid)
	}
	in.Title = draftTitle(in.Title, in.Draft)
	existing, err := p.openPull(ctx, repo, in.Base, in.Head)
	if err != nil {
		return nil, fmt.Errorf("create pull request for %s: %w", in.Head, err)
	}
	if existing != nil {
		return p.updateIfDifferent(ctx, repo, existing, in)
	}
	var created apiPull
	err = p.Send(Op(ctx, "pulls.create"), http.MethodPost, repoPath(repo)+"/pulls", map[string]any{
		"head": headSpec(repo, in.Head), "base": in.Base, "title": in.Title, "body": in.Body,
	}, &created, scm.ErrRepositoryNotFound)
	if err == nil {
		return convertPull(repo, &created, p.cfg.Clock.Now()), nil
	}
	// A concurrent create (or a lost answer to ours) wins: return that one.
	if existing, lerr := p.openPull(ctx, repo, in.Base, in.Head); lerr == nil && existing != nil {
		return p.updateIfDifferent(ctx, repo, existing, in)
	}
	var ae *scm.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		// Gitea answers 404 for a head or base branch that does not exist as for a missing
		// repository: unless the repository is missing, the request's content is wrong.
		if _, cerr := p.CheckAccess(ctx, repo); errors.Is(cerr, scm.ErrRepositoryNotFound) {
			err = cerr
		} else {
			err = &scm.APIError{Kind: scm.ErrInvalid, Status: ae.Status, Message: ae.Message}
		}
	}
	return nil, fmt.Errorf("create pull request for %s: %w", in.Head, err)
}

// openPull returns the open pull request of head into base, or nil.
func (p *Provider) openPull(ctx context.Context, repo scm.Repo, base string, head scm.Head) (*apiPull, error) {
	g, err := p.pullByBaseHead(ctx, repo, base, head)
	if err != nil || g == nil || isOpen(g) {
		return g, err
	}
	// Gitea answered a closed one of a reused branch: look for an open one among the open list.
	list, _, err := p.listOpen(ctx, repo, 1, maxListPages)
	if err != nil {
		return nil, err
	}
	for _, o := range list {
		if sameHead(repo, o, head) && o.Base != nil && o.Base.Ref == base {
			return o, nil
		}
	}
	return nil, nil
}

func (p *Provider) updateIfDifferent(ctx context.Context, repo scm.Repo, existing *apiPull, in scm.NewPullRequest) (*scm.PullRequest, error) {
	if existing.Title == in.Title && existing.Body == in.Body {
		return convertPull(repo, existing, p.cfg.Clock.Now()), nil
	}
	return p.UpdatePullRequest(ctx, repo, existing.Number, scm.PullRequestUpdate{Title: &in.Title, Body: &in.Body})
}

// UpdatePullRequest changes the title and/or body. A new title of a draft keeps its WIP prefix,
// so that renaming never marks a draft ready.
func (p *Provider) UpdatePullRequest(ctx context.Context, repo scm.Repo, number int, upd scm.PullRequestUpdate) (*scm.PullRequest, error) {
	edit := map[string]any{}
	if upd.Title != nil {
		title := *upd.Title
		if wipPrefix(title) == "" {
			cur, err := p.getPull(ctx, repo, number)
			if err != nil {
				return nil, fmt.Errorf("update pull request %s#%d: %w", repo, number, err)
			}
			if cur != nil && cur.Draft {
				if prefix := wipPrefix(cur.Title); prefix != "" {
					title = prefix + " " + title
				}
			}
		}
		edit["title"] = title
	}
	if upd.Body != nil {
		edit["body"] = *upd.Body
	}
	var g apiPull
	if err := p.Send(Op(ctx, "pulls.update"), http.MethodPatch, fmt.Sprintf("%s/pulls/%d", repoPath(repo), number), edit, &g, scm.ErrNotFound); err != nil {
		return nil, fmt.Errorf("update pull request %s#%d: %w", repo, number, err)
	}
	return convertPull(repo, &g, p.cfg.Clock.Now()), nil
}

// MarkReadyForReview takes the pull request out of draft: Gitea has no draft flag, so its title
// loses the WIP prefix that makes it one. A pull request that is not an open draft is left as
// it is.
func (p *Provider) MarkReadyForReview(ctx context.Context, repo scm.Repo, number int) error {
	cur, err := p.getPull(ctx, repo, number)
	if err != nil {
		return fmt.Errorf("mark %s#%d ready: %w", repo, number, err)
	}
	if cur == nil {
		return fmt.Errorf("mark %s#%d ready: %w", repo, number, scm.ErrNotFound)
	}
	prefix := wipPrefix(cur.Title)
	if !cur.Draft || cur.State != "open" || prefix == "" {
		return nil
	}
	title := strings.TrimSpace(cur.Title[len(prefix):])
	if err := p.Send(Op(ctx, "pulls.update"), http.MethodPatch, fmt.Sprintf("%s/pulls/%d", repoPath(repo), number),
		map[string]any{"title": title}, nil, scm.ErrNotFound); err != nil {
		return fmt.Errorf("mark %s#%d ready: %w", repo, number, err)
	}
	return nil
}

// Comment adds a comment to the pull request's conversation.
func (p *Provider) Comment(ctx context.Context, repo scm.Repo, number int, body string) error {
	err := p.Send(Op(ctx, "issues.comment"), http.MethodPost, fmt.Sprintf("%s/issues/%d/comments", repoPath(repo), number),
		map[string]any{"body": body}, nil, scm.ErrNotFound)
	if err != nil {
		return fmt.Errorf("comment on %s#%d: %w", repo, number, err)
	}
	return nil
}

// ClosePullRequest closes the pull request; closing a closed or merged one succeeds.
func (p *Provider) ClosePullRequest(ctx context.Context, repo scm.Repo, number int) error {
	cur, err := p.getPull(ctx, repo, number)
	if err != nil {
		return fmt.Errorf("close %s#%d: %w", repo, number, err)
	}
	if cur == nil {
		return fmt.Errorf("close %s#%d: %w", repo, number, scm.ErrNotFound)
	}
	if !isOpen(cur) {
		return nil
	}
	err = p.Send(Op(ctx, "pulls.close"), http.MethodPatch, fmt.Sprintf("%s/pulls/%d", repoPath(repo), number),
		map[string]any{"state": "closed"}, nil, scm.ErrNotFound)
	if err != nil {
		return fmt.Errorf("close %s#%d: %w", repo, number, err)
	}
	return nil
}

// Merge retry: Gitea refuses a merge with 405 "Please try again later" while its conflict check
// runs, and every merge attempt (even a refused one) starts the check again. The adapter re-reads
// the pull request after such a refusal and tries again after a growing pause (250 ms doubling,
// at most 4 s) for up to mergeRetryBudget, and never past the context's deadline, unless the
// re-read shows a moved head, a settled conflict or a closed pull request. The controller merges
// each head once, so a slow check must not fail the merge.
const (
	mergeRetryBudget = 20 * time.Second
	mergeBackoff     = 250 * time.Millisecond
	mergeMaxBackoff  = 4 * time.Second
)

// mergeStyles maps Shepherd's merge methods to Gitea's "Do".
var mergeStyles = map[scm.MergeMethod]string{
	scm.MergeMerge:  "merge",
	scm.MergeSquash: "squash",
	scm.MergeRebase: "rebase",
}

// MergePullRequest merges, guarded by the expected head commit (Gitea's head_commit_id: a moved
// head answers 409, which becomes a HeadChangedError). Merging an already merged pull request at
// that head returns its merge commit.
func (p *Provider) MergePullRequest(ctx context.Context, repo scm.Repo, number int, opts scm.MergeOptions) (scm.MergeResult, error) {
	if opts.ExpectedHeadSHA == "" {
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w: the expected head SHA is required", repo, number, scm.ErrInvalid)
	}
	method := opts.Method
	if method == "" {
		method = scm.MergeSquash
	}
	style, ok := mergeStyles[method]
	if !ok {
		return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w: merge method %q", repo, number, scm.ErrInvalid, method)
	}
	body := map[string]any{
		"do": style, "head_commit_id": opts.ExpectedHeadSHA,
		"merge_title_field": opts.CommitTitle, "merge_message_field": opts.CommitMessage,
	}
	path := fmt.Sprintf("%s/pulls/%d/merge", repoPath(repo), number)
	wait := mergeBackoff
	giveUp := p.cfg.Clock.Now().Add(mergeRetryBudget)
	if d, ok := ctx.Deadline(); ok && d.Before(giveUp) {
		giveUp = d
	}
	for {
		resp, err := p.do(Op(ctx, "pulls.merge"), http.MethodPost, path, nil, body)
		if err != nil {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, err)
		}
		if resp.status < 300 {
			cur, err := p.getPull(ctx, repo, number)
			if err != nil || cur == nil || cur.MergedCommitID == nil {
				// Merged; the commit is read by the next refresh.
				return scm.MergeResult{}, nil
			}
			return scm.MergeResult{SHA: *cur.MergedCommitID}, nil
		}
		refusal := resp.apiError(scm.ErrNotFound)
		// Whatever the refusal, the pull request says why.
		cur, gerr := p.getPull(ctx, repo, number)
		if gerr != nil {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w (and reading it back failed: %w)", repo, number, refusal, gerr)
		}
		if cur == nil {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, scm.ErrNotFound)
		}
		actual := ""
		if cur.Head != nil {
			actual = cur.Head.SHA
		}
		switch {
		case cur.Merged:
			if actual != "" && actual != opts.ExpectedHeadSHA {
				return scm.MergeResult{}, fmt.Errorf("merge %s#%d: merged at another head: %w", repo, number,
					&scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: actual})
			}
			sha := ""
			if cur.MergedCommitID != nil {
				sha = *cur.MergedCommitID
			}
			return scm.MergeResult{SHA: sha}, nil
		case actual != "" && actual != opts.ExpectedHeadSHA:
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, &scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: actual})
		case resp.status == http.StatusConflict && strings.Contains(resp.message(), "head out of date"):
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, &scm.HeadChangedError{Expected: opts.ExpectedHeadSHA, Actual: actual})
		case !isOpen(cur):
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w: the pull request is closed", repo, number, scm.ErrNotMergeable)
		case resp.status == http.StatusMethodNotAllowed && strings.Contains(resp.message(), "not allowed to merge"):
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number,
				&scm.APIError{Kind: scm.ErrPermissionDenied, Status: resp.status, Message: resp.message()})
		}
		now := p.cfg.Clock.Now()
		if !retryableMerge(resp) || now.Add(wait).After(giveUp) || (undecided(cur) && p.noteFalse(repo, cur, now)) {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w", repo, number, refusal)
		}
		if err := p.cfg.Clock.Sleep(ctx, wait); err != nil {
			return scm.MergeResult{}, fmt.Errorf("merge %s#%d: %w (waiting to retry: %w)", repo, number, refusal, err)
		}
		wait = min(2*wait, mergeMaxBackoff)
	}
}

// retryableMerge reports whether a refusal may go away by itself: Gitea's "try again later" (the
// conflict check runs, or the pull request conflicts: the re-read tells the two apart over time)
// and a base that moved while merging. Branch protection refusals ("Not all required status
// checks successful", "Does not have enough approvals", …), a work-in-progress title and conflicts
// found while merging do not.
func retryableMerge(resp *response) bool {
	msg := strings.ToLower(resp.message())
	switch resp.status {
	case http.StatusMethodNotAllowed:
		return strings.Contains(msg, "try again later")
	case http.StatusConflict:
		return strings.Contains(msg, "push out of date")
	}
	return false
}
