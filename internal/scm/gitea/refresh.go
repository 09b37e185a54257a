package gitea

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// job is one RefreshRequest on its way through the reads.
type job struct {
	req  scm.RefreshRequest
	repo scm.Repo
	pull *apiPull
	err  error
}

// refreshCall holds what one Refresh read, so that each repository's list of open pull requests,
// each head's statuses and each base's protection are read once per call.
type refreshCall struct {
	p        *Provider
	statuses map[statusKey][]*apiStatus
	prots    map[branchKey]*protection
}

type statusKey struct {
	repo scm.Repo
	sha  string
}

type branchKey struct {
	repo   scm.Repo
	branch string
}

// Refresh reads many pull requests. For each repository of the call it reads:
//
//   - lookups by head: GET pulls/{base}/{head} (one request; the open list too when Gitea answers
//     a closed pull request of a reused branch, since an open one wins);
//   - probes and full reads by number: the list of open pull requests (50 per request) when the
//     call carries two or more of that repository, otherwise GET pulls/{n}; closed and merged ones
//     are read one by one;
//   - the combined commit status of each head (one request per 50 contexts);
//   - full reads only: the base branch's protection (once per base per call), the reviews and the
//     line comments of each review that has any (one request each).
//
// Errors that concern the whole forge (unreachable, rate limited, token rejected) fail the call;
// others are reported per item.
func (p *Provider) Refresh(ctx context.Context, reqs []scm.RefreshRequest) ([]scm.RefreshResult, error) {
	start := p.cfg.Clock.Now()
	rc := &refreshCall{p: p, statuses: map[statusKey][]*apiStatus{}, prots: map[branchKey]*protection{}}
	jobs := make([]*job, len(reqs))
	var repos []scm.Repo
	byRepo := map[scm.Repo][]*job{}
	for i, r := range reqs {
		j := &job{req: r, repo: r.Ref.Repo}
		jobs[i] = j
		if _, ok := byRepo[j.repo]; !ok {
			repos = append(repos, j.repo)
		}
		byRepo[j.repo] = append(byRepo[j.repo], j)
	}
	for _, repo := range repos {
		if err := rc.locate(ctx, repo, byRepo[repo]); err != nil {
			return nil, err
		}
	}
	var fulls []*job
	for _, j := range jobs {
		if j.req.Full && j.err == nil && j.pull != nil {
			fulls = append(fulls, j)
		}
	}
	if err := p.settle(ctx, fulls); err != nil {
		return nil, err
	}
	out := make([]scm.RefreshResult, len(jobs))
	for i, j := range jobs {
		if j.err == nil && j.pull != nil {
			pr, fp, err := rc.convert(ctx, j, start)
			if err != nil && fatal(err) {
				return nil, err
			}
			if err != nil {
				j.err = err
			} else {
				out[i] = scm.RefreshResult{PullRequest: pr, Fingerprint: fp}
				if pr.State == scm.StateOpen && !pr.Draft && pr.Mergeable == scm.MergeableUnknown {
					out[i].RecheckAfter = recheckAfter // Gitea's conflict check has not decided yet
				}
				continue
			}
		}
		if j.err != nil {
			out[i] = scm.RefreshResult{Err: j.err}
			continue
		}
		out[i] = scm.RefreshResult{Fingerprint: "none"}
	}
	return out, nil
}

// fatal reports whether an error concerns the whole forge rather than one pull request.
func fatal(err error) bool {
	return errors.Is(err, scm.ErrUnavailable) || errors.Is(err, scm.ErrRateLimited) || errors.Is(err, scm.ErrTokenRejected)
}

// locate finds the pull request of each job of one repository.
func (rc *refreshCall) locate(ctx context.Context, repo scm.Repo, jobs []*job) error {
	p := rc.p
	var byNumber, byHead []*job
	for _, j := range jobs {
		switch {
		case j.req.Ref.Number > 0:
			byNumber = append(byNumber, j)
		case j.req.Head.Branch != "":
			byHead = append(byHead, j)
		default:
			j.err = fmt.Errorf("refresh %s: %w: neither a number nor a head", repo, scm.ErrInvalid)
		}
	}
	needAllOpen := false
	for _, j := range byHead {
		base := j.req.Base
		if base == "" {
			b, err := p.defaultBranch(ctx, repo)
			if err != nil {
				if fatal(err) {
					return err
				}
				j.err = err
				continue
			}
			base = b
		}
		g, err := p.pullByBaseHead(ctx, repo, base, j.req.Head)
		if err != nil {
			if fatal(err) {
				return err
			}
			j.err = err
			continue
		}
		j.pull = g
		if g != nil && !isOpen(g) {
			// Gitea answers one pull request of the pair, not the newest: an open one of a
			// reused branch wins over it.
			needAllOpen = true
		}
	}
	var open map[int]*apiPull
	if len(byNumber) >= 2 || needAllOpen {
		list, total, err := p.listOpen(ctx, repo, 1, 1)
		if err != nil {
			if fatal(err) {
				return err
			}
			for _, j := range byNumber {
				j.err = err
			}
			return nil
		}
		open = map[int]*apiPull{}
		for _, g := range list {
			open[g.Number] = g
		}
		if len(list) == pageSize && total > len(list) {
			missing := 0
			for _, j := range byNumber {
				if open[j.req.Ref.Number] == nil {
					missing++
				}
			}
			pagesLeft := min(maxListPages-1, (total-1)/pageSize)
			// Read the rest of the list when it costs no more than reading the missing ones.
			if needAllOpen || pagesLeft <= missing {
				more, _, err := p.listOpen(ctx, repo, 2, pagesLeft)
				if err != nil && fatal(err) {
					return err
				}
				for _, g := range more {
					open[g.Number] = g
				}
			}
		}
	}
	for _, j := range byNumber {
		if g := open[j.req.Ref.Number]; g != nil {
			j.pull = g
			continue
		}
		g, err := p.getPull(ctx, repo, j.req.Ref.Number)
		if err != nil {
			if fatal(err) {
				return err
			}
			j.err = err
			continue
		}
		j.pull = g
	}
	if needAllOpen {
		for _, j := range byHead {
			if j.pull == nil || isOpen(j.pull) {
				continue
			}
			for _, g := range open {
				if sameHead(repo, g, j.req.Head) && g.Base != nil && j.pull.Base != nil && g.Base.Ref == j.pull.Base.Ref {
					j.pull = g
					break
				}
			}
		}
	}
	return nil
}

func isOpen(g *apiPull) bool { return g.State == "open" && !g.Merged }

// headOwner is the login of the owner of the pull request's head repository.
func headOwner(g *apiPull) string {
	if g.Head != nil && g.Head.Repo != nil && g.Head.Repo.Owner != nil {
		return g.Head.Repo.Owner.Login
	}
	return ""
}

// headBranch is the head's branch name. Gitea's head.ref turns into refs/pull/N/head once the
// branch is deleted; head.label keeps the name.
func headBranch(g *apiPull) string {
	if g.Head == nil {
		return ""
	}
	if g.Head.Label != "" {
		return g.Head.Label
	}
	if strings.HasPrefix(g.Head.Ref, "refs/pull/") {
		return ""
	}
	return g.Head.Ref
}

func sameHead(repo scm.Repo, g *apiPull, head scm.Head) bool {
	owner := head.Owner
	if owner == "" {
		owner = repo.Owner
	}
	return headBranch(g) == head.Branch && strings.EqualFold(headOwner(g), owner)
}

// combinedStatuses reads the latest status of each context on a commit, once per call.
func (rc *refreshCall) combinedStatuses(ctx context.Context, repo scm.Repo, sha string) ([]*apiStatus, error) {
	if sha == "" {
		return nil, nil
	}
	key := statusKey{repo, sha}
	if st, ok := rc.statuses[key]; ok {
		return st, nil
	}
	var all []*apiStatus
	for page := 1; page <= maxPages; page++ {
		var cs apiCombinedStatus
		q := url.Values{"page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(pageSize)}}
		err := rc.p.Get(Op(ctx, "statuses.combined"), fmt.Sprintf("%s/commits/%s/status", repoPath(repo), url.PathEscape(sha)), q, &cs, scm.ErrNotFound)
		if isNotFound(err) {
			break // a commit no longer in the repository has no statuses to show
		}
		if err != nil {
			return nil, err
		}
		all = append(all, cs.Statuses...)
		if len(cs.Statuses) < pageSize || (cs.TotalCount > 0 && len(all) >= cs.TotalCount) {
			break
		}
	}
	rc.statuses[key] = all
	return all, nil
}

// convert builds the neutral pull request of a job and its fingerprint.
func (rc *refreshCall) convert(ctx context.Context, j *job, fetched time.Time) (*scm.PullRequest, string, error) {
	g := j.pull
	pr := convertPull(j.repo, g, fetched)
	statuses, err := rc.combinedStatuses(ctx, j.repo, pr.HeadSHA)
	if err != nil {
		return nil, "", err
	}
	fp := fingerprint(g, statuses)
	rc.p.noteTrue(j.repo, g)
	conflict := rc.p.knownConflict(j.repo, g)
	pr.Mergeable = mergeable(g, conflict)
	if !j.req.Full {
		// A probe reads no protection or reviews: its checks are summarised over every context
		// and its review decision and merge state wait for the full read a changed fingerprint
		// brings.
		pr.Checks = rollup(statuses, nil)
		pr.MergeState = mergeStateOf(g, conflict, nil, nil, pr.Checks)
		return pr, fp, nil
	}
	prot, err := rc.protection(ctx, j.repo, pr.BaseRef)
	if err != nil {
		return nil, "", err
	}
	reviews, err := rc.p.reviews(ctx, j.repo, g.Number)
	if err != nil {
		return nil, "", err
	}
	comments, err := rc.p.reviewComments(ctx, j.repo, g.Number, reviews)
	if err != nil {
		return nil, "", err
	}
	conv, err := rc.p.conversation(ctx, j.repo, g)
	if err != nil {
		if fatal(err) && !errors.Is(err, errResponseTooLarge) {
			return nil, "", err
		}
		// Everything else the pull request says still counts; its conversation waits for the
		// next full read (see conversation), and the request's outcome is in the metrics.
		conv = nil
	}
	pr.DetailsFetchedAt = fetched
	pr.Reviews = convertReviews(reviews)
	pr.Threads = threads(comments)
	pr.Comments = conv
	pr.Author = login(g.User)
	rc.p.annotate(ctx, j.repo, pr)
	pr.Checks = rollup(statuses, prot)
	pr.ReviewDecision = reviewDecision(reviews, prot)
	pr.MergeState = mergeStateOf(g, conflict, prot, reviews, pr.Checks)
	return pr, fp, nil
}

// convertPull maps the pull request object; checks, reviews and the merge state come from other
// reads.
func convertPull(repo scm.Repo, g *apiPull, fetched time.Time) *scm.PullRequest {
	pr := &scm.PullRequest{
		Repo:           repo,
		Number:         g.Number,
		URL:            g.HTMLURL,
		Title:          g.Title,
		Body:           g.Body,
		Draft:          g.Draft,
		Additions:      g.Additions,
		Deletions:      g.Deletions,
		Head:           scm.Head{Owner: headOwner(g), Branch: headBranch(g)},
		FetchedAt:      fetched,
		ReviewDecision: scm.ReviewNone,
		Checks:         scm.Checks{State: scm.ChecksNone},
		MergeState:     scm.MergeStateUnknown,
		Mergeable:      scm.MergeableUnknown,
	}
	if g.Head != nil {
		pr.HeadSHA = g.Head.SHA
	}
	if g.Base != nil {
		pr.BaseRef = g.Base.Ref
		if pr.BaseRef == "" {
			pr.BaseRef = g.Base.Label
		}
	}
	if g.Updated != nil {
		pr.UpdatedAt = *g.Updated
	}
	switch {
	case g.Merged:
		pr.State = scm.StateMerged
		if g.MergedCommitID != nil {
			pr.MergeCommitSHA = *g.MergedCommitID
		}
	case g.State == "closed":
		pr.State = scm.StateClosed
	default:
		pr.State = scm.StateOpen
	}
	return pr
}

// fingerprint digests what a probe sees. Reviews and comments move updated_at and the comment
// counts; statuses do not, so their states are part of it.
func fingerprint(g *apiPull, statuses []*apiStatus) string {
	h := fnv.New64a()
	head, headRef, base, baseSHA := "", "", "", ""
	if g.Head != nil {
		head, headRef = g.Head.SHA, g.Head.Label+"|"+g.Head.Ref
	}
	if g.Base != nil {
		base, baseSHA = g.Base.Ref, g.Base.SHA
	}
	updated := ""
	if g.Updated != nil {
		updated = g.Updated.UTC().Format(time.RFC3339Nano)
	}
	_, _ = fmt.Fprintf(h, "%d|%s|%t|%t|%s|%s|%s|%s|%s|%s|%t|%s|%d|%d", g.Number, g.State, g.Merged, g.Draft, g.Title,
		head, headRef, base, baseSHA, g.MergeBase, g.Mergeable, updated, g.Comments, g.ReviewComments)
	keys := make([]string, 0, len(statuses))
	for _, s := range statuses {
		keys = append(keys, s.Context+"="+s.State+"@"+s.TargetURL)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_, _ = fmt.Fprintf(h, "|%s", k)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// GetPullRequests reads many pull requests in full, batched.
func (p *Provider) GetPullRequests(ctx context.Context, refs []scm.PRRef) ([]*scm.PullRequest, error) {
	return scm.GetPullRequestsByRefresh(ctx, p, refs)
}

// FindPullRequest returns the pull request of head into the repository's default branch (the
// open one if there is one), in full.
func (p *Provider) FindPullRequest(ctx context.Context, repo scm.Repo, head scm.Head) (*scm.PullRequest, error) {
	return scm.FindPullRequestByRefresh(ctx, p, repo, head)
}
