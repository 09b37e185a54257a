package v1alpha1

// EventType names what happened to a session, in the vocabulary notifications and webhooks use.
// The lifecycle engine (internal/lifecycle) emits them; docs/reactions.md lists each with its
// priority. The last group extends the architecture's vocabulary for phases it had no word for.
type EventType string

// Session events.
const (
	EventSessionSpawned    EventType = "session.spawned"
	EventSessionWorking    EventType = "session.working"
	EventSessionStuck      EventType = "session.stuck"
	EventSessionNeedsInput EventType = "session.needs_input"
	EventSessionKilled     EventType = "session.killed"
)

// Pull request events.
const (
	EventPRCreated EventType = "pr.created"
	EventPRUpdated EventType = "pr.updated"
	EventPRMerged  EventType = "pr.merged"
	EventPRClosed  EventType = "pr.closed"
)

// CI events.
const (
	EventCIPassing   EventType = "ci.passing"
	EventCIFailing   EventType = "ci.failing"
	EventCIFixSent   EventType = "ci.fix_sent"
	EventCIFixFailed EventType = "ci.fix_failed"
)

// Review events.
const (
	EventReviewPending          EventType = "review.pending"
	EventReviewApproved         EventType = "review.approved"
	EventReviewChangesRequested EventType = "review.changes_requested"
	EventReviewCommentsSent     EventType = "review.comments_sent"
	// EventReviewCommented: trusted people or bots commented on the pull request's conversation
	// (or left a review summary); the new comments were forwarded to the agent.
	EventReviewCommented EventType = "review.commented"
)

// Merge events.
const (
	EventMergeReady     EventType = "merge.ready"
	EventMergeConflicts EventType = "merge.conflicts"
	EventMergeCompleted EventType = "merge.completed"
)

// Reaction events.
const (
	EventReactionEscalated EventType = "reaction.escalated"
)

// Extensions of the vocabulary: phases and outcomes the architecture's list has no word for.
const (
	// EventSessionQueued: the session waits for a slot under the Project's limits.
	EventSessionQueued EventType = "session.queued"
	// EventSessionExited: the agent process ended (with its exit code in the message).
	EventSessionExited EventType = "session.exited"
	// EventSessionDone: the session ended without a merge (clean exit without a pull request,
	// or its pull request was closed).
	EventSessionDone EventType = "session.done"
	// EventSessionErrored: the session cannot go on without a human (urgent).
	EventSessionErrored EventType = "session.errored"
	// EventReactionTemplateFailed: a Project's message template failed to render; the built-in
	// message was sent instead.
	EventReactionTemplateFailed EventType = "reaction.template_failed"
)

// AgentSession reasons added by the lifecycle engine, beside those in condition_types.go.
const (
	// ReasonSpawning: the agent pod is being created or started.
	ReasonSpawning = "Spawning"
	// ReasonRestored: a Stopped session was set Running again.
	ReasonRestored = "Restored"
	// ReasonRunnerSilent: the pod runs but its runner has not reported within the grace period.
	ReasonRunnerSilent = "RunnerSilent"
	// ReasonPullRequestUpdated: the pull request's head commit changed.
	ReasonPullRequestUpdated = "PullRequestUpdated"
	// ReasonCIFixSent: the CI failure was sent to the agent.
	ReasonCIFixSent = "CIFixSent"
	// ReasonCIFixFailed: checks failed again on the agent's new head commit.
	ReasonCIFixFailed = "CIFixFailed"
	// ReasonReviewCommentsSent: review comments were sent to the agent.
	ReasonReviewCommentsSent = "ReviewCommentsSent"
	// ReasonCommentsForwarded: new comments of the pull request's conversation were forwarded to
	// the agent.
	ReasonCommentsForwarded = "CommentsForwarded"
	// ReasonConflictsSent: the merge conflict was sent to the agent.
	ReasonConflictsSent = "ConflictsSent"
	// ReasonMergeRequested: Shepherd asked the forge to merge the pull request.
	ReasonMergeRequested = "MergeRequested"
	// ReasonMergeCompleted: the merge Shepherd requested went through.
	ReasonMergeCompleted = "MergeCompleted"
	// ReasonMergeFailed: the forge refused a merge Shepherd asked for (an event; the
	// escalation that follows tells a human).
	ReasonMergeFailed = "MergeFailed"
	// ReasonMergeGated: the pull request is mergeable, but the Merge reaction waits for what its
	// gate asks: an approval given at the head, checks passed at the head.
	ReasonMergeGated = "MergeGated"
	// ReasonMergeRetrying: the forge failed a merge for now (5xx, unreachable, a rate limit);
	// Shepherd asks again with back-off.
	ReasonMergeRetrying = "MergeRetrying"
	// ReasonAgentFixing: the agent was sent the failure and is expected to push a fix.
	ReasonAgentFixing = "AgentFixing"
	// ReasonAwaitingHuman: the reaction for this trigger only notifies (or is None); a human acts.
	ReasonAwaitingHuman = "AwaitingHuman"
	// ReasonTemplateFailed: a Project's message template failed; the built-in message was used.
	ReasonTemplateFailed = "TemplateFailed"
)
