package gitea

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"

	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Gitea review states.
const (
	reviewApproved       = "APPROVED"
	reviewRequestChanges = "REQUEST_CHANGES"
	reviewComment        = "COMMENT"
	reviewPending        = "PENDING"
	reviewRequested      = "REQUEST_REVIEW"
)

// reviews reads a pull request's reviews (and review requests), oldest first.
func (p *Provider) reviews(ctx context.Context, repo scm.Repo, number int) ([]*apiReview, error) {
	var all []*apiReview
	for page := 1; page <= maxPages; page++ {
		var batch []*apiReview
		q := url.Values{"page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(pageSize)}}
		if err := p.Get(Op(ctx, "pulls.reviews"), fmt.Sprintf("%s/pulls/%d/reviews", repoPath(repo), number), q, &batch, scm.ErrNotFound); err != nil {
			return nil, err
		}
		all = append(all, batch...)
		if len(batch) < pageSize {
			break
		}
	}
	return all, nil
}

// conversation reads a pull request's conversation comments when it has any (g.Comments, from the
// pull request itself, saves the request otherwise) and keeps the newest scm.MaxComments, bodies
// cut at scm.MaxTextBytes. Gitea lists an issue's comments in one answer, without pages, so a
// conversation flooded past the client's response bound cannot be read: that leaves the
// conversation out (logged by the caller) rather than failing the read of everything else the
// pull request says (checks, reviews, mergeability).
func (p *Provider) conversation(ctx context.Context, repo scm.Repo, g *apiPull) ([]scm.Comment, error) {
	if g.Comments == 0 {
		return nil, nil
	}
	var all []*apiComment
	if err := p.Get(Op(ctx, "issues.comments"), fmt.Sprintf("%s/issues/%d/comments", repoPath(repo), g.Number), nil, &all, scm.ErrNotFound); err != nil {
		return nil, err
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Created.Before(all[j].Created) })
	if len(all) > scm.MaxComments {
		all = all[len(all)-scm.MaxComments:]
	}
	out := make([]scm.Comment, 0, len(all))
	for _, c := range all {
		out = append(out, scm.Comment{ID: strconv.FormatInt(c.ID, 10), Author: login(c.User), URL: c.HTMLURL, CreatedAt: c.Created,
			Body: clip.Marked(c.Body, scm.MaxTextBytes, scm.ClippedMark)})
	}
	return out, nil
}

// reviewComments reads the line comments of every review that has any (Gitea serves them per
// review only).
func (p *Provider) reviewComments(ctx context.Context, repo scm.Repo, number int, reviews []*apiReview) ([]*apiReviewComment, error) {
	var all []*apiReviewComment
	for _, r := range reviews {
		if r.CommentsCount == 0 {
			continue
		}
		var batch []*apiReviewComment
		err := p.Get(Op(ctx, "pulls.review_comments"), fmt.Sprintf("%s/pulls/%d/reviews/%d/comments", repoPath(repo), number, r.ID), nil, &batch, scm.ErrNotFound)
		if isNotFound(err) {
			continue // deleted between the two reads
		}
		if err != nil {
			return nil, err
		}
		all = append(all, batch...)
	}
	return all, nil
}

func login(u *apiUser) string {
	if u == nil {
		return "Ghost" // Gitea's name for a deleted account
	}
	return u.Login
}

// convertReviews maps submitted reviews; review requests are not reviews and are left out. A
// dismissed review keeps the state it had, with Dismissed set.
func convertReviews(reviews []*apiReview) []scm.Review {
	var out []scm.Review
	for _, r := range reviews {
		rv := scm.Review{ID: strconv.FormatInt(r.ID, 10), Author: login(r.User), Dismissed: r.Dismissed, SubmittedAt: r.Submitted, CommitSHA: r.CommitID,
			Body: clip.Marked(r.Body, scm.MaxTextBytes, scm.ClippedMark), URL: r.HTMLURL}
		switch r.State {
		case reviewApproved:
			rv.State = scm.ReviewStateApproved
		case reviewRequestChanges:
			rv.State = scm.ReviewStateChangesRequested
		case reviewPending:
			rv.State = scm.ReviewStatePending
		case reviewComment:
			rv.State = scm.ReviewStateCommented
		default:
			continue // REQUEST_REVIEW and states this adapter has no name for
		}
		out = append(out, rv)
	}
	return out
}

// threads groups line comments into conversations the way Gitea's UI does (by file and line), and
// returns the unresolved ones. A conversation's first comment carries its author, body, URL and
// whether it was resolved. Gitea's API does not say whether a comment is outdated, so Outdated is
// always false.
func threads(comments []*apiReviewComment) []scm.ReviewThread {
	type key struct {
		path string
		line int
	}
	groups := map[key][]*apiReviewComment{}
	var order []key
	for _, c := range comments {
		line := c.Position
		if line == 0 {
			line = -c.OrigPosition // a comment on the old side of the diff
		}
		k := key{c.Path, line}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	var out []scm.ReviewThread
	for _, k := range order {
		cs := groups[k]
		sort.SliceStable(cs, func(i, j int) bool {
			if !cs[i].Created.Equal(cs[j].Created) {
				return cs[i].Created.Before(cs[j].Created)
			}
			return cs[i].ID < cs[j].ID
		})
		root := cs[0]
		if root.Resolver != nil {
			continue
		}
		line := k.line
		if line < 0 {
			line = -line
		}
		out = append(out, scm.ReviewThread{
			ID: strconv.FormatInt(root.ID, 10), Author: login(root.User), Path: root.Path, Line: line,
			Body: root.Body, URL: root.HTMLURL,
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := strconv.ParseInt(out[i].ID, 10, 64)
		b, _ := strconv.ParseInt(out[j].ID, 10, 64)
		return a < b
	})
	return out
}

// counts reports whether a review counts towards Gitea's merge rules: official (the reviewer's
// latest approving or rejecting review, by someone allowed to approve) and not dismissed.
func counts(r *apiReview) bool { return r.Official && !r.Dismissed }

// grantedApprovals counts what Gitea counts against required approvals
// (models/issues/pull.go GetGrantedApprovalsCount).
func grantedApprovals(reviews []*apiReview, prot *protection) int {
	n := 0
	for _, r := range reviews {
		if r.State != reviewApproved || !counts(r) {
			continue
		}
		if r.Stale && prot != nil && prot.rule != nil && prot.rule.IgnoreStaleApprovals {
			continue
		}
		n++
	}
	return n
}

func officialRejection(reviews []*apiReview) bool {
	for _, r := range reviews {
		if r.State == reviewRequestChanges && counts(r) {
			return true
		}
	}
	return false
}

func officialRequest(reviews []*apiReview) bool {
	for _, r := range reviews {
		if r.State == reviewRequested && r.Official {
			return true
		}
	}
	return false
}

// reviewDecision summarises the reviews as GitHub's reviewDecision does, from the reviews Gitea
// counts: an official, undismissed request for changes wins; otherwise the official approvals
// against the base branch's required approvals (Approved, or ReviewRequired while short), or,
// without required approvals, Approved once anyone official approved and None before.
func reviewDecision(reviews []*apiReview, prot *protection) scm.ReviewDecision {
	if officialRejection(reviews) {
		return scm.ReviewChangesRequested
	}
	granted := grantedApprovals(reviews, prot)
	if prot.protected() && prot.branch.RequiredApprovals > 0 {
		if granted >= prot.branch.RequiredApprovals {
			return scm.ReviewApproved
		}
		return scm.ReviewRequired
	}
	if granted > 0 {
		return scm.ReviewApproved
	}
	return scm.ReviewNone
}
