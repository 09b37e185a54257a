package gitea

import (
	"context"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Gitea's pull request carries one boolean, mergeable, which is false in three cases its API does
// not tell apart: while the conflict check runs (after every push to the head or the base, after
// every merge attempt), after the check found a conflict, and when the check failed. The check
// takes tens of milliseconds on an idle forge and seconds on a busy one (its queue is served one
// pull request at a time). The adapter therefore reads false as Unknown ("checking") until the
// same head and base have read false for conflictSettle; only then is it a conflict (Dirty).
//
// A full read that sees false re-reads the pull request with a short back-off (settleBackoff), so
// that a check in progress on an idle forge resolves within the same call; a pair still undecided
// after that asks the Poller to look again in recheckAfter (RefreshResult.RecheckAfter), so that
// a conflict is known within seconds without a webhook, and a slow check is never taken for one.
const conflictSettle = 10 * time.Second

// settleBackoff are the waits between in-call re-reads of a pull request that reads not mergeable
// (1.5 s in all).
var settleBackoff = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}

// recheckAfter is how soon an undecided pair is read again.
const recheckAfter = 2 * time.Second

// mergeKey is one head/base pair of a pull request: its mergeability never changes.
type mergeKey struct {
	repo       scm.Repo
	number     int
	head, base string
}

func keyOf(repo scm.Repo, g *apiPull) mergeKey {
	k := mergeKey{repo: repo, number: g.Number}
	if g.Head != nil {
		k.head = g.Head.SHA
	}
	if g.Base != nil {
		k.base = g.Base.SHA
	}
	return k
}

// undecided reports whether the pull request reads not mergeable for a reason other than a draft.
func undecided(g *apiPull) bool {
	return isOpen(g) && !g.Draft && !g.Mergeable
}

// knownConflict reports whether the pull request's head/base pair settled as a conflict.
func (p *Provider) knownConflict(repo scm.Repo, g *apiPull) bool {
	if !undecided(g) {
		return false
	}
	_, ok := p.conflicts.Get(keyOf(repo, g))
	return ok
}

// noteFalse records when a pair was first read not mergeable and, once it has read so for
// conflictSettle, records it as a conflict. It reports whether the pair is a conflict.
func (p *Provider) noteFalse(repo scm.Repo, g *apiPull, now time.Time) bool {
	k := keyOf(repo, g)
	if _, ok := p.conflicts.Get(k); ok {
		return true
	}
	since, ok := p.falseSince.Get(k)
	if !ok {
		p.falseSince.Add(k, now)
		return false
	}
	if now.Sub(since) >= p.conflictSettle {
		p.conflicts.Add(k, struct{}{})
		p.falseSince.Remove(k)
		return true
	}
	return false
}

// noteTrue forgets what a pair's earlier reads said once it reads mergeable: a pair taken for a
// conflict while a slow check ran is one no longer.
func (p *Provider) noteTrue(repo scm.Repo, g *apiPull) {
	if isOpen(g) && g.Mergeable {
		k := keyOf(repo, g)
		p.conflicts.Remove(k)
		p.falseSince.Remove(k)
	}
}

// settle re-reads, with a short back-off, the pull requests of a call that read not mergeable and
// are not known conflicts, until each reads mergeable, moves (a new head or base: a new pair), has
// read not mergeable for conflictSettle, or settleBackoff is spent.
func (p *Provider) settle(ctx context.Context, jobs []*job) error {
	var pending []*job
	for _, j := range jobs {
		if undecided(j.pull) && !p.noteFalse(j.repo, j.pull, p.cfg.Clock.Now()) {
			pending = append(pending, j)
		}
	}
	for _, d := range settleBackoff {
		if len(pending) == 0 {
			return nil
		}
		if err := p.cfg.Clock.Sleep(ctx, d); err != nil {
			return &scm.APIError{Kind: scm.ErrUnavailable, Message: "wait for the conflict check", Err: err}
		}
		var still []*job
		for _, j := range pending {
			g, err := p.getPull(Op(ctx, "pulls.get_mergeable"), j.repo, j.pull.Number)
			if err != nil {
				if fatal(err) {
					return err
				}
				continue // keep what the first read said
			}
			if g == nil {
				continue
			}
			j.pull = g
			if undecided(g) && !p.noteFalse(j.repo, g, p.cfg.Clock.Now()) {
				still = append(still, j)
			}
		}
		pending = still
	}
	return nil
}

// mergeable maps Gitea's boolean: true is True; false is False for a settled conflict and
// Unknown otherwise (checking, or a draft, which Gitea reports as not mergeable whatever the
// content).
func mergeable(g *apiPull, conflict bool) scm.Mergeable {
	switch {
	case !isOpen(g):
		return scm.MergeableUnknown
	case g.Mergeable:
		return scm.MergeableTrue
	case conflict:
		return scm.MergeableFalse
	}
	return scm.MergeableUnknown
}

// behind reports whether the base has commits the head lacks: the merge base Gitea's last check
// recorded is not the base branch's head.
func behind(g *apiPull) bool {
	return g.Base != nil && g.Base.SHA != "" && g.MergeBase != "" && g.MergeBase != g.Base.SHA
}

// mergeStateOf derives what GitHub calls mergeStateStatus, which Gitea does not report, from the
// same facts Gitea's own merge check uses (services/pull/merge.go CheckPullBranchProtections):
// mergeability, the protection of the base branch, the reviews and the required statuses. prot
// nil means unknown (a probe): the state is then Clean or Unstable only when nothing else could
// be read, so a probe never claims more than it saw.
func mergeStateOf(g *apiPull, conflict bool, prot *protection, reviews []*apiReview, checks scm.Checks) scm.MergeState {
	switch {
	case !isOpen(g):
		return scm.MergeStateUnknown
	case g.Draft:
		return scm.MergeStateDraft
	case !g.Mergeable && conflict:
		return scm.MergeStateDirty
	case !g.Mergeable:
		return scm.MergeStateUnknown
	case prot == nil:
		return scm.MergeStateUnknown
	}
	if prot.protected() {
		b := prot.branch
		if !b.UserCanMerge {
			return scm.MergeStateBlocked
		}
		if b.EnableStatusCheck && !requiredPassing(checks) {
			return scm.MergeStateBlocked
		}
		if b.RequiredApprovals > 0 && grantedApprovals(reviews, prot) < b.RequiredApprovals {
			return scm.MergeStateBlocked
		}
		if r := prot.rule; r != nil {
			if r.BlockOnRejectedReviews && officialRejection(reviews) {
				return scm.MergeStateBlocked
			}
			if r.BlockOnOfficialReviewRequests && officialRequest(reviews) {
				return scm.MergeStateBlocked
			}
			if r.BlockOnOutdatedBranch && behind(g) {
				return scm.MergeStateBehind
			}
		}
	}
	if checks.Failed > 0 || checks.Pending > 0 {
		return scm.MergeStateUnstable
	}
	return scm.MergeStateClean
}
