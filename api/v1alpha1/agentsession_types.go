package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SessionState is the desired state of the agent.
// +kubebuilder:validation:Enum=Running;Stopped
type SessionState string

const (
	// SessionRunning runs (or restores and resumes) the agent.
	SessionRunning SessionState = "Running"
	// SessionStopped removes the agent pod and keeps the worktree and the conversation.
	SessionStopped SessionState = "Stopped"
)

// AgentSessionSpec is one agent on one task.
// +kubebuilder:validation:XValidation:rule=`has(self.issue) != has(self.prompt)`,message="set exactly one of spec.issue or spec.prompt"
// +kubebuilder:validation:XValidation:rule=`!(has(self.worktreeRef) && has(self.worktree))`,message="set at most one of spec.worktreeRef (reuse a Worktree) or spec.worktree (a template for the session's own)"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.issue) == has(self.issue) && (!has(self.issue) || self.issue == oldSelf.issue)`,message="spec.issue is immutable; create a new AgentSession for another issue"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.prompt) == has(self.prompt) && (!has(self.prompt) || self.prompt == oldSelf.prompt)`,message="spec.prompt is immutable; send follow-ups through spec.messages"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.worktreeRef) == has(self.worktreeRef) && (!has(self.worktreeRef) || self.worktreeRef == oldSelf.worktreeRef)`,message="spec.worktreeRef is immutable"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.worktree) == has(self.worktree) && (!has(self.worktree) || self.worktree == oldSelf.worktree)`,message="spec.worktree is immutable"
type AgentSessionSpec struct {
	// ProjectRef names the Project the session works on. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="spec.projectRef is immutable; create a new AgentSession for another Project"
	ProjectRef LocalObjectReference `json:"projectRef"`

	// Issue is the tracker issue to work on: a number ("42" or "#42") for GitHub and Gitea, or a
	// key ("ENG-123") for Linear. Exactly one of issue or prompt.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^(#?[1-9][0-9]{0,9}|[A-Z][A-Z0-9]{0,15}-[1-9][0-9]{0,9})$')`,message="issue must be an issue number such as 42 or #42, or a tracker key such as ENG-123"
	Issue string `json:"issue,omitempty"`

	// Prompt is the task in words. Exactly one of issue or prompt.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Prompt string `json:"prompt,omitempty"`

	// Title of the pull request when the task is a prompt. Defaults to the first line of the
	// prompt; for an issue, the issue's title.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`

	// Agent overrides the Project's agent defaults for this session.
	// +optional
	Agent *AgentSpec `json:"agent,omitempty"`

	// WorktreeRef reuses an existing Worktree; several sessions may share one. Immutable.
	// +optional
	WorktreeRef *LocalObjectReference `json:"worktreeRef,omitempty"`

	// Worktree is the template of the Worktree this session creates and owns, when worktreeRef is
	// not set. Every field is optional: the branch defaults to one derived from the issue or the
	// session name. Immutable.
	// +optional
	Worktree *WorktreeTemplate `json:"worktree,omitempty"`

	// Messages are follow-ups from humans, delivered to the agent once each, in order, as new
	// turns of the same conversation. Append new ones with a new id.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=100
	Messages []Message `json:"messages,omitempty"`

	// State: Running (default) or Stopped. Stopped removes the pod and keeps the worktree;
	// Running again restores the checkout and resumes the agent's conversation.
	// +optional
	// +kubebuilder:default=Running
	State SessionState `json:"state,omitempty"`

	// Limits override the Project's per-session limits (spec.limits.maxDuration, maxTurns).
	// +optional
	Limits *SessionLimits `json:"limits,omitempty"`

	// OnDelete is what deleting the session does to its pull request while it is open: Keep
	// (the default) leaves it; ClosePullRequest closes it with a comment saying why, once,
	// before the session goes.
	// +optional
	// +kubebuilder:default=Keep
	OnDelete SessionDeletePolicy `json:"onDelete,omitempty"`

	// PullRequest shapes the pull request the agent opens.
	// +optional
	PullRequest *SessionPullRequest `json:"pullRequest,omitempty"`

	// SupersededBy is set by an AgentTask on the attempts it did not choose (docs/best-of-n.md):
	// the session stops its agent, closes its open pull request once with a comment linking the
	// chosen one, releases its own Worktree (the branch stays) and ends Done with reason
	// Superseded. Once set it cannot change.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="spec.supersededBy cannot change once set"
	SupersededBy *Supersession `json:"supersededBy,omitempty"`
}

// SessionPullRequest shapes a session's pull request.
type SessionPullRequest struct {
	// Draft opens the pull request as a draft (GitHub's draft flag; Gitea's "WIP: " title
	// prefix). Set back to false, a draft the session opened is marked ready for review, once.
	// Unset: the forge's default, and a draft is never changed.
	// +optional
	Draft *bool `json:"draft,omitempty"`
}

// Supersession names the attempt chosen over this one.
type Supersession struct {
	// Session is the chosen attempt's AgentSession.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Session string `json:"session"`
	// PullRequestURL is the chosen attempt's pull request, linked from the comment that closes
	// this session's.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	PullRequestURL string `json:"pullRequestURL,omitempty"`
}

// SessionDeletePolicy says what deleting a session does to its open pull request.
// +kubebuilder:validation:Enum=Keep;ClosePullRequest
type SessionDeletePolicy string

const (
	// DeleteKeep leaves the pull request open.
	DeleteKeep SessionDeletePolicy = "Keep"
	// DeleteClosePullRequest closes the open pull request with a comment.
	DeleteClosePullRequest SessionDeletePolicy = "ClosePullRequest"
)

// SessionLimits end a session that runs too long or takes too many turns: it becomes Done with
// the reason (MaxDurationReached, MaxTurnsReached) and a notification of priority action. The
// pull request, if any, stays open for a human.
type SessionLimits struct {
	// MaxDuration ends the session this long after its agent first started (time in the queue
	// does not count; a stop and restore does). The end comes at the deadline, in the middle of
	// a turn if need be: it bounds what a runaway agent can spend. 1m..720h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('1m') && duration(self) <= duration('720h')`,message="maxDuration must be between 1m and 720h"
	MaxDuration *metav1.Duration `json:"maxDuration,omitempty"`

	// MaxTurns ends the session once its agent has finished this many turns (the first, and
	// each message or reaction after it), never in the middle of one. 1..1000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxTurns *int32 `json:"maxTurns,omitempty"`

	// MaxCostUSD ends the session once the model proxy metered this much spend for it, in US
	// dollars ("2.5"), never in the middle of a turn (requests under way when it is reached
	// still finish). Counted only with a model proxy (docs/cost.md).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	MaxCostUSD string `json:"maxCostUSD,omitempty"`

	// MaxRepeatedFailures ends the session, escalated, once one tool call (the same tool with
	// the same input) failed this many times in a row: an agent retrying what cannot work.
	// 2..1000.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1000
	MaxRepeatedFailures *int32 `json:"maxRepeatedFailures,omitempty"`

	// MaxUnchangedTurns ends the session, escalated, once this many turns in a row left the
	// checkout as they found it (no commit, no edit): an agent talking in circles. 1..1000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxUnchangedTurns *int32 `json:"maxUnchangedTurns,omitempty"`
}

// WorktreeTemplate describes the Worktree a session creates for itself.
type WorktreeTemplate struct {
	// Branch to work on. Defaults to <branchPrefix><issue>-<slug of the title> for an issue, or
	// <branchPrefix><session name> for a prompt.
	// +optional
	Branch BranchName `json:"branch,omitempty"`

	// Base the branch starts from. Defaults to the Project's default branch.
	// +optional
	Base GitRef `json:"base,omitempty"`

	// Mode: Worktree or Clone. Defaults to the Project's workspace mode.
	// +optional
	Mode WorkspaceMode `json:"mode,omitempty"`

	// Adopt takes over the branch if it already exists on the remote.
	// +optional
	Adopt bool `json:"adopt,omitempty"`

	// Storage overrides the Project's workspace storage.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`
}

// Message is one follow-up for the agent.
// +kubebuilder:validation:XValidation:rule=`self.text == oldSelf.text`,message="a message's text cannot change once added; add a new message with a new id"
type Message struct {
	// ID identifies the message; status.messages.delivered lists the ids already delivered.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ID string `json:"id"`

	// Text sent to the agent, unchanged.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Text string `json:"text"`

	// From names the human who wrote it, for the record.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from,omitempty"`
}

// SessionPhase is where a session is in its lifecycle (docs/lifecycle.md has the diagram).
// +kubebuilder:validation:Enum=Queued;Spawning;Working;PROpen;CIFailed;ReviewPending;ChangesRequested;Approved;Mergeable;Merged;NeedsInput;Stuck;Errored;Stopped;Done
type SessionPhase string

// The session phases. Merged, Done and Errored are terminal; Stopped is terminal until the
// session is set Running again.
const (
	PhaseQueued           SessionPhase = "Queued"
	PhaseSpawning         SessionPhase = "Spawning"
	PhaseWorking          SessionPhase = "Working"
	PhasePROpen           SessionPhase = "PROpen"
	PhaseCIFailed         SessionPhase = "CIFailed"
	PhaseReviewPending    SessionPhase = "ReviewPending"
	PhaseChangesRequested SessionPhase = "ChangesRequested"
	PhaseApproved         SessionPhase = "Approved"
	PhaseMergeable        SessionPhase = "Mergeable"
	PhaseMerged           SessionPhase = "Merged"
	PhaseNeedsInput       SessionPhase = "NeedsInput"
	PhaseStuck            SessionPhase = "Stuck"
	PhaseErrored          SessionPhase = "Errored"
	PhaseStopped          SessionPhase = "Stopped"
	PhaseDone             SessionPhase = "Done"
)

// IsTerminal reports whether the phase ends the session (Stopped ends it until restored).
func (p SessionPhase) IsTerminal() bool {
	switch p {
	case PhaseMerged, PhaseDone, PhaseErrored, PhaseStopped:
		return true
	}
	return false
}

// PullRequestState is the state of a pull request on the forge.
// +kubebuilder:validation:Enum=Open;Closed;Merged
type PullRequestState string

const (
	PullRequestOpen   PullRequestState = "Open"
	PullRequestClosed PullRequestState = "Closed"
	PullRequestMerged PullRequestState = "Merged"
)

// ChecksState summarises a pull request's checks on its head commit.
// +kubebuilder:validation:Enum=Passing;Failing;Pending;None
type ChecksState string

const (
	ChecksPassing ChecksState = "Passing"
	ChecksFailing ChecksState = "Failing"
	ChecksPending ChecksState = "Pending"
	ChecksNone    ChecksState = "None"
)

// ReviewDecision summarises the reviews of a pull request.
// +kubebuilder:validation:Enum=Approved;ChangesRequested;ReviewRequired;None
type ReviewDecision string

const (
	ReviewApproved         ReviewDecision = "Approved"
	ReviewChangesRequested ReviewDecision = "ChangesRequested"
	ReviewRequired         ReviewDecision = "ReviewRequired"
	ReviewNone             ReviewDecision = "None"
)

// MergeState is the forge's view of whether the pull request can merge.
// +kubebuilder:validation:Enum=Clean;Behind;Blocked;Dirty;Unstable;Draft;Unknown
type MergeState string

const (
	MergeStateClean    MergeState = "Clean"
	MergeStateBehind   MergeState = "Behind"
	MergeStateBlocked  MergeState = "Blocked"
	MergeStateDirty    MergeState = "Dirty"
	MergeStateUnstable MergeState = "Unstable"
	MergeStateDraft    MergeState = "Draft"
	MergeStateUnknown  MergeState = "Unknown"
)

// CheckRef names one failed check.
type CheckRef struct {
	// Name of the check or status context.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// URL of the check's details.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
}

// PullRequestStatus is the session's pull request as last read from the forge.
type PullRequestStatus struct {
	// Number of the pull request.
	// +required
	Number int64 `json:"number"`
	// URL of the pull request.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
	// State: Open, Closed or Merged.
	// +optional
	State PullRequestState `json:"state,omitempty"`
	// Draft is true for a draft pull request.
	// +optional
	Draft bool `json:"draft,omitempty"`
	// HeadSHA is the pull request's head commit.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	HeadSHA string `json:"headSHA,omitempty"`
	// BaseBranch the pull request merges into.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	BaseBranch string `json:"baseBranch,omitempty"`
	// Checks on the head commit.
	// +optional
	Checks ChecksState `json:"checks,omitempty"`
	// ChecksSummary, for example "4/5 passed, 1 failed".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ChecksSummary string `json:"checksSummary,omitempty"`
	// FailedChecks names the failing checks.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	FailedChecks []CheckRef `json:"failedChecks,omitempty"`
	// ReviewDecision of the pull request.
	// +optional
	ReviewDecision ReviewDecision `json:"reviewDecision,omitempty"`
	// UnresolvedThreads counts review threads not yet resolved.
	// +optional
	UnresolvedThreads int32 `json:"unresolvedThreads,omitempty"`
	// MergeState as the forge reports it.
	// +optional
	MergeState MergeState `json:"mergeState,omitempty"`
	// MergeCommitSHA is the merge commit once merged.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MergeCommitSHA string `json:"mergeCommitSHA,omitempty"`
	// Additions and Deletions are the pull request's changed lines, as the forge counts them.
	// +optional
	Additions int32 `json:"additions,omitempty"`
	// +optional
	Deletions int32 `json:"deletions,omitempty"`
	// LastChangeTime is when a fact above last changed on the forge as Shepherd saw it. It does not
	// move on every poll, so that an unchanged pull request costs no status write; freshness is
	// in the shepherd_scm_poller_max_age_seconds metric.
	// +optional
	LastChangeTime *metav1.Time `json:"lastChangeTime,omitempty"`
}

// ActivityState is what the agent is doing, as the runner reports it.
// +kubebuilder:validation:Enum=Active;Ready;Idle;WaitingForInput;Blocked;Exited
type ActivityState string

const (
	// ActivityActive: the agent is working on a turn.
	ActivityActive ActivityState = "Active"
	// ActivityReady: the agent finished its turn and waits for the next message.
	ActivityReady ActivityState = "Ready"
	// ActivityIdle: no activity for longer than activity.idleAfter.
	ActivityIdle ActivityState = "Idle"
	// ActivityWaitingForInput: the agent asked a question only a human can answer.
	ActivityWaitingForInput ActivityState = "WaitingForInput"
	// ActivityBlocked: the agent cannot go on (an API error it keeps retrying, a refused permission).
	ActivityBlocked ActivityState = "Blocked"
	// ActivityExited: the agent process ended.
	ActivityExited ActivityState = "Exited"
)

// ActivityStatus is the agent's activity as last reported by the runner.
type ActivityStatus struct {
	// State of the agent.
	// +optional
	State ActivityState `json:"state,omitempty"`
	// LastActivityTime is when the agent last did something.
	// +optional
	LastActivityTime *metav1.Time `json:"lastActivityTime,omitempty"`
	// Question the agent asked, when waiting for input.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Question string `json:"question,omitempty"`
	// ExitCode of the agent process, once exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Message is the last error or the last lines of output on exit.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// AgentStatus is the agent in effect and its own conversation id.
type AgentStatus struct {
	// Type of agent in effect.
	// +optional
	Type AgentType `json:"type,omitempty"`
	// Image in effect.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// Model in effect, as the agent reported it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`
	// SessionID is the agent's own conversation id, used to resume it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	SessionID string `json:"sessionID,omitempty"`
}

// UsageStatus is what the agent has spent, from its own output.
type UsageStatus struct {
	// CostUSD is the total cost in US dollars, as a decimal string.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
	// InputTokens consumed.
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// OutputTokens produced.
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// CacheReadTokens read from the prompt cache.
	// +optional
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`
	// Turns counts completed agent turns.
	// +optional
	Turns int32 `json:"turns,omitempty"`

	// Source says where the numbers above come from: Proxy, Shepherd's model proxy, which sees
	// every request the agent makes (authoritative; cost from the price table); or Agent, what
	// the agent's CLI reported of itself (Projects without a model proxy).
	// +optional
	Source UsageSource `json:"source,omitempty"`
	// Requests counts the generation requests the model proxy forwarded (Proxy).
	// +optional
	Requests int64 `json:"requests,omitempty"`
	// CacheWriteTokens written to the prompt cache (Proxy).
	// +optional
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// Unmetered counts answers whose usage never arrived in full (a stream cut short); their
	// tokens are estimated from the bytes, which overstates them (Proxy).
	// +optional
	Unmetered int64 `json:"unmetered,omitempty"`
	// Models splits the proxy's count by the model each request named, with each model's cost
	// when the price table knows it.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=33
	Models []ModelUsageStatus `json:"models,omitempty"`
	// PriceTable is the date of the price table costUSD was computed with (Proxy).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	PriceTable string `json:"priceTable,omitempty"`
	// Agent is what the agent's CLI reported of itself, kept beside the proxy's count (Proxy).
	// +optional
	Agent *AgentUsageStatus `json:"agent,omitempty"`
	// Day and Month are what the session spent (Proxy) in the current calendar day and month of
	// its Project's budget time zone: the Project's spend sums them.
	// +optional
	Day *SpendWindow `json:"day,omitempty"`
	// +optional
	Month *SpendWindow `json:"month,omitempty"`
}

// UsageSource says who counted a session's usage.
// +kubebuilder:validation:Enum=Proxy;Agent
type UsageSource string

const (
	// UsageFromProxy: Shepherd's model proxy counted every request.
	UsageFromProxy UsageSource = "Proxy"
	// UsageFromAgent: the agent's CLI reported its own usage.
	UsageFromAgent UsageSource = "Agent"
)

// ModelUsageStatus is one model's share of a session's metered usage.
type ModelUsageStatus struct {
	// Model as the requests named it (sanitized; "other" past 32 models, "unknown" when none).
	// +required
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model"`
	// +optional
	Requests int64 `json:"requests,omitempty"`
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// +optional
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`
	// +optional
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// CostUSD at the price table's prices; empty when the table has no price for the model
	// (never guessed: the CostKnown condition names it).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
}

// AgentUsageStatus is what an agent's CLI reported of its own usage.
type AgentUsageStatus struct {
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// +optional
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`
}

// ReactionTrigger names a condition a reaction responds to.
// +kubebuilder:validation:Enum=ciFailed;changesRequested;commented;mergeConflicts;approvedAndGreen;stuck;needsInput;exited
type ReactionTrigger string

const (
	TriggerCIFailed         ReactionTrigger = "ciFailed"
	TriggerChangesRequested ReactionTrigger = "changesRequested"
	TriggerCommented        ReactionTrigger = "commented"
	TriggerMergeConflicts   ReactionTrigger = "mergeConflicts"
	TriggerApprovedAndGreen ReactionTrigger = "approvedAndGreen"
	TriggerStuck            ReactionTrigger = "stuck"
	TriggerNeedsInput       ReactionTrigger = "needsInput"
	TriggerExited           ReactionTrigger = "exited"
)

// ReactionStatus is the persisted bookkeeping of one trigger, so that a manager restart never
// resets attempts or repeats an action.
type ReactionStatus struct {
	// Trigger this entry counts.
	// +required
	Trigger ReactionTrigger `json:"trigger"`
	// Episode identifies the current failure episode (for example the first failing head commit);
	// attempts count within it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Episode string `json:"episode,omitempty"`
	// EpisodeStartTime is when the episode began.
	// +optional
	EpisodeStartTime *metav1.Time `json:"episodeStartTime,omitempty"`
	// Attempts made in this episode.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// LastAttemptKey identifies what the last attempt answered (a head commit, a fingerprint of
	// review threads), so the same evidence never triggers twice.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastAttemptKey string `json:"lastAttemptKey,omitempty"`
	// LastAttemptTime is when the action last ran.
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty"`
	// Escalated is true once the episode was escalated to a human.
	// +optional
	Escalated bool `json:"escalated,omitempty"`
}

// MessageSource says where a message to the agent came from.
// +kubebuilder:validation:Enum=User;Reaction
type MessageSource string

const (
	MessageFromUser     MessageSource = "User"
	MessageFromReaction MessageSource = "Reaction"
)

// OutboxMessage is a message waiting to be delivered to the agent. Reaction messages carry their
// text here so that delivery survives a manager restart; user messages point at spec.messages.
type OutboxMessage struct {
	// ID of the message: the spec message's id, or one derived from the reaction and its attempt.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// Source of the message.
	// +required
	Source MessageSource `json:"source"`
	// Trigger of a reaction message.
	// +optional
	Trigger ReactionTrigger `json:"trigger,omitempty"`
	// Text of a reaction message.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Text string `json:"text,omitempty"`
	// CreatedTime is when the message was queued.
	// +optional
	CreatedTime *metav1.Time `json:"createdTime,omitempty"`
}

// MessagesStatus tracks delivery of messages to the agent.
type MessagesStatus struct {
	// Pending messages, oldest first.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=32
	Pending []OutboxMessage `json:"pending,omitempty"`
	// Delivered ids, oldest first.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=128
	Delivered []string `json:"delivered,omitempty"`
}

// PendingNotification is a notification not yet delivered to every route that takes it. Keeping
// it in status makes delivery survive a manager restart (at least once; receivers deduplicate on
// the id, sent as X-Shepherd-Delivery).
type PendingNotification struct {
	// ID of the notification, stable across retries.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// Type is the event ("ci.failing", "merge.completed", ...).
	// +required
	// +kubebuilder:validation:MaxLength=64
	Type string `json:"type"`
	// Priority of the notification.
	// +required
	Priority Priority `json:"priority"`
	// Reason is the event reason.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
	// Message for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// Routes still to deliver to.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	Routes []string `json:"routes,omitempty"`
	// CreatedTime is when the event happened.
	// +optional
	CreatedTime *metav1.Time `json:"createdTime,omitempty"`
}

// GraceStatus tracks a missing or contradictory signal, so that one lost observation never
// declares the agent gone.
type GraceStatus struct {
	// Signal that is missing, for example "pod" or "runner".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Signal string `json:"signal,omitempty"`
	// Since is the start of the current observation window: the signal has been missing since at
	// least then. After a pause in observations (a manager restart) the window slides forward, so
	// the pause counts as one observation, not as proof that the agent is gone.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Observations counts consecutive observations with the signal missing.
	// +optional
	Observations int32 `json:"observations,omitempty"`
}

// AgentSessionStatus is what the AgentSession controller observed and decided.
type AgentSessionStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase of the session.
	// +optional
	Phase SessionPhase `json:"phase,omitempty"`

	// PhaseTransitionTime is when the phase last changed.
	// +optional
	PhaseTransitionTime *metav1.Time `json:"phaseTransitionTime,omitempty"`

	// Conditions: Ready, Reconciling, Stalled, WorkspaceReady, AgentRunning, PullRequestOpen,
	// ChecksPassing, ReviewApproved, Mergeable, NeedsAttention.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Agent in effect and its conversation id.
	// +optional
	Agent AgentStatus `json:"agent,omitempty"`

	// Branch the session works on.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Branch string `json:"branch,omitempty"`

	// WorktreeName is the Worktree in use.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	WorktreeName string `json:"worktreeName,omitempty"`

	// PodName is the agent pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName,omitempty"`

	// PullRequest as last read from the forge.
	// +optional
	PullRequest *PullRequestStatus `json:"pullRequest,omitempty"`

	// Activity of the agent.
	// +optional
	Activity *ActivityStatus `json:"activity,omitempty"`

	// Summary of the work, from the agent.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Summary string `json:"summary,omitempty"`

	// Usage: cost and tokens, from the agent's own output.
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`

	// Reactions is the persisted bookkeeping of each trigger.
	// +optional
	// +listType=map
	// +listMapKey=trigger
	// +kubebuilder:validation:MaxItems=7
	Reactions []ReactionStatus `json:"reactions,omitempty"`

	// Messages tracks delivery of messages to the agent.
	// +optional
	Messages MessagesStatus `json:"messages,omitempty"`

	// Notifications not yet delivered to their routes (Kubernetes Events are emitted at once).
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=32
	Notifications []PendingNotification `json:"notifications,omitempty"`

	// Grace tracks a missing signal during its grace period.
	// +optional
	Grace *GraceStatus `json:"grace,omitempty"`

	// Restores counts how many times the agent pod was recreated (restore after stop, pod lost).
	// +optional
	Restores int32 `json:"restores,omitempty"`

	// AdmittedTime is when the session left the queue.
	// +optional
	AdmittedTime *metav1.Time `json:"admittedTime,omitempty"`

	// StartTime is when the agent first ran.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the session reached a terminal phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// AgentSession is one agent on one task, from spawn to merge.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 63 && self.metadata.name.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="name must be a DNS label (at most 63 lowercase letters, digits and '-'): Shepherd uses it in labels and child names"
// +kubebuilder:resource:shortName=as;session,categories=shepherd
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agent.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="PR",type=integer,JSONPath=`.status.pullRequest.number`
// +kubebuilder:printcolumn:name="CI",type=string,JSONPath=`.status.pullRequest.checks`
// +kubebuilder:printcolumn:name="Review",type=string,JSONPath=`.status.pullRequest.reviewDecision`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.costUSD`,description="US dollars the session spent (metered by the model proxy; else the agent's own report)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.status.branch`,priority=1
// +kubebuilder:printcolumn:name="Activity",type=string,JSONPath=`.status.activity.state`,priority=1
type AgentSession struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the task.
	// +required
	Spec AgentSessionSpec `json:"spec"`

	// Status is what the controller observed and decided.
	// +optional
	Status AgentSessionStatus `json:"status,omitempty"`
}

// AgentSessionList is a list of AgentSessions.
//
// +kubebuilder:object:root=true
type AgentSessionList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentSession `json:"items"`
}
