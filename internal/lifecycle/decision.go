package lifecycle

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Decision is what Decide concluded. Apply writes its status part; the controller records the
// events and runs the actions after the status write succeeded.
type Decision struct {
	// Phase and why.
	Phase   agentsv1alpha1.SessionPhase
	Reason  string
	Message string
	// PhaseTransitionTime is when Phase was entered (unchanged when the phase did not change).
	PhaseTransitionTime metav1.Time

	// Conditions is the full condition list to persist: the previous list with every condition
	// this package owns set, and Reconciling/Stalled removed when not true.
	Conditions []metav1.Condition

	// Events to record, in order.
	Events []Event
	// Actions to run, in order.
	Actions []Action

	// Bookkeeping to persist.
	Reactions   []agentsv1alpha1.ReactionStatus
	Grace       *agentsv1alpha1.GraceStatus
	PullRequest *agentsv1alpha1.PullRequestStatus
	Activity    *agentsv1alpha1.ActivityStatus
	// Outbox holds messages to append to status.messages.pending (one per SendToAgent action).
	Outbox []agentsv1alpha1.OutboxMessage

	// Pass-through from the runner; empty leaves the status as it is.
	AgentSessionID string
	Summary        string
	Usage          *agentsv1alpha1.UsageStatus

	AdmittedTime   *metav1.Time
	StartTime      *metav1.Time
	CompletionTime *metav1.Time
	// Restored is true when this decision restores a Stopped session or respawns an agent whose
	// pod was lost (Apply counts it in status.restores).
	Restored bool

	// ObservedGeneration is the generation the decision describes.
	ObservedGeneration int64
	// RequeueAfter is when the decision may change without new evidence (a grace slot, the
	// stuck threshold, an escalation deadline); 0 when nothing is pending.
	RequeueAfter time.Duration
}

// Event is something that happened, for the record (a Kubernetes Event) and for notifications.
type Event struct {
	Type     agentsv1alpha1.EventType
	Priority agentsv1alpha1.Priority
	// Reason is CamelCase and doubles as the Kubernetes event reason.
	Reason  string
	Message string
	// Trigger of the reaction the event belongs to, if any.
	Trigger agentsv1alpha1.ReactionTrigger
}

// IsWarning reports whether the event is recorded with Kubernetes type Warning.
func (e Event) IsWarning() bool {
	return e.Priority == agentsv1alpha1.PriorityUrgent || e.Priority == agentsv1alpha1.PriorityWarning
}

// ActionType says what an Action does.
type ActionType string

// Action types.
const (
	// ActionSendToAgent queues Text for the agent (Outbox holds the same message, so delivery
	// survives a restart). Fields: ID, Source, Trigger (for reactions), Text, Attempt.
	ActionSendToAgent ActionType = "SendToAgent"
	// ActionNotify sends Text through the Project's notification routes at Priority.
	// Fields: ID, Trigger (empty for built-in notifications), Event, Reason, Priority, Text.
	ActionNotify ActionType = "Notify"
	// ActionMerge merges pull request PullRequestNumber with MergeMethod, only if its head is
	// still ExpectedHeadSHA (the forge refuses otherwise). Fields: ID, Trigger, MergeMethod,
	// PullRequestNumber, ExpectedHeadSHA, Attempt.
	ActionMerge ActionType = "Merge"
	// ActionEscalate tells humans, at Priority urgent, that the reaction to Trigger gave up.
	// Fields: ID, Trigger, Event (reaction.escalated), Reason, Priority, Text, Attempt (attempts
	// made).
	ActionEscalate ActionType = "Escalate"
	// ActionCreatePod creates the session's agent pod (its name is deterministic: a second
	// create finds it). Fields: ID.
	ActionCreatePod ActionType = "CreatePod"
	// ActionDeletePod deletes the agent pod PodUID (a precondition on the UID: a newer pod of
	// the same name is never deleted for an older one). Fields: ID, PodUID.
	ActionDeletePod ActionType = "DeletePod"
	// ActionOpenPullRequest opens the session's pull request, or updates the open one's title
	// and body, as the runner asked (the request waits in the manager's memory; the runner's
	// call is answered with the result, and a runner whose call failed asks again). Fields: ID.
	ActionOpenPullRequest ActionType = "OpenPullRequest"
	// ActionCreateWorktree creates the session's own Worktree once it is admitted (its name is
	// deterministic, `<session>`: a second create finds it). Fields: ID.
	ActionCreateWorktree ActionType = "CreateWorktree"
	// ActionReleaseWorktree sets the session's own Worktree Absent after its pull request
	// merged (the Project's cleanup policy): its checkout goes, the record and branch stay.
	// Fields: ID.
	ActionReleaseWorktree ActionType = "ReleaseWorktree"
	// ActionClosePullRequest closes pull request PullRequestNumber with the comment Text, for a
	// session being deleted with spec.onDelete ClosePullRequest, while the forge shows it open.
	// Fields: ID, PullRequestNumber, Text.
	ActionClosePullRequest ActionType = "ClosePullRequest"
	// ActionMarkReady marks pull request PullRequestNumber ready for review: the session's
	// spec.pullRequest.draft went false while the draft it opened is open (an AgentTask chose
	// it). Fields: ID, PullRequestNumber.
	ActionMarkReady ActionType = "MarkReady"
)

// ActionTypes lists every action type, in the order docs/architecture.md lists them.
var ActionTypes = []ActionType{ActionMerge, ActionOpenPullRequest, ActionSendToAgent, ActionNotify, ActionEscalate, ActionCreateWorktree, ActionCreatePod, ActionDeletePod, ActionReleaseWorktree, ActionClosePullRequest, ActionMarkReady}

// Level reports whether an action follows the state of the world rather than an event: it is
// asked for in every decision while the evidence calls for it (a pod that should exist and does
// not), and made safe to repeat by the API server (a deterministic name, a UID precondition, a
// state to set), not by a key in status.
func (t ActionType) Level() bool {
	return t == ActionCreateWorktree || t == ActionCreatePod || t == ActionDeletePod || t == ActionReleaseWorktree || t == ActionClosePullRequest || t == ActionMarkReady
}

// Action is one thing the controller must do. Only the fields its Type lists are set.
type Action struct {
	Type ActionType
	// ID is deterministic: the same decision always names the same action, so delivery and
	// notifiers can drop duplicates. Reaction ids contain a '.', which spec message ids cannot.
	ID      string
	Trigger agentsv1alpha1.ReactionTrigger
	// Event and Reason say what a notification is about, in the event vocabulary, so that a
	// notifier can present it like the event it stands for.
	Event             agentsv1alpha1.EventType
	Reason            string
	Source            agentsv1alpha1.MessageSource
	Priority          agentsv1alpha1.Priority
	Text              string
	Attempt           int32
	MergeMethod       agentsv1alpha1.MergeMethod
	PullRequestNumber int64
	ExpectedHeadSHA   string
	PodUID            string
	// Force, for ActionDeletePod: delete at once (grace 0). Only for a pod already being
	// deleted on a lost node, whose kubelet will never confirm it.
	Force bool
}
