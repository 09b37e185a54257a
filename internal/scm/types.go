package scm

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Repo names a repository on a forge.
type Repo struct {
	Owner string
	Name  string
}

// String is "owner/name".
func (r Repo) String() string { return r.Owner + "/" + r.Name }

// IsZero reports whether the repository is unset.
func (r Repo) IsZero() bool { return r.Owner == "" && r.Name == "" }

// Equal compares two repositories as the forges do: GitHub and Gitea owner and repository names
// are case-insensitive, and deliveries carry the forge's canonical case ("Codertocat/Hello-World")
// whatever case a Project's URL was typed in.
func (r Repo) Equal(o Repo) bool {
	return strings.EqualFold(r.Owner, o.Owner) && strings.EqualFold(r.Name, o.Name)
}

// Key is the repository's case-folded "owner/name", for maps and indexes (see Equal): upper
// then lower case, so that letters whose upper case is shared (ſ and s, K and k) fold alike.
func (r Repo) Key() string { return strings.ToLower(strings.ToUpper(r.String())) }

// ParseRepo parses "owner/name".
func ParseRepo(s string) (Repo, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return Repo{}, fmt.Errorf("repository %q: want owner/name", s)
	}
	return Repo{Owner: owner, Name: name}, nil
}

// Head names the branch a pull request merges from. Owner is the owner of the repository the
// branch lives in: the base repository's owner for a branch of the same repository, another
// account for a fork. Empty Owner means the base repository's owner.
type Head struct {
	Owner  string
	Branch string
}

// String is "owner:branch" (or just "branch" without an owner), the form forges use.
func (h Head) String() string {
	if h.Owner == "" {
		return h.Branch
	}
	return h.Owner + ":" + h.Branch
}

// PullRequestState is the lifecycle state of a pull request. The values equal the API's
// PullRequestState so that a status can be filled by conversion.
type PullRequestState string

const (
	StateOpen   PullRequestState = "Open"
	StateClosed PullRequestState = "Closed"
	StateMerged PullRequestState = "Merged"
)

// Mergeable says whether the forge could merge the pull request without conflicts. Forges compute
// it lazily, so Unknown is a normal, transient answer.
type Mergeable string

const (
	MergeableTrue    Mergeable = "True"
	MergeableFalse   Mergeable = "False"
	MergeableUnknown Mergeable = "Unknown"
)

// MergeState is the forge's view of why a pull request can or cannot merge now. Values equal the
// API's MergeState.
type MergeState string

const (
	// MergeStateClean: mergeable, requirements met.
	MergeStateClean MergeState = "Clean"
	// MergeStateBehind: the head is out of date with the base and the base requires it up to date.
	MergeStateBehind MergeState = "Behind"
	// MergeStateBlocked: a requirement (review, required check) is not met.
	MergeStateBlocked MergeState = "Blocked"
	// MergeStateDirty: conflicts with the base.
	MergeStateDirty MergeState = "Dirty"
	// MergeStateUnstable: mergeable, but a check that is not required is failing.
	MergeStateUnstable MergeState = "Unstable"
	// MergeStateDraft: a draft cannot merge.
	MergeStateDraft MergeState = "Draft"
	// MergeStateUnknown: not computed yet, or a state Shepherd has no name for.
	MergeStateUnknown MergeState = "Unknown"
)

// ReviewDecision summarises the reviews. Values equal the API's ReviewDecision.
type ReviewDecision string

const (
	ReviewApproved         ReviewDecision = "Approved"
	ReviewChangesRequested ReviewDecision = "ChangesRequested"
	ReviewRequired         ReviewDecision = "ReviewRequired"
	ReviewNone             ReviewDecision = "None"
)

// ReviewState is the state of one review.
type ReviewState string

const (
	ReviewStateApproved         ReviewState = "Approved"
	ReviewStateChangesRequested ReviewState = "ChangesRequested"
	ReviewStateCommented        ReviewState = "Commented"
	ReviewStateDismissed        ReviewState = "Dismissed"
	ReviewStatePending          ReviewState = "Pending"
)

// Association is an author's relation to the repository, in GitHub's terms
// (author_association). Values equal the API's AuthorAssociation.
type Association string

const (
	AssociationOwner                Association = "Owner"
	AssociationMember               Association = "Member"
	AssociationCollaborator         Association = "Collaborator"
	AssociationContributor          Association = "Contributor"
	AssociationFirstTimeContributor Association = "FirstTimeContributor"
	AssociationFirstTimer           Association = "FirstTimer"
	AssociationMannequin            Association = "Mannequin"
	AssociationNone                 Association = "None"
)

// ParseGitHubReviewState maps GitHub's review states, in either case (GraphQL's APPROVED, a
// webhook's approved); ok is false for a state it does not know.
func ParseGitHubReviewState(state string) (st ReviewState, dismissed, ok bool) {
	switch strings.ToUpper(state) {
	case "APPROVED":
		return ReviewStateApproved, false, true
	case "CHANGES_REQUESTED":
		return ReviewStateChangesRequested, false, true
	case "COMMENTED":
		return ReviewStateCommented, false, true
	case "DISMISSED":
		return ReviewStateDismissed, true, true
	case "PENDING":
		return ReviewStatePending, false, true
	}
	return "", false, false
}

// ParseGitHubAssociation maps GitHub's spelling (COLLABORATOR, FIRST_TIME_CONTRIBUTOR) to an
// Association; anything unknown is None, so that a new value is never trusted by accident.
func ParseGitHubAssociation(s string) Association {
	switch s {
	case "OWNER":
		return AssociationOwner
	case "MEMBER":
		return AssociationMember
	case "COLLABORATOR":
		return AssociationCollaborator
	case "CONTRIBUTOR":
		return AssociationContributor
	case "FIRST_TIME_CONTRIBUTOR":
		return AssociationFirstTimeContributor
	case "FIRST_TIMER":
		return AssociationFirstTimer
	case "MANNEQUIN":
		return AssociationMannequin
	}
	return AssociationNone
}

// Review is one submitted review.
type Review struct {
	ID     string
	Author string
	// Association is the author's relation to the repository.
	Association Association
	State       ReviewState
	// Dismissed is true when the review was dismissed; State then keeps what it said, when the
	// forge tells (GitHub reports only "dismissed", so State is Dismissed there too).
	Dismissed   bool
	SubmittedAt time.Time
	// CommitSHA is the head commit the review was submitted at, when the forge says.
	CommitSHA string
	// Body is the review's summary text (a code-review App's findings, say); URL links to it.
	Body string
	URL  string
}

// Comment is one comment in a pull request's conversation (not a line comment of a review).
type Comment struct {
	// ID is the forge's id (a GraphQL node id on GitHub), stable across refreshes.
	ID     string
	Author string
	// Association is the author's relation to the repository.
	Association Association
	Body        string
	URL         string
	CreatedAt   time.Time
}

// MaxComments is how many of a pull request's newest conversation comments an adapter reads:
// the feedback Shepherd forwards is what came since its last read, so older ones are not needed
// and a long conversation costs no more than a short one.
const MaxComments = 30

// MaxTextBytes bounds each body an adapter keeps (thread comments, conversation comments,
// review summaries); a longer one is cut and ends with ClippedMark. What reaches an agent is
// bounded lower still (a Project's feedback.maxCommentBytes, at most 8000).
const MaxTextBytes = 8192

// ClippedMark ends a body cut at MaxTextBytes.
const ClippedMark = "\n[… cut]"

// ReviewThread is one unresolved review conversation, as the agent needs it to answer.
type ReviewThread struct {
	// ID is the forge's thread id (a GraphQL node id on GitHub), stable across refreshes.
	ID     string
	Author string
	// Association is the relation of the thread's first author to the repository.
	Association Association
	Path        string
	Line        int
	Body        string
	URL         string
	Outdated    bool
}

// ChecksState summarises the checks on the head commit. Values equal the API's ChecksState.
type ChecksState string

const (
	ChecksPassing ChecksState = "Passing"
	ChecksFailing ChecksState = "Failing"
	ChecksPending ChecksState = "Pending"
	ChecksNone    ChecksState = "None"
)

// CheckOutcome is the outcome of one check run or commit status.
type CheckOutcome string

const (
	CheckPassed  CheckOutcome = "Passed"
	CheckFailed  CheckOutcome = "Failed"
	CheckPending CheckOutcome = "Pending"
	// CheckSkipped covers skipped and neutral: completed without a verdict.
	CheckSkipped CheckOutcome = "Skipped"
)

// Check is one check run or commit status on the head commit.
type Check struct {
	Name    string
	URL     string
	Outcome CheckOutcome
	// Conclusion is the forge's own word (failure, timed_out, error, …), for messages.
	Conclusion string
	// Required is true when branch protection requires the check to pass before merging.
	Required bool
	// App is the app that reported a check run ("github-actions"), empty for commit statuses.
	App string
	// JobID identifies a CI job whose log the forge can serve (a GitHub Actions job), else 0.
	JobID int64
	// LogExcerpt is the tail of a failed CI job's log around its first error, when available.
	LogExcerpt string
}

// Checks is the rollup of check runs and commit statuses on the head commit.
type Checks struct {
	// State is what blocks or allows merging: computed over the required checks when the base
	// branch requires any, otherwise over all checks.
	State                           ChecksState
	Total, Passed, Failed, Pending  int
	Skipped                         int
	RequiredFailed, RequiredPending int
	// FailedChecks lists every failed check, required ones first.
	FailedChecks []Check
	// Runs are the checks tallied, as Tally was given them: what a webhook's check fact is
	// applied to (ApplyFacts).
	Runs []Check
	// Expected is true when the forge held the state pending for a required check that had not
	// reported (GitHub's EXPECTED, Gitea's missing required context).
	Expected bool
	// RequiredNames are checks known to be required though absent from Runs: the Poller keeps
	// them from earlier reads while the forge is Expected, so that a check fact for one of them
	// can be placed (ApplyFacts).
	RequiredNames []string
}

// Summary renders the counts for a status line, for example "4/5 passed, 1 failed".
func (c Checks) Summary() string {
	if c.Total == 0 {
		return "no checks"
	}
	parts := []string{fmt.Sprintf("%d/%d passed", c.Passed, c.Total)}
	if c.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", c.Failed))
	}
	if c.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", c.Pending))
	}
	if c.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", c.Skipped))
	}
	return strings.Join(parts, ", ")
}

// PullRequest is a forge's pull request as Shepherd needs it.
type PullRequest struct {
	Repo   Repo
	Number int
	URL    string
	Title  string
	Body   string
	State  PullRequestState
	Draft  bool
	// Additions and Deletions are the changed lines, as the forge counts them.
	Additions int
	Deletions int
	Head      Head
	HeadSHA   string
	BaseRef   string
	Mergeable Mergeable
	// MergeState is the forge's view (GitHub's mergeStateStatus). Gitea has none: its adapter
	// derives it from the same facts Gitea's merge check uses (docs/gitea.md).
	MergeState     MergeState
	ReviewDecision ReviewDecision
	Reviews        []Review
	// Threads holds the unresolved review threads only.
	Threads []ReviewThread
	// Comments are the newest conversation comments (at most MaxComments), oldest first.
	Comments []Comment
	// Author is the login that opened the pull request: for Shepherd's own pull requests, the
	// account Shepherd acts as.
	Author         string
	Checks         Checks
	MergeCommitSHA string
	UpdatedAt      time.Time
	// FetchedAt is when the forge was asked for this state (the request's start: the state is at
	// least this fresh).
	FetchedAt time.Time
	// DetailsFetchedAt is when reviews, threads and the list of checks were last read. The Poller
	// reads them again whenever the cheap state it polls changes, so they match FetchedAt's
	// state; they may be older only when nothing that summarises them changed.
	DetailsFetchedAt time.Time
}

// ApprovedAt reports whether the reviews leave the pull request approved at head itself: among
// each reviewer's latest deciding review (an approval, a request for changes, a dismissal), at
// least one approves and was submitted at head, and none requests changes. An approval of an
// earlier head does not count, whatever the forge's review decision says. The caller keeps only
// the reviewers it trusts in Reviews first.
func (pr *PullRequest) ApprovedAt(head string) bool {
	if pr == nil || head == "" {
		return false
	}
	latest := map[string]Review{}
	for _, r := range pr.Reviews {
		switch {
		case r.Dismissed, r.State == ReviewStateDismissed, r.State == ReviewStateApproved, r.State == ReviewStateChangesRequested:
			if prev, ok := latest[r.Author]; !ok || !r.SubmittedAt.Before(prev.SubmittedAt) {
				latest[r.Author] = r
			}
		}
	}
	approved := false
	for _, r := range latest {
		switch {
		case r.Dismissed:
		case r.State == ReviewStateChangesRequested:
			return false
		case r.State == ReviewStateApproved && r.CommitSHA == head:
			approved = true
		}
	}
	return approved
}

// PRRef names one pull request.
type PRRef struct {
	Repo   Repo
	Number int
}

func (r PRRef) String() string { return fmt.Sprintf("%s#%d", r.Repo, r.Number) }

// NewPullRequest is what Create needs.
type NewPullRequest struct {
	Head  Head
	Base  string
	Title string
	Body  string
	Draft bool
}

// PullRequestUpdate changes a pull request; nil fields stay as they are.
type PullRequestUpdate struct {
	Title *string
	Body  *string
}

// MergeMethod is how a pull request is merged.
type MergeMethod string

const (
	MergeSquash MergeMethod = "squash"
	MergeMerge  MergeMethod = "merge"
	MergeRebase MergeMethod = "rebase"
)

// MergeOptions guard and shape a merge.
type MergeOptions struct {
	Method MergeMethod
	// ExpectedHeadSHA must be the pull request's head commit, or the merge is refused with a
	// HeadChangedError: Shepherd merges what was approved and tested, nothing newer.
	ExpectedHeadSHA string
	CommitTitle     string
	CommitMessage   string
}

// MergeResult is the outcome of a merge.
type MergeResult struct {
	SHA string
}

// RepoInfo is what CheckAccess learns about a repository.
type RepoInfo struct {
	Repo          Repo
	DefaultBranch string
	Private       bool
	// CanPush is true when the credentials may push (and so open pull requests).
	CanPush bool
}

// Credential is a git credential for pushing over HTTPS.
type Credential struct {
	Username string
	Password string
	// ExpiresAt is zero for a credential that does not expire on its own (a personal access
	// token); only GitHub App installation tokens are short-lived.
	ExpiresAt time.Time
}

// Hint says which pull requests may have changed, as a webhook reports it. Nothing in it is
// trusted beyond routing: the Poller re-reads the state from the forge's API.
type Hint struct {
	Repo Repo
	// Event is the forge's event name, for logs and metrics.
	Event string
	// Numbers of pull requests that may have changed.
	Numbers []int
	// Branches that were pushed or whose checks changed: pull requests with one of them as head
	// need a full look, and those with one of them as base may have become behind or conflicting.
	Branches []string
	// SHAs of commits whose checks changed.
	SHAs []string
	// Namespace, when set, limits the hint to the sessions of that namespace: a webhook delivery
	// is verified with the secret of one Project, and it speaks for that Project's namespace only
	// (another tenant following the same repository name is not woken by it).
	Namespace string
	// Facts are what the delivery states about pull requests and commits, which the Poller
	// applies at once (ApplyFacts); what they do not cover is re-read as before.
	Facts []Fact
	// ClosedIssues are tracker issues (not pull requests) the delivery says were closed: the
	// Project controller's issue watch asks its tracker again at once (internal/controller,
	// issues.go). The Poller has nothing to read for them.
	ClosedIssues []int
	// Webhook is true for a hint from a verified webhook delivery (the webhook handler sets it).
	// Only those tell the Poller that the repository's webhooks flow, which relaxes its safety
	// net to PollerOptions.WebhookMaxAge; a hint the manager makes itself (after opening or
	// merging a pull request) makes the items it names due and leaves the poll interval alone.
	Webhook bool
}

// IsZero reports whether the hint names nothing to look at.
func (h Hint) IsZero() bool {
	return len(h.Numbers) == 0 && len(h.Branches) == 0 && len(h.SHAs) == 0
}

// Tally rolls checks up: counts, the failed checks (required ones first, in the given order
// otherwise), and the overall state. The state follows the required checks when any is required
// (a failing optional check does not fail the build) and every check otherwise. Adapters adjust
// the state for what only their forge knows (required checks that have not reported yet).
func Tally(checks []Check) Checks {
	var out Checks
	anyRequired := false
	for _, c := range checks {
		anyRequired = anyRequired || c.Required
	}
	var considered []CheckOutcome
	for _, c := range checks {
		out.Total++
		switch c.Outcome {
		case CheckPassed:
			out.Passed++
		case CheckFailed:
			out.Failed++
			if c.Required {
				out.RequiredFailed++
			}
			out.FailedChecks = append(out.FailedChecks, c)
		case CheckPending:
			out.Pending++
			if c.Required {
				out.RequiredPending++
			}
		case CheckSkipped:
			out.Skipped++
		}
		if !anyRequired || c.Required {
			considered = append(considered, c.Outcome)
		}
	}
	sort.SliceStable(out.FailedChecks, func(i, j int) bool {
		return out.FailedChecks[i].Required && !out.FailedChecks[j].Required
	})
	if len(checks) > 0 {
		out.Runs = append([]Check(nil), checks...)
	}
	out.State = ChecksNone
	if len(considered) > 0 {
		out.State = ChecksPassing
	}
	for _, o := range considered {
		if o == CheckFailed {
			out.State = ChecksFailing
			break
		}
		if o == CheckPending {
			out.State = ChecksPending
		}
	}
	return out
}
