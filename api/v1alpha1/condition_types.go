package v1alpha1

// Condition types. Ready is normal-true (True is good). Reconciling and Stalled are
// abnormal-true and are present only while true, as kstatus expects, so `kubectl wait
// --for=condition=Ready`, Argo CD and Flux read Shepherd objects without plugins.
const (
	// ConditionReady: the object is in the state its spec asks for.
	ConditionReady = "Ready"
	// ConditionReconciling: the controller is working towards the spec (present only when True).
	ConditionReconciling = "Reconciling"
	// ConditionStalled: progress needs a human; the message says what to fix (present only when
	// True).
	ConditionStalled = "Stalled"

	// ConditionRepositoryReachable (Project): the repository answered with the configured
	// credentials.
	ConditionRepositoryReachable = "RepositoryReachable"
	// ConditionCredentialsValid (Project): the referenced Secrets exist, hold their keys, and the
	// forge accepts the token.
	ConditionCredentialsValid = "CredentialsValid"
	// ConditionMirrorReady (Project): the repository mirror used by worktree mode is current.
	ConditionMirrorReady = "MirrorReady"
	// ConditionNotificationsDelivering (Project): every notification route delivers.
	ConditionNotificationsDelivering = "NotificationsDelivering"

	// ConditionSetupSucceeded (Worktree): the setup commands succeeded. False leaves the checkout
	// Ready and usable.
	ConditionSetupSucceeded = "SetupSucceeded"
	// ConditionDeletionBlocked (Worktree): deletion waits because a session is bound or commits are
	// unpushed (present only when True).
	ConditionDeletionBlocked = "DeletionBlocked"

	// ConditionWorkspaceReady (AgentSession): the session's Worktree is Ready.
	ConditionWorkspaceReady = "WorkspaceReady"
	// ConditionAgentRunning (AgentSession): the agent process runs in its pod.
	ConditionAgentRunning = "AgentRunning"
	// ConditionCostKnown (AgentSession, with a model proxy): every model the session used has a
	// price, so status.usage.costUSD is its whole cost. False names the models without one:
	// their tokens are counted, their cost never guessed.
	ConditionCostKnown = "CostKnown"
	// ConditionBudgetAvailable (Project, with spec.budget): spend is under every cap of the
	// current day and month. False (BudgetExhausted) names the cap and when the window resets.
	ConditionBudgetAvailable = "BudgetAvailable"
	// ConditionUsageConsistent (AgentSession, with a model proxy): the agent CLI's own count of
	// output tokens agrees with the proxy's within the tolerance (5%, and at least 100 tokens).
	// False says the CLI misreports (or the proxy missed requests); the proxy's count stands.
	ConditionUsageConsistent = "UsageConsistent"
	// ConditionPullRequestOpen (AgentSession): the session's pull request is open.
	ConditionPullRequestOpen = "PullRequestOpen"
	// ConditionChecksPassing (AgentSession): every check on the head commit passed.
	ConditionChecksPassing = "ChecksPassing"
	// ConditionReviewApproved (AgentSession): the pull request is approved.
	ConditionReviewApproved = "ReviewApproved"
	// ConditionMergeable (AgentSession): the forge would merge the pull request now.
	ConditionMergeable = "Mergeable"
	// ConditionNeedsAttention (AgentSession): a human's judgment is needed; the message says why.
	ConditionNeedsAttention = "NeedsAttention"
)

// Condition reasons shared by all kinds. Reasons are CamelCase and double as event reasons.
const (
	// ReasonSucceeded: the last reconcile reached the desired state.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: the controller is working towards the desired state.
	ReasonProgressing = "Progressing"
	// ReasonReconcileError: a transient error; the controller retries with back-off.
	ReasonReconcileError = "ReconcileError"
	// ReasonInvalidSpec: the spec cannot be acted on; the message says what to fix.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonProjectNotFound: the referenced Project does not exist.
	ReasonProjectNotFound = "ProjectNotFound"
	// ReasonProjectNotReady: the referenced Project is not Ready.
	ReasonProjectNotReady = "ProjectNotReady"
	// ReasonSecretNotFound: a referenced Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound: a referenced Secret lacks the named key.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonTokenRejected: the forge refused the credentials.
	ReasonTokenRejected = "TokenRejected"
	// ReasonRepositoryNotFound: the forge or git says the repository does not exist.
	ReasonRepositoryNotFound = "RepositoryNotFound"
	// ReasonForgeUnavailable: the forge answered with errors or not at all; retried.
	ReasonForgeUnavailable = "ForgeUnavailable"
	// ReasonRateLimited: the forge's rate limit was reached; retried after its reset.
	ReasonRateLimited = "RateLimited"
)

// Project reasons.
const (
	ReasonMirrorFetching    = "MirrorFetching"
	ReasonMirrorFetchFailed = "MirrorFetchFailed"
	ReasonMirrorNotNeeded   = "MirrorNotNeeded"
	ReasonMirrorFetched     = "MirrorFetched"
	ReasonMirrorPending     = "MirrorPending"
	ReasonNotifierFailing   = "NotifierFailing"
)

// Worktree reasons.
const (
	ReasonCheckoutPending  = "CheckoutPending"
	ReasonCheckoutFailed   = "CheckoutFailed"
	ReasonCheckoutMissing  = "CheckoutMissing"
	ReasonCheckoutRemoving = "CheckoutRemoving"
	ReasonCheckoutRemoved  = "CheckoutRemoved"
	// ReasonCheckoutAbandoned: a Worktree being deleted whose Project or volume is gone or going
	// is released without its remove pod (nothing can reach the checkout any more).
	ReasonCheckoutAbandoned  = "CheckoutAbandoned"
	ReasonSetupPending       = "SetupPending"
	ReasonSetupFailed        = "SetupFailed"
	ReasonSessionBound       = "SessionBound"
	ReasonUnpushedCommits    = "UnpushedCommits"
	ReasonUncommittedChanges = "UncommittedChanges"
	ReasonBranchExists       = "BranchExists"
	ReasonForceDeleteAllowed = "ForceDeleteAllowed"
)

// AgentSession reasons. The lifecycle engine (internal/lifecycle) chooses them; each phase's
// reason is named after the phase.
const (
	ReasonQueued = "Queued"
	// ReasonBudgetExhausted: the Project's budget for the current day or month is spent; the
	// session waits Queued and resumes on its own when the window resets (AgentSession), or the
	// Project says so (BudgetAvailable=False).
	ReasonBudgetExhausted = "BudgetExhausted"
	// ReasonWithinBudget: spend is under every cap (BudgetAvailable=True).
	ReasonWithinBudget = "WithinBudget"
	// ReasonBudgetThreshold: spend reached the budget's notifyAtPercent of a cap (the
	// notification's reason).
	ReasonBudgetThreshold = "BudgetThreshold"
	// EventBudgetThreshold is the type of a Project's budget notification (action priority),
	// sent once per window when spend reaches notifyAtPercent of a cap.
	EventBudgetThreshold   = "budget.threshold"
	ReasonAdmitted         = "Admitted"
	ReasonWorkspacePending = "WorkspacePending"
	ReasonWorktreeNotFound = "WorktreeNotFound"
	ReasonWorktreeInUse    = "WorktreeInUse"
	ReasonPodPending       = "PodPending"
	// ReasonPodUnschedulable: the scheduler cannot place the agent pod (its message says why).
	ReasonPodUnschedulable = "PodUnschedulable"
	// ReasonVolumeAttachedElsewhere: the agent pod waits for a ReadWriteOnce volume that is still
	// attached to another node (a lost node, typically); the message names the node and what
	// frees the volume.
	ReasonVolumeAttachedElsewhere = "VolumeAttachedElsewhere"
	// ReasonPriced: the cost is from the price table, every model priced (CostKnown=True).
	ReasonPriced = "Priced"
	// ReasonPriceUnknown: a model the session used has no price (CostKnown=False).
	ReasonPriceUnknown = "PriceUnknown"
	// ReasonUsageAgrees: the CLI's and the proxy's counts agree (UsageConsistent=True).
	ReasonUsageAgrees = "UsageAgrees"
	// ReasonUsageMismatch: they disagree beyond the tolerance (UsageConsistent=False).
	ReasonUsageMismatch = "UsageMismatch"
	// ReasonSpawnDeadlineExceeded: the agent pod did not start within activity.spawnDeadline.
	ReasonSpawnDeadlineExceeded = "SpawnDeadlineExceeded"
	ReasonPodFailed             = "PodFailed"
	ReasonPodMissing            = "PodMissing"
	ReasonImagePullFailed       = "ImagePullFailed"
	ReasonAgentActive           = "AgentActive"
	ReasonAgentIdle             = "AgentIdle"
	ReasonAgentExited           = "AgentExited"
	ReasonAgentStopped          = "AgentStopped"
	ReasonAgentStuck            = "AgentStuck"
	ReasonAgentBlocked          = "AgentBlocked"
	ReasonWaitingForInput       = "WaitingForInput"
	ReasonSignalGrace           = "SignalGrace"
	ReasonNoPullRequest         = "NoPullRequest"
	ReasonPullRequestOpened     = "PullRequestOpened"
	ReasonPullRequestDraft      = "PullRequestDraft"
	ReasonPullRequestClosed     = "PullRequestClosed"
	ReasonMaxDurationReached    = "MaxDurationReached"
	ReasonMaxTurnsReached       = "MaxTurnsReached"
	// ReasonMaxCostReached: the session's metered spend reached its maxCostUSD (Done).
	ReasonMaxCostReached = "MaxCostReached"
	// ReasonLoopDetected: the agent went round in circles (the same tool call failing again and
	// again, or turns without any change to the checkout) past the session's runaway limits (Done,
	// escalated).
	ReasonLoopDetected      = "LoopDetected"
	ReasonIssueClosed       = "IssueClosed"
	ReasonPullRequestKept   = "PullRequestKept"
	ReasonPullRequestMerged = "PullRequestMerged"
	ReasonChecksPassed      = "ChecksPassed"
	ReasonChecksFailed      = "ChecksFailed"
	ReasonChecksPending     = "ChecksPending"
	ReasonNoChecks          = "NoChecks"
	ReasonApproved          = "Approved"
	ReasonChangesRequested  = "ChangesRequested"
	ReasonReviewRequired    = "ReviewRequired"
	ReasonNoReviewRequired  = "NoReviewRequired"
	ReasonMergeable         = "Mergeable"
	ReasonMergeConflict     = "MergeConflict"
	ReasonBehindBase        = "BehindBase"
	ReasonMergeBlocked      = "MergeBlocked"
	// ReasonMergeUnstable: the forge would merge, but a check it does not require is failing or
	// pending (GitHub's UNSTABLE); Shepherd merges only when every check is green.
	ReasonMergeUnstable     = "MergeUnstable"
	ReasonMergeStateUnknown = "MergeStateUnknown"
	ReasonEscalated         = "Escalated"
	ReasonSessionStopped    = "SessionStopped"
	ReasonSessionDone       = "SessionDone"
	// ReasonSuperseded: an AgentTask chose another attempt (spec.supersededBy).
	ReasonSuperseded = "Superseded"
	// AgentTask reasons (docs/best-of-n.md).
	ReasonAttemptsRunning    = "AttemptsRunning"
	ReasonAttemptChosen      = "AttemptChosen"
	ReasonWaitingForPick     = "WaitingForPick"
	ReasonNoAttemptToChoose  = "NoAttemptToChoose"
	ReasonAttemptLost        = "AttemptLost"
	ReasonSessionErrored     = "SessionErrored"
	ReasonNothingNeedsAction = "NothingNeedsAction"
)

// Finalizers.
const (
	// WorktreeFinalizer holds a Worktree until its checkout is removed, and refuses deletion while a
	// session is bound or commits are unpushed (unless ForceDeleteAnnotation is "true").
	WorktreeFinalizer = "agents.shepherd.dev/worktree-protection"
	// ClosePullRequestFinalizer holds an AgentSession with spec.onDelete ClosePullRequest until its
	// open pull request is closed (or, the forge unreachable, ClosePullRequestGiveUp has passed).
	// Sessions with onDelete Keep carry no finalizer: deleting them never waits on the manager.
	ClosePullRequestFinalizer = "agents.shepherd.dev/close-pull-request"
	// Sessions and Projects have no finalizer: their children carry owner references and the
	// garbage collector removes them, so deleting them costs no extra write.
)

// Annotations and labels.
const (
	// ForceDeleteAnnotation set to "true" on a Worktree lets it be deleted with sessions bound or
	// commits unpushed. The unpushed commits are lost.
	ForceDeleteAnnotation = "agents.shepherd.dev/force-delete"
	// ReleasedAfterMergeAnnotation marks a Worktree that a session set Absent under the Project's
	// cleanup.worktreeAfterMerge: Remove; its value is the generation that release made. The pull
	// request merged, so what that checkout still has uncommitted is left over, not work: the
	// uncommitted-changes guard lets it go (unpushed commits are still refused). A later change
	// of the spec is another generation, guarded again.
	ReleasedAfterMergeAnnotation = "agents.shepherd.dev/released-after-merge"
	// ApprovedHeadAnnotation on an AgentSession names the pull request head commit a human
	// approves for merging (Argo CD's approve action sets it): while it is the current head,
	// the approvedAndGreen reaction merges it, checks passing, whatever its configured action.
	ApprovedHeadAnnotation = "agents.shepherd.dev/approved-head"
	// ReconcileRequestAnnotation: changing its value asks the controllers for an immediate
	// reconcile (as `flux reconcile` does), for example to re-check credentials.
	ReconcileRequestAnnotation = "agents.shepherd.dev/reconcile-requested-at"

	// LabelProject carries the Project name on every child object.
	LabelProject = "agents.shepherd.dev/project"
	// LabelSession carries the AgentSession name on its children.
	LabelSession = "agents.shepherd.dev/session"
	// LabelTask carries the AgentTask name on its attempts (AgentSessions).
	LabelTask = "agents.shepherd.dev/task"
	// LabelWorktree carries the Worktree name on its children.
	LabelWorktree = "agents.shepherd.dev/worktree"
	// LabelComponent says what a child is: agent, mirror, checkout.
	LabelComponent = "agents.shepherd.dev/component"
	// LabelClaim names the ReadWriteOnce checkout or workspace claim a pod mounts (hashed past
	// 63 characters): the pods that share one are kept on one node by a pod affinity to it.
	LabelClaim = "agents.shepherd.dev/claim"
	// LabelProjectClaim names the Project's ReadWriteOnce workspace claim a clone-mode pod mounts
	// for the shared paths, kept on one node likewise.
	LabelProjectClaim = "agents.shepherd.dev/project-claim"
	// BacklogLabel is "true" on the AgentSessions a Project's backlog created.
	BacklogLabel = "agents.shepherd.dev/backlog"
	// IssueLabel carries the issue key of a backlog session ("42", "eng-123").
	IssueLabel = "agents.shepherd.dev/issue"
	// BacklogStageAnnotation is the backlog stage whose issue labels were last applied: absent
	// (claimed), in-progress, done or ended.
	BacklogStageAnnotation = "agents.shepherd.dev/backlog-stage"

	// LabelManagedBy is the standard managed-by label; Shepherd's caches select on it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on Shepherd's children.
	ManagedByValue = "shepherd"
)

// Event reasons of a Worktree's phase changes: "Phase" and the phase entered.
const (
	ReasonPhasePending  = "PhasePending"
	ReasonPhaseReady    = "PhaseReady"
	ReasonPhaseFailed   = "PhaseFailed"
	ReasonPhaseMissing  = "PhaseMissing"
	ReasonPhaseRemoving = "PhaseRemoving"
	ReasonPhaseRemoved  = "PhaseRemoved"
)

// WorktreePhaseEventReason is the event reason of entering phase p (one of the constants above).
func WorktreePhaseEventReason(p WorktreePhase) string {
	switch p {
	case WorktreePending:
		return ReasonPhasePending
	case WorktreeReady:
		return ReasonPhaseReady
	case WorktreeFailed:
		return ReasonPhaseFailed
	case WorktreeMissing:
		return ReasonPhaseMissing
	case WorktreeRemoving:
		return ReasonPhaseRemoving
	case WorktreeRemoved:
		return ReasonPhaseRemoved
	}
	return ReasonPhasePending // the API admits no other phase
}
