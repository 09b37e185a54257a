package lifecycle

import (
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Input is everything one decision looks at. The controller gathers it; nothing in it is
// fetched by this package.
type Input struct {
	// Now is the clock. Decide truncates it to whole seconds, the precision a status keeps, so
	// that a decision read back from the API server compares equal to the one written.
	Now time.Time
	// Generation of the AgentSession; every condition carries it as observedGeneration.
	Generation int64

	Spec      SpecEvidence
	Settings  Settings
	Workspace WorkspaceEvidence
	Pod       PodEvidence
	Runner    RunnerEvidence
	// PullRequest is the session's own pull request, read from the forge by number (or by
	// branch until a number is known), never inferred from other pull requests.
	PullRequest PullRequestEvidence
	// Merge is what the controller's merge runner did about the last Merge action of this
	// session: an effect's own result is evidence. It lives in the manager's memory; a restarted
	// manager has none, and the lifecycle asks for the merge again (the forge's answer after the
	// restart, a merged pull request, ends that).
	Merge MergeEvidence
	// Issue is the session's tracker issue as last read; zero when the session has none, the
	// tracker was not read yet, or the Project ignores closed issues (tracker.onIssueClosed).
	Issue IssueEvidence

	// Previous is the status as last written (by Apply). It is only read.
	Previous agentsv1alpha1.AgentSessionStatus
}

// SpecEvidence is what the user asks for.
type SpecEvidence struct {
	// State is the desired state; empty means Running.
	State agentsv1alpha1.SessionState
	// Admitted is true when the Project's limits let the session run. Admission is sticky: once
	// a session left the queue it keeps its slot until it stops or ends, whatever this says.
	Admitted bool
	// Messages are spec.messages, in order.
	Messages []agentsv1alpha1.Message
	// ApprovedHead is the pull request head a human approved for merging through Kubernetes
	// (the ApprovedHeadAnnotation, set by Argo CD's approve action or kubectl annotate): while it
	// names the current head, approvedAndGreen merges that head whatever its configured action.
	ApprovedHead string
	// MaxDuration and MaxTurns are the session's limits (its spec.limits over the Project's);
	// zero means none. MaxDuration counts from Previous.StartTime, MaxTurns finished turns.
	MaxDuration time.Duration
	MaxTurns    int32
	// MaxCostUSD is the session's spend limit in dollars (metered usage only); zero is none.
	MaxCostUSD float64
	// MaxRepeatedFailures and MaxUnchangedTurns are the runaway limits; zero is none.
	MaxRepeatedFailures, MaxUnchangedTurns int32
	// Budget is the Project's budget as it stands now (its spend in the current windows).
	Budget BudgetEvidence
	// Deleting is true once the session has a deletion timestamp (it then waits on Shepherd's
	// finalizer only for ClosePullRequestOnDelete): the decision asks for nothing but that close.
	Deleting bool
	// ClosePullRequestOnDelete is spec.onDelete ClosePullRequest.
	ClosePullRequestOnDelete bool
	// Draft is spec.pullRequest.draft: nil is the forge's default; false marks a draft the
	// session opened ready for review.
	Draft *bool
	// SupersededBy is spec.supersededBy.session: an AgentTask chose that attempt; this one ends,
	// closing its pull request with a comment that links SupersededURL.
	SupersededBy, SupersededURL string
}

// WorkspaceEvidence is the session's Worktree.
type WorkspaceEvidence struct {
	// Phase of the Worktree; empty when it was not created yet.
	Phase agentsv1alpha1.WorktreePhase
	// NotFound is true when spec.worktreeRef names a Worktree that does not exist.
	NotFound bool
	// Message from the Worktree's status, quoted in conditions.
	Message string
	// Exists is true when the session's Worktree exists (its own, or the one spec.worktreeRef
	// names).
	Exists bool
	// Own is true when the Worktree is the session's own (not named by spec.worktreeRef).
	Own bool
	// Absent is true when the Worktree's spec.state is Absent (its checkout is being or was
	// removed).
	Absent bool
	// RemoveAfterMerge is the Project's cleanup policy: the session's own Worktree is set Absent
	// once its pull request merged (spec.cleanup.worktreeAfterMerge Remove).
	RemoveAfterMerge bool
	// HeldBy names another session that uses the same Worktree (spec.worktreeRef) now, or comes
	// before this one: sessions of one Worktree take turns, and this one gets no pod until it is
	// its turn. Empty when the Worktree is free for it.
	HeldBy string
}

// PodPhase mirrors the Kubernetes pod phase, so that this package does not import k8s.io/api.
type PodPhase string

// Pod phases.
const (
	PodPending   PodPhase = "Pending"
	PodRunning   PodPhase = "Running"
	PodSucceeded PodPhase = "Succeeded"
	PodFailed    PodPhase = "Failed"
	PodUnknown   PodPhase = "Unknown"
)

// PodEvidence is the agent pod and its agent container.
type PodEvidence struct {
	// Exists is false when there is no agent pod.
	Exists bool
	// UID of the pod; runner reports name the pod they came from.
	UID string
	// Phase of the pod.
	Phase PodPhase
	// Reason of the pod's status, for example Evicted.
	Reason string
	// Deleting is true once the pod has a deletion timestamp.
	Deleting bool
	// NodeLost is true when the pod's node is gone or NotReady past the cluster's own timeout.
	NodeLost bool
	// ContainerRunning is true when the agent container runs.
	ContainerRunning bool
	// WaitingReason of the agent container, for example ImagePullBackOff or CrashLoopBackOff.
	WaitingReason string
	// WaitingMessage that goes with WaitingReason.
	WaitingMessage string
	// Terminated is the agent container's last termination, when it is not running.
	Terminated *ContainerExit
	// Restarts of the agent container.
	Restarts int32
	// Created is the pod's creation time: activity.spawnDeadline counts from it.
	Created time.Time
	// Started is when the agent container started running (zero when it is not running): its
	// runner's first report is not missed before one grace slot from then.
	Started time.Time
	// Unschedulable is the scheduler's message while it cannot place the pod (its PodScheduled
	// condition is False with reason Unschedulable); empty otherwise.
	Unschedulable string
	// VolumeHeld says which ReadWriteOnce volume the scheduled pod waits for, attached to which
	// other node and what frees it; empty otherwise.
	VolumeHeld string
}

// ContainerExit is how a container ended.
type ContainerExit struct {
	ExitCode int32
	// Reason, for example OOMKilled or Error.
	Reason string
}

// RunnerEvidence is the runner's last report about the agent.
type RunnerEvidence struct {
	// Reported is false until the runner of any pod of this session has reported.
	Reported bool
	// PodUID names the pod the report came from (the runner proves it with its token).
	PodUID string
	// ReportTime is when the manager received the report.
	ReportTime time.Time
	// State of the agent.
	State agentsv1alpha1.ActivityState
	// LastActivityTime is when the agent last did something; zero falls back to ReportTime.
	LastActivityTime time.Time
	// Question the agent asked, when waiting for input.
	Question string
	// ExitCode once exited; nil with State Exited counts as a failure.
	ExitCode *int32
	// Message is the last error or the last lines of output.
	Message string
	// PullRequestNumber is the pull request the runner opened or updated, 0 if none.
	PullRequestNumber int64
	// PullRequestAsk names the runner's waiting request to open or update the pull request
	// ("" when none waits): the decision runs it as an OpenPullRequest action.
	PullRequestAsk string
	// AgentSessionID is the agent's own conversation id.
	AgentSessionID string
	// Summary of the work, from the agent.
	Summary string
	// Usage: cost and tokens.
	Usage *agentsv1alpha1.UsageStatus
	// Loop is the runner's count of repeated failures and unchanged turns.
	Loop LoopEvidence
}

// PullRequestEvidence is the session's pull request as the forge reports it.
type PullRequestEvidence struct {
	// Observed is false when the forge was not read this time (not yet, rate limited, down):
	// the engine then keeps the pull request from the previous status and runs no reaction
	// that needs fresh details.
	Observed bool
	// ForgeError says why the forge could not be read, when its last answer was an error
	// (Observed is false then), and ForgeErrorReason classifies it (ForgeUnavailable,
	// RateLimited, TokenRejected). The session says so in Reconciling until the forge answers.
	ForgeError       string
	ForgeErrorReason string
	// Exists is false when the forge shows no pull request for the branch. A pull request the
	// session already knows never disappears: Exists=false for a known number is treated as
	// not observed.
	Exists bool

	Number     int64
	URL        string
	Title      string
	State      agentsv1alpha1.PullRequestState
	Draft      bool
	HeadSHA    string
	HeadBranch string
	BaseBranch string
	// Additions and Deletions are the changed lines (an AgentTask's Score weighs them).
	Additions, Deletions int32
	// MergeState as the forge reports it (GitHub's mergeStateStatus; conflicts are Dirty).
	MergeState     agentsv1alpha1.MergeState
	ReviewDecision agentsv1alpha1.ReviewDecision
	// ApprovedAtHead is true when a trusted reviewer's latest review approves HeadSHA itself
	// (not an earlier head) and no trusted reviewer's latest review requests changes. The
	// Merge action waits for it (unless the Project opted out).
	ApprovedAtHead bool
	// Threads are the unresolved review threads.
	Threads []ReviewThread
	// ChangeRequests are the reviews whose latest state requests changes.
	ChangeRequests []Review
	// Comments are the conversation's comments and the summaries of reviews that only comment,
	// by authors the Project hears, already shaped by its feedback settings (prefix, bound).
	Comments       []Comment
	Checks         ChecksEvidence
	MergeCommitSHA string
}

// ReviewThread is one unresolved review thread.
type ReviewThread struct {
	ID     string
	Author string
	Path   string
	Line   int
	Body   string
	URL    string
}

// LoopEvidence is what the runner counted of an agent going round in circles.
type LoopEvidence struct {
	RepeatedFailures int32
	FailingCall      string
	UnchangedTurns   int32
}

// BudgetEvidence is the Project's budget as the controller judged it from the Project's spend.
type BudgetEvidence struct {
	// Exhausted says which cap is spent ("the daily budget of $50 is spent: $50.12"); "" while
	// there is room.
	Exhausted string
	// FinishTurn: running sessions stop after their agent's current turn (else they go on).
	FinishTurn bool
	// ResetTime is when the spent window ends; the decision is due again then.
	ResetTime time.Time
	// Location is the budget's time zone: the session's own day and month windows are counted
	// in it. Nil is UTC.
	Location *time.Location
}

// Comment is one comment of the pull request's conversation, or the summary of a review that
// only comments (a code-review bot's findings, typically).
type Comment struct {
	ID     string
	Author string
	Body   string
	URL    string
	// CreatedAt is the forge's time of the comment: what orders comments and says which are new.
	CreatedAt time.Time
	// Review is true for a review's summary.
	Review bool
	// Question is true when the comment asks the agent something rather than asking for a
	// change (IsQuestion): it is forwarded as a question, not as a change request.
	Question bool
}

// Review is one review that requests changes.
type Review struct {
	ID     string
	Author string
	Body   string
	URL    string
}

// ChecksEvidence is the checks rollup on the head commit.
type ChecksEvidence struct {
	// State of the required checks (or of all checks when none is required): Failing when any
	// failed, errored, timed out or was cancelled; Pending while any runs; None when there are
	// no checks at all.
	State                   agentsv1alpha1.ChecksState
	Passed, Failed, Pending int32
	FailedChecks            []FailedCheck
}

// FailedCheck is one failed check, with the end of its log when the forge gave it.
type FailedCheck struct {
	Name       string
	URL        string
	LogExcerpt string
}

// MergeOutcome is where a merge the lifecycle asked for stands.
type MergeOutcome string

// Merge outcomes.
const (
	// MergeNotRun: no merge was run for the head (or this manager has not run it yet).
	MergeNotRun MergeOutcome = ""
	// MergeInFlight: the forge's merge call is under way.
	MergeInFlight MergeOutcome = "InFlight"
	// MergeSucceeded: the forge merged the pull request at HeadSHA.
	MergeSucceeded MergeOutcome = "Succeeded"
	// MergeRetrying: the forge failed for now (5xx, unreachable, a rate limit); the merge is
	// asked for again at RetryAt.
	MergeRetrying MergeOutcome = "Retrying"
	// MergeHeadMoved: the forge refused because the head is no longer HeadSHA; the new head is
	// read and judged afresh.
	MergeHeadMoved MergeOutcome = "HeadMoved"
	// MergeRefused: the forge refused for good (protection rules, conflicts, permissions); a
	// human is told, and this head is not tried again.
	MergeRefused MergeOutcome = "Refused"
)

// MergeEvidence is the merge runner's record of the last merge of a session.
type MergeEvidence struct {
	// PullRequestNumber and HeadSHA say which merge it is.
	PullRequestNumber int64
	HeadSHA           string
	Outcome           MergeOutcome
	// Attempts is how many merge calls were made for this head by this manager.
	Attempts int32
	// RetryAt is when a Retrying merge may be asked for again.
	RetryAt time.Time
	// Error is the forge's answer when it did not merge.
	Error string
	// MergeCommitSHA is the commit the forge made (Succeeded).
	MergeCommitSHA string
}

// For reports whether the evidence is about the merge of pull request number at head.
func (m MergeEvidence) For(number int64, head string) bool {
	return m.Outcome != MergeNotRun && m.PullRequestNumber == number && m.HeadSHA == head && head != ""
}

// IssueEvidence is what the tracker said of the session's issue.
type IssueEvidence struct {
	// ID is the issue as the session names it (spec.issue).
	ID string
	// Closed is true when the tracker reported the issue done or cancelled.
	Closed bool
	// State is the tracker's word for it ("closed", "Done", "Canceled").
	State string
}
