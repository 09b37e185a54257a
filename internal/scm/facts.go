package scm

import (
	"slices"
	"strings"
	"time"
)

// Fact is one thing a verified webhook delivery states about a pull request or a commit. Reviews
// give none: what they change (the decision, and the body the agent is sent with the re-read's
// threads) is the forge's to say, and the re-read within the hint delay brings it whole.
// webhook.Parse builds them from the payload; the Poller applies them to what it last read the
// moment the delivery arrives (ApplyFacts), so that a change the payload carries is seen within
// the delivery's own latency, and keeps the paced re-read for what a payload does not carry (a
// review decision, mergeability, a failed job's log).
type Fact struct {
	// Number is the pull request a PullRequest fact is about.
	Number int
	// PullRequest is the pull request's own state (a pull_request event).
	PullRequest *PullRequestFact
	// Branch and SHA: the branch's head moved to SHA (a push).
	Branch string
	// SHA is the commit a Check is on, or a pushed branch's new head.
	SHA string
	// Check is one check's state at SHA (check_run, status).
	Check *Check
	// Suite is true for a check suite's summary at SHA: its check runs come with deliveries of
	// their own (check_run), so it states nothing new; a relaxed re-read covers an installation
	// that sends suites alone.
	Suite bool
}

// PullRequestFact is what a pull_request event carries about the pull request itself.
type PullRequestFact struct {
	State          PullRequestState
	Draft          bool
	Title          string
	HeadSHA        string
	BaseRef        string
	MergeCommitSHA string
	UpdatedAt      time.Time
}

// Need says what a re-read must still bring after facts were applied.
type Need int

const (
	// NeedNothing: the facts said everything about the change.
	NeedNothing Need = iota
	// NeedLater: the facts are applied, but something they imply only the forge computes
	// (mergeability after the head or base moved): a re-read at the relaxed pace of the
	// Poller's fact re-reads.
	NeedLater
	// NeedNow: a fact could not be applied exactly (a review decision, a new failure's log, a
	// check whose required-ness is unknown): the re-read goes out as a hint's does.
	NeedNow
)

func (n Need) max(o Need) Need { return Need(max(int(n), int(o))) }

// ApplyFacts returns pr with the facts about it applied. relevant is false when none concerns
// it; need says what a re-read must still bring. pr itself is never modified (the Poller shares
// it with the controllers). A fact is applied only where the payload states the new value
// exactly; otherwise it is left to the re-read (NeedNow).
func ApplyFacts(pr *PullRequest, facts []Fact) (out *PullRequest, relevant bool, need Need) {
	if pr == nil {
		return nil, false, NeedNothing
	}
	out = pr
	for _, f := range facts {
		if !f.concerns(out) {
			continue
		}
		var n Need
		var next *PullRequest
		switch {
		case f.PullRequest != nil:
			next, n = applyPullRequest(out, f.PullRequest)
		case f.Check != nil:
			next, n = applyCheck(out, *f.Check)
		case f.Suite:
			n = NeedLater
		default: // a push to the head branch
			next, n = moveHead(out, f.SHA)
		}
		relevant = true
		need = need.max(n)
		if next != nil {
			out = next
		}
	}
	return out, relevant, need
}

// Concern reports whether any of facts is about pr: the Poller's cheap test before it applies
// them.
func Concern(pr *PullRequest, facts []Fact) bool {
	return pr != nil && slices.ContainsFunc(facts, func(f Fact) bool { return f.concerns(pr) })
}

func (f Fact) concerns(pr *PullRequest) bool {
	switch {
	case f.PullRequest != nil:
		return f.Number == pr.Number
	case f.Check != nil, f.Suite:
		return f.SHA != "" && f.SHA == pr.HeadSHA
	case f.Branch != "":
		return f.SHA != "" && f.Branch == pr.Head.Branch && ownBranch(pr)
	}
	return false
}

// ownBranch: the head branch lives in the base repository (a push event names that repository's
// branches, never a fork's).
func ownBranch(pr *PullRequest) bool {
	return pr.Head.Owner == "" || strings.EqualFold(pr.Head.Owner, pr.Repo.Owner)
}

func clonePR(pr *PullRequest) *PullRequest {
	c := *pr
	c.Reviews = append([]Review(nil), pr.Reviews...)
	c.Checks.Runs = append([]Check(nil), pr.Checks.Runs...)
	c.Checks.FailedChecks = append([]Check(nil), pr.Checks.FailedChecks...)
	return &c
}

func applyPullRequest(pr *PullRequest, f *PullRequestFact) (*PullRequest, Need) {
	if !f.UpdatedAt.IsZero() && !pr.UpdatedAt.IsZero() && f.UpdatedAt.Before(pr.UpdatedAt) {
		// An older delivery than what was read (deliveries may arrive out of order).
		return nil, NeedNothing
	}
	c := clonePR(pr)
	need := NeedNothing
	if f.State != "" {
		c.State = f.State
	}
	if f.State == StateMerged && f.MergeCommitSHA != "" {
		c.MergeCommitSHA = f.MergeCommitSHA
	}
	c.Draft = f.Draft
	if f.Title != "" {
		c.Title = f.Title
	}
	if f.BaseRef != "" && f.BaseRef != c.BaseRef {
		c.BaseRef = f.BaseRef
		c.Mergeable, c.MergeState = MergeableUnknown, MergeStateUnknown
		need = NeedLater
	}
	if !f.UpdatedAt.IsZero() {
		c.UpdatedAt = f.UpdatedAt
	}
	if f.HeadSHA != "" && f.HeadSHA != c.HeadSHA {
		moved, _ := moveHead(c, f.HeadSHA)
		c, need = moved, NeedLater
	}
	if c.State == StateOpen && pr.Draft != c.Draft {
		// A draft cannot merge; what it can do once ready is the forge's to compute.
		c.MergeState, need = MergeStateUnknown, need.max(NeedLater)
	}
	return c, need
}

// moveHead is the pull request at a new head commit: nothing is known yet of its checks (those
// the base requires are pending, as the forge shows them until they report) or its mergeability.
func moveHead(pr *PullRequest, sha string) (*PullRequest, Need) {
	if sha == pr.HeadSHA {
		return nil, NeedNothing
	}
	c := clonePR(pr)
	c.HeadSHA = sha
	c.Mergeable, c.MergeState = MergeableUnknown, MergeStateUnknown
	var runs []Check
	for _, name := range KnownRequired(pr.Checks) {
		runs = append(runs, Check{Name: name, Required: true, Outcome: CheckPending})
	}
	c.Checks = Tally(runs)
	c.Checks.Expected = pr.Checks.Expected
	if c.Checks.Expected && (c.Checks.State == ChecksNone || c.Checks.State == ChecksPassing) {
		c.Checks.State = ChecksPending
	}
	return c, NeedLater
}

// KnownRequired are the names of the checks known to be required: the required runs and
// RequiredNames, sorted without duplicates.
func KnownRequired(c Checks) []string {
	var out []string
	for _, r := range c.Runs {
		if r.Required {
			out = append(out, r.Name)
		}
	}
	out = append(out, c.RequiredNames...)
	slices.Sort(out)
	return slices.Compact(out)
}

// applyCheck sets one check's state at the head and tallies again. A new failure is left to the
// re-read, which brings its job's log for the agent; so is a check that cannot be placed (the
// forge waits for a required check, and this one is not known to be one).
func applyCheck(pr *PullRequest, chk Check) (*PullRequest, Need) {
	runs := append([]Check(nil), pr.Checks.Runs...)
	known := KnownRequired(pr.Checks)
	at := -1
	for i, r := range runs {
		if r.Name == chk.Name && (r.App == "" || chk.App == "" || r.App == chk.App) {
			at = i
			break
		}
	}
	if at < 0 {
		switch {
		case slices.Contains(known, chk.Name):
			chk.Required = true
		case pr.Checks.Expected:
			return nil, NeedNow
		default:
			chk.Required = false // every required check had reported (the forge was not waiting)
		}
		runs = append(runs, chk)
	} else {
		prev := runs[at]
		if prev.Outcome == chk.Outcome && prev.Conclusion == chk.Conclusion {
			return nil, NeedNothing
		}
		chk.Required = prev.Required
		if chk.App == "" {
			chk.App = prev.App
		}
		if chk.URL == "" {
			chk.URL = prev.URL
		}
		runs[at] = chk
	}
	if chk.Outcome == CheckFailed {
		return nil, NeedNow
	}
	c := clonePR(pr)
	logs := map[string]Check{}
	for _, f := range pr.Checks.FailedChecks {
		logs[f.Name] = f
	}
	// The known required checks that have not reported are pending, as the forge shows them.
	tallied := runs
	var missing []string
	for _, name := range known {
		if !slices.ContainsFunc(runs, func(r Check) bool { return r.Name == name }) {
			missing = append(missing, name)
			tallied = append(tallied, Check{Name: name, Required: true, Outcome: CheckPending})
		}
	}
	c.Checks = Tally(tallied)
	c.Checks.Runs, c.Checks.RequiredNames = runs, missing
	// Expected stays until a read: every known required check having reported, the forge may
	// still wait for one Shepherd never saw.
	c.Checks.Expected = pr.Checks.Expected
	for i, f := range c.Checks.FailedChecks {
		if old, ok := logs[f.Name]; ok {
			c.Checks.FailedChecks[i].JobID, c.Checks.FailedChecks[i].LogExcerpt = old.JobID, old.LogExcerpt
		}
	}
	need := NeedNothing
	if c.Checks.State != pr.Checks.State {
		// Whether it can merge now is the forge's to say (branch protection, conflicts, a required
		// check never seen): at once when nothing else holds it back, else at the relaxed pace.
		c.MergeState = MergeStateUnknown
		switch {
		case c.Checks.State == ChecksPassing && (c.ReviewDecision == ReviewApproved || c.ReviewDecision == ReviewNone || c.ReviewDecision == ""):
			need = NeedNow
		default:
			need = NeedLater
		}
	}
	return c, need
}
