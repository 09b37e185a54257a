package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/pricing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// eval is one decision in progress: the input, what was derived from it, and the outputs.
type eval struct {
	in   Input
	now  time.Time
	s    Settings
	prev *agentsv1alpha1.AgentSessionStatus
	// prevPhase is the previous phase; "" for a new session.
	prevPhase agentsv1alpha1.SessionPhase
	// runPrev is the previous phase as the runtime rules see it: Spawning for a session that is
	// new, leaving the queue or being restored.
	runPrev agentsv1alpha1.SessionPhase

	pr prFacts
	// prStatus is the pull request to persist.
	prStatus *agentsv1alpha1.PullRequestStatus

	agent agentFacts
	// signal is the missing or contradictory signal under grace ("" when none).
	signal       string
	signalDetail string
	grace        *agentsv1alpha1.GraceStatus
	graceExpired bool

	phase    agentsv1alpha1.SessionPhase
	reason   string
	message  string
	restored bool
	// exitedNow is true when this decision ends the session because its agent exited without a
	// pull request; the exited reaction runs in this decision only.
	exitedNow bool
	// podLostNow is true when this decision respawns an agent whose pod was declared gone.
	podLostNow bool
	// lostDetail says why the agent was declared gone, for the event.
	lostDetail string
	// ranRuntime is true when the phase came from the runtime rules (a running session), the
	// only place where an agent's exit is news.
	ranRuntime bool

	// ownMerge is true when the pull request is merged by the merge this manager made (the
	// merge runner's evidence), whether or not the forge was read since.
	ownMerge bool
	// mergeRetry is set while a merge waits to be asked for again after a transient failure.
	mergeRetry *MergeEvidence
	// mergeGated says why a Merge the phase calls for waits (the merge gate), "" when it does not.
	mergeGated string

	reactions map[agentsv1alpha1.ReactionTrigger]*agentsv1alpha1.ReactionStatus
	events    []Event
	// reactionEvents follow the fact and phase events in the decision.
	reactionEvents []Event
	actions        []Action
	outbox         []agentsv1alpha1.OutboxMessage
	requeue        time.Duration
}

// Decide computes the session's phase, conditions, events, actions and bookkeeping from the
// evidence in in. It is deterministic and total: the same input always gives the same
// decision, and no input panics.
func Decide(in Input) Decision {
	e := &eval{
		in:        in,
		now:       in.Now.UTC().Truncate(time.Second),
		s:         in.Settings.withDefaults(),
		prev:      &in.Previous,
		prevPhase: in.Previous.Phase,
		runPrev:   in.Previous.Phase,
	}
	e.reactions = make(map[agentsv1alpha1.ReactionTrigger]*agentsv1alpha1.ReactionStatus, len(Triggers))
	for i := range in.Previous.Reactions {
		r := in.Previous.Reactions[i].DeepCopy()
		e.reactions[r.Trigger] = r
	}
	e.readPullRequest()
	e.humanApproval()
	e.readAgent()
	e.decidePhase()
	e.queueUserMessages()
	e.runReactions()
	e.builtinNotifications()
	e.transitionEvents()
	e.pullRequestActions()
	e.podActions()
	e.worktreeActions()
	if e.in.Spec.Deleting {
		// The garbage collector removes the pod and the Worktree with the session; nothing is
		// started, sent or told for a session on its way out: only its pull request is closed.
		e.actions = slices.DeleteFunc(e.actions, func(a Action) bool { return a.Type != ActionClosePullRequest })
	}
	return e.decision()
}

func (e *eval) set(p agentsv1alpha1.SessionPhase, reason, message string) {
	e.phase, e.reason, e.message = p, reason, message
}

func (e *eval) desired() agentsv1alpha1.SessionState {
	if e.in.Spec.State == "" {
		return agentsv1alpha1.SessionRunning
	}
	return e.in.Spec.State
}

// after records that the decision may change at t without new evidence.
func (e *eval) after(t time.Time) {
	d := t.Sub(e.now)
	if d < time.Second {
		d = time.Second
	}
	if e.requeue == 0 || d < e.requeue {
		e.requeue = d
	}
}

// observedGeneration is the generation the decision fully describes: the input's, unless a
// level action that undoes something is still asked for (a pod to delete, a Worktree to
// release, a pull request to close): a reader that waits for observedGeneration (kstatus,
// `kubectl wait`) must not see a stop as done while its pod still runs. The creations (the
// session's Worktree and pod, by their fixed names right after this write) do not hold it: the
// status already says Spawning and Reconciling, which is the truth a reader needs, and holding it
// would cost every new session one more status write once they exist (issue 23).
func (e *eval) observedGeneration() int64 {
	for _, a := range e.actions {
		if a.Type.Level() && a.Type != ActionCreatePod && a.Type != ActionCreateWorktree {
			return e.prev.ObservedGeneration
		}
	}
	return e.in.Generation
}

func (e *eval) decision() Decision {
	d := Decision{
		Phase:              e.phase,
		Reason:             e.reason,
		Message:            e.message,
		Events:             e.events,
		Actions:            e.actions,
		Grace:              e.grace,
		PullRequest:        e.prStatus,
		Activity:           e.activityStatus(),
		Outbox:             e.outbox,
		Restored:           e.restored || e.podLostNow,
		ObservedGeneration: e.observedGeneration(),
		RequeueAfter:       e.requeue,
	}
	d.PhaseTransitionTime = metav1.NewTime(e.now)
	if e.phase == e.prevPhase && e.prev.PhaseTransitionTime != nil {
		d.PhaseTransitionTime = *e.prev.PhaseTransitionTime.DeepCopy()
	}
	if e.phase.IsTerminal() {
		// Nothing is waited for any more.
		d.Grace = nil
	}
	for _, t := range Triggers {
		if r, ok := e.reactions[t]; ok && !isEmptyReaction(r) {
			d.Reactions = append(d.Reactions, *r)
		}
	}
	if e.agent.current {
		d.AgentSessionID = e.in.Runner.AgentSessionID
		d.Summary = e.in.Runner.Summary
		if e.in.Runner.Usage != nil {
			d.Usage = withWindows(e.in.Runner.Usage.DeepCopy(), e.prev.Usage, e.now, e.in.Spec.Budget.Location)
		}
	}
	d.AdmittedTime = e.prev.AdmittedTime.DeepCopy()
	if e.prevPhase == agentsv1alpha1.PhaseStopped && e.phase != agentsv1alpha1.PhaseStopped {
		// A restore is admitted anew (it may have waited in the queue): its slot dates from now.
		d.AdmittedTime = nil
	}
	if d.AdmittedTime == nil && e.in.Spec.Admitted && (e.phase == agentsv1alpha1.PhaseSpawning || e.agent.live) {
		d.AdmittedTime = ptr(metav1.NewTime(e.now))
	}
	d.StartTime = e.prev.StartTime.DeepCopy()
	if d.StartTime == nil && e.agent.live {
		d.StartTime = ptr(metav1.NewTime(e.now))
	}
	d.CompletionTime = e.prev.CompletionTime.DeepCopy()
	switch {
	case !e.phase.IsTerminal():
		d.CompletionTime = nil
	case d.CompletionTime == nil || e.phase != e.prevPhase:
		d.CompletionTime = ptr(metav1.NewTime(e.now))
	}
	d.Conditions = e.conditions(d)
	return d
}

func isEmptyReaction(r *agentsv1alpha1.ReactionStatus) bool {
	return r.Episode == "" && r.LastAttemptKey == "" && r.Attempts == 0 && !r.Escalated
}

// decidePhase runs the ordered rules. The first that applies wins; docs/lifecycle.md lists them
// in the same order.
func (e *eval) decidePhase() {
	prev := e.prevPhase
	admitted := e.in.Spec.Admitted
	// entering: the session is new, leaving the queue, or being restored. The runtime rules
	// then judge it as if it were Spawning, so that a decision is a fixed point: deciding again
	// on the same evidence lands on the same phase.
	entering := prev == Start || prev == agentsv1alpha1.PhaseQueued || prev == agentsv1alpha1.PhaseStopped
	switch {
	case prev == agentsv1alpha1.PhaseMerged:
		// Merged is final: the work is in the base branch, nothing can undo that.
		e.holdTerminal()
	case e.pr.known && e.pr.state == agentsv1alpha1.PullRequestMerged:
		// Read from the pull request itself; it ends the session from any phase, even a
		// terminal one, because it is the outcome the session exists for.
		e.set(agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged, "Pull request "+e.pr.ref()+" was merged")
	case e.in.Spec.SupersededBy != "":
		// An AgentTask chose another attempt: this one is over (its pull request is closed by
		// pullRequestActions, its Worktree released by worktreeActions).
		e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonSuperseded, withDetail("Another attempt of the task was chosen: "+
			clip.Marked(e.in.Spec.SupersededBy, 63, truncated), clip.Marked(e.in.Spec.SupersededURL, 2048, truncated)))
	case e.desired() == agentsv1alpha1.SessionStopped:
		e.set(agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped, "The session's state is Stopped; the worktree and the conversation are kept")
	case prev == agentsv1alpha1.PhaseDone || prev == agentsv1alpha1.PhaseErrored:
		e.holdTerminal()
	default:
		switch {
		case e.pr.known && e.pr.state == agentsv1alpha1.PullRequestClosed:
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonPullRequestClosed, "Pull request "+e.pr.ref()+" was closed without merging")
		case e.in.Issue.Closed:
			// The work is no longer wanted. An open pull request is left for a human; if its merge
			// is what closed the issue, rule 2 makes the session Merged once the forge says so.
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonIssueClosed,
				fmt.Sprintf("Issue %s was closed in the tracker (%s)", e.in.Issue.ID, clip.Marked(e.in.Issue.State, 64, truncated)))
		case e.limitReached():
		case e.budgetSpent(entering):
		case entering && !admitted:
			// Admission is sticky: a session that left the queue keeps its slot until it stops.
			e.set(agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonQueued, "Waiting for a slot under the Project's maxConcurrentSessions")
		default:
			if entering {
				e.runPrev = agentsv1alpha1.PhaseSpawning
			}
			e.runtimePhase()
		}
		// The explicit restore: state went back to Running.
		e.restored = prev == agentsv1alpha1.PhaseStopped && !e.phase.IsTerminal()
	}
}

// worktreeTurnPoll is how often a session waiting for its turn on a shared Worktree looks again.
const worktreeTurnPoll = 5 * time.Second

// limitReached ends the session at its maxDuration (counted from the agent's first start) or
// once its agent finished maxTurns turns and is not in the middle of another; the pull request
// stays as it is, for a human. Before the deadline it asks to be decided again at it.
func (e *eval) limitReached() bool {
	if d := e.in.Spec.MaxDuration; d > 0 && e.prev.StartTime != nil {
		end := e.prev.StartTime.Add(d)
		if !e.now.Before(end) {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonMaxDurationReached,
				fmt.Sprintf("The session reached its maxDuration of %s: its agent started at %s", d, stamp(e.prev.StartTime.Time)))
			return true
		}
		e.after(end)
	}
	if n := e.in.Spec.MaxTurns; n > 0 {
		usage := e.prev.Usage
		if e.agent.current && e.in.Runner.Usage != nil {
			usage = e.in.Runner.Usage
		}
		if usage != nil && usage.Turns >= n && e.in.Runner.State != agentsv1alpha1.ActivityActive {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonMaxTurnsReached,
				fmt.Sprintf("The agent finished %d turns, its maxTurns of %d", usage.Turns, n))
			return true
		}
	}
	// A runaway agent is stopped where it is: a loop of failing calls may never end its turn.
	// Unchanged turns are counted when a turn ends, so that limit is judged between turns.
	if e.agent.current {
		l := e.in.Runner.Loop
		if n := e.in.Spec.MaxRepeatedFailures; n > 0 && l.RepeatedFailures >= n {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonLoopDetected,
				fmt.Sprintf("The same tool call failed %d times in a row (maxRepeatedFailures %d): %s", l.RepeatedFailures, n, clip.Marked(l.FailingCall, 256, truncated)))
			return true
		}
		if n := e.in.Spec.MaxUnchangedTurns; n > 0 && l.UnchangedTurns >= n && e.in.Runner.State != agentsv1alpha1.ActivityActive {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonLoopDetected,
				fmt.Sprintf("%d turns in a row left the checkout unchanged (maxUnchangedTurns %d)", l.UnchangedTurns, n))
			return true
		}
	}
	if limit := e.in.Spec.MaxCostUSD; limit > 0 {
		usage := e.prev.Usage
		if e.agent.current && e.in.Runner.Usage != nil {
			usage = e.in.Runner.Usage
		}
		if usage != nil && usage.Source == agentsv1alpha1.UsageFromProxy && pricing.ParseUSD(usage.CostUSD) >= limit &&
			e.in.Runner.State != agentsv1alpha1.ActivityActive && e.in.Runner.State != agentsv1alpha1.ActivityBlocked {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonMaxCostReached,
				fmt.Sprintf("The session spent $%s, its maxCostUSD of $%s", usage.CostUSD, pricing.Format(limit)))
			return true
		}
	}
	return false
}

// budgetSpent queues the session while the Project's budget is spent: a session not running
// yet waits; a running one waits too under FinishTurn once its agent is between turns (a turn
// is never cut), and goes on under Continue. Its pod goes, its conversation and checkout stay;
// when the window resets it is admitted again and resumes. The decision is due again at the
// reset.
func (e *eval) budgetSpent(entering bool) bool {
	b := e.in.Spec.Budget
	if b.Exhausted == "" {
		return false
	}
	if !b.ResetTime.IsZero() {
		e.after(b.ResetTime)
	}
	midTurn := e.agent.current && (e.in.Runner.State == agentsv1alpha1.ActivityActive || e.in.Runner.State == agentsv1alpha1.ActivityBlocked)
	if !entering && (!b.FinishTurn || midTurn) {
		return false
	}
	msg := "The budget is spent: " + b.Exhausted
	if !b.ResetTime.IsZero() {
		msg += "; the session resumes at " + stamp(b.ResetTime)
	}
	e.set(agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonBudgetExhausted, msg)
	return true
}

// holdTerminal keeps a terminal phase, with the reason it was entered for.
func (e *eval) holdTerminal() {
	reason, message := "", ""
	for _, c := range e.prev.Conditions {
		if c.Type == agentsv1alpha1.ConditionReady {
			reason, message = c.Reason, c.Message
		}
	}
	if reason == "" {
		switch e.prevPhase {
		case agentsv1alpha1.PhaseMerged:
			reason = agentsv1alpha1.ReasonPullRequestMerged
		case agentsv1alpha1.PhaseDone:
			reason = agentsv1alpha1.ReasonSessionDone
		default:
			reason = agentsv1alpha1.ReasonSessionErrored
		}
	}
	e.set(e.prevPhase, reason, message)
}

// runtimePhase decides a running session's phase: waiting for input beats the pull request;
// then the runtime probes (workspace, pod, runner, activity); then the pull request's truth.
func (e *eval) runtimePhase() {
	e.ranRuntime = true
	e.updateGrace()
	a := &e.agent
	prOpen := e.pr.known && e.pr.state == agentsv1alpha1.PullRequestOpen
	expired := func(sig string) bool { return e.signal == sig && e.graceExpired }
	graceMsg := func() string { return e.signalDetail + " (" + e.graceProgress() + ")" }

	switch {
	case expired(signalWorkspace):
		e.set(agentsv1alpha1.PhaseErrored, workspaceReason(e.in.Workspace), "The workspace is unusable: "+graceMsg())
	case expired(signalContainer):
		e.set(agentsv1alpha1.PhaseErrored, containerReason(e.in.Pod.WaitingReason), "The agent container cannot start: "+graceMsg())
	case a.exit != nil && !prOpen && (e.signal != signalPullRequest || e.graceExpired):
		// A pull request the runner reported but the forge does not show is waited for, within the
		// grace; after it, the forge is believed.
		e.exitedNow = true
		if a.exit.clean() {
			e.set(agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonAgentExited, "The agent exited cleanly without opening a pull request")
		} else {
			e.set(agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonAgentExited, "The agent failed ("+a.exit.describe()+") without opening a pull request")
		}
	case a.current && a.state == agentsv1alpha1.ActivityWaitingForInput && (a.podRunning || (e.signal == signalPod && !e.graceExpired)):
		e.set(agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput, questionMessage(e.in.Runner.Question))
	case expired(signalRunner):
		e.set(agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonRunnerSilent, "The agent pod runs but its runner has not reported: "+graceMsg())
	case a.live && e.stuckBySilence(prOpen):
		reason := agentsv1alpha1.ReasonAgentStuck
		if a.state == agentsv1alpha1.ActivityBlocked {
			reason = agentsv1alpha1.ReasonAgentBlocked
		}
		e.set(agentsv1alpha1.PhaseStuck, reason, "No agent activity or pull request change since "+stamp(e.lastProgress())+" (stuckAfter "+e.s.StuckAfter.String()+")")
	case expired(signalPod) && !prOpen:
		// The agent is gone: respawn it. The grace is spent; Spawning explains itself from here
		// on, the same way the next decision will.
		e.podLostNow = e.runPrev != agentsv1alpha1.PhaseSpawning
		e.lostDetail = "The agent is gone, respawning it: " + graceMsg()
		e.grace, e.signal, e.graceExpired = nil, "", false
		e.spawningPhase()
	case e.signal != "" && !e.graceExpired && !prOpen:
		e.set(e.holdPhase(), agentsv1alpha1.ReasonSignalGrace, graceMsg())
	case prOpen:
		e.prPhase()
	case !a.live:
		e.spawningPhase()
	default:
		reason, msg := agentsv1alpha1.ReasonAgentActive, "The agent is working"
		if e.idle() {
			reason, msg = agentsv1alpha1.ReasonAgentIdle, "The agent has been idle since "+stamp(e.agent.lastActivity)
		}
		e.set(agentsv1alpha1.PhaseWorking, reason, msg)
	}
	if a.live && e.phase != agentsv1alpha1.PhaseStuck && e.stillness() < e.s.StuckAfter {
		// Wake up when stillness would make it stuck, if it can.
		idleWithPR := prOpen && (a.state == agentsv1alpha1.ActivityReady || a.state == agentsv1alpha1.ActivityIdle)
		if !idleWithPR {
			e.after(e.lastProgress().Add(e.s.StuckAfter))
		}
	}
}

// holdPhase is the phase kept while a signal is under grace: the previous one when the agent was
// running or starting, Spawning otherwise.
func (e *eval) holdPhase() agentsv1alpha1.SessionPhase {
	switch e.runPrev {
	case agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck:
		return e.runPrev
	}
	return agentsv1alpha1.PhaseSpawning
}

// spawningPhase explains why an agent that never ran (or is being respawned) is not running yet.
func (e *eval) spawningPhase() {
	ws, pod := e.in.Workspace, e.in.Pod
	switch {
	case ws.NotFound:
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorktreeNotFound, "The Worktree named by spec.worktreeRef does not exist")
	case ws.HeldBy != "" && !pod.Exists:
		// Two agents in one checkout would overwrite each other: sessions of a Worktree take
		// turns. Nothing tells this one when the other's pod is gone, so it looks again shortly.
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorktreeInUse,
			"The Worktree is in use by session "+clip.Marked(ws.HeldBy, 253, truncated)+"; this session starts when that one ends or is stopped")
		e.after(e.now.Add(worktreeTurnPoll))
		return
	case pod.Exists && !e.agent.podLost && pod.Unschedulable != "":
		// Before the workspace: a session's own checkout is prepared in this pod, so the pod's
		// placement is what holds the workspace up.
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodUnschedulable, "The agent pod cannot be scheduled: "+clip.Marked(pod.Unschedulable, 500, truncated))
	case pod.Exists && !e.agent.podLost && pod.VolumeHeld != "":
		// Before the workspace too: the checkout is on that volume.
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonVolumeAttachedElsewhere, "The agent pod waits for its volume: "+clip.Marked(pod.VolumeHeld, 700, truncated))
	case ws.Phase != agentsv1alpha1.WorktreeReady:
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorkspacePending, withDetail("Waiting for the workspace", ws.Message))
	case !pod.Exists || e.agent.podLost:
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending, "Waiting for the agent pod to be created")
	case pod.WaitingReason != "":
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending, withDetail("The agent container is waiting: "+pod.WaitingReason, pod.WaitingMessage))
	default:
		e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSpawning, "Waiting for the runner's first report")
	}
	e.spawnDeadline()
}

// spawnDeadline turns a pod that has not started within activity.spawnDeadline of its creation
// into a stalled session, keeping what holds it up in the message; until then the decision is
// due again at the deadline. The pod is left alone: it may still start (a node joins, a
// registry recovers), and the session then goes on.
func (e *eval) spawnDeadline() {
	pod := e.in.Pod
	// Once the runner of this pod has reported, the pod started: the deadline is over.
	if !pod.Exists || e.agent.podLost || pod.Deleting || pod.Created.IsZero() || e.agent.current {
		return
	}
	deadline := pod.Created.Add(e.s.SpawnDeadline)
	if e.now.Before(deadline) {
		e.after(deadline)
		return
	}
	e.set(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSpawnDeadlineExceeded,
		fmt.Sprintf("The agent pod has not started within spawnDeadline %s of its creation: %s", e.s.SpawnDeadline, e.message))
}

// prPhase is the pull request's truth, in the reference orchestrator's precedence.
func (e *eval) prPhase() {
	p := e.pr
	switch {
	case p.checks == agentsv1alpha1.ChecksFailing:
		e.set(agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.ReasonChecksFailed, "Checks failed on "+p.ref()+" at "+short(p.headSHA)+failedNames(p.failed))
	case p.review == agentsv1alpha1.ReviewChangesRequested:
		e.set(agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.ReasonChangesRequested, "A reviewer requested changes on "+p.ref())
	case e.mergeable():
		e.set(agentsv1alpha1.PhaseMergeable, agentsv1alpha1.ReasonMergeable, "Pull request "+p.ref()+" is approved, green and can merge")
	case p.review == agentsv1alpha1.ReviewApproved:
		e.set(agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved, "Pull request "+p.ref()+" is approved; "+e.notMergeableWhy())
	case p.review == agentsv1alpha1.ReviewRequired:
		e.set(agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.ReasonReviewRequired, "Pull request "+p.ref()+" waits for a review")
	case p.draft:
		e.set(agentsv1alpha1.PhasePROpen, agentsv1alpha1.ReasonPullRequestDraft, "Pull request "+p.ref()+" is a draft")
	default:
		e.set(agentsv1alpha1.PhasePROpen, agentsv1alpha1.ReasonPullRequestOpened, "Pull request "+p.ref()+" is open; "+e.notMergeableWhy())
	}
}

// mergeable: approved or no review required, checks green (passing, or no checks at all), no
// conflict, not behind when the base requires it, not a draft.
func (e *eval) mergeable() bool {
	p := e.pr
	if p.state != agentsv1alpha1.PullRequestOpen || p.draft {
		return false
	}
	if p.review != agentsv1alpha1.ReviewApproved && p.review != agentsv1alpha1.ReviewNone && p.review != "" {
		return false
	}
	if p.checks != agentsv1alpha1.ChecksPassing && p.checks != agentsv1alpha1.ChecksNone {
		return false
	}
	switch p.mergeState {
	case agentsv1alpha1.MergeStateClean:
		return true
	}
	// Behind blocks too: the forges report it only when the base must be up to date (GitHub's
	// BEHIND needs "require branches to be up to date"; the Gitea adapter says Behind only under
	// "block on outdated branch").
	return false
}

func (e *eval) notMergeableWhy() string {
	p := e.pr
	switch {
	case p.draft:
		return "it is a draft"
	case p.checks == agentsv1alpha1.ChecksPending:
		return "checks are running"
	case p.mergeState == agentsv1alpha1.MergeStateDirty:
		return "it conflicts with " + orDefault(p.baseBranch, "its base")
	case p.mergeState == agentsv1alpha1.MergeStateBehind:
		return "it is behind " + orDefault(p.baseBranch, "its base") + ", which must be up to date to merge"
	case p.mergeState == agentsv1alpha1.MergeStateBlocked:
		return "branch protection blocks the merge"
	case p.mergeState == agentsv1alpha1.MergeStateUnstable:
		return "a check the base does not require is not green"
	case p.mergeState == agentsv1alpha1.MergeStateUnknown || p.mergeState == "":
		return "the forge has not computed mergeability yet"
	}
	return "it cannot merge yet"
}

// stuckBySilence: an agent in the middle of a turn (Active, Blocked) that has been silent past
// stuckAfter is stuck whatever the pull request says; one that finished its turn (Ready, Idle)
// is only stuck when there is no pull request to wait on.
func (e *eval) stuckBySilence(prOpen bool) bool {
	if e.stillness() < e.s.StuckAfter {
		return false
	}
	switch e.agent.state {
	case agentsv1alpha1.ActivityReady, agentsv1alpha1.ActivityIdle:
		return !prOpen
	}
	return true
}

// lastProgress is the later of the agent's last activity and the last change of its pull
// request on the forge (a push, a check concluding, a review, as prStatus.lastChangeTime
// records): either is progress, so an agent whose pushed fix turns CI green is not stuck for
// having been quiet while the checks ran.
func (e *eval) lastProgress() time.Time {
	t := e.agent.lastActivity
	if e.prStatus != nil && e.prStatus.LastChangeTime != nil && e.prStatus.LastChangeTime.After(t) {
		t = e.prStatus.LastChangeTime.Time
	}
	return t
}

// stamp is a time as status messages say it (RFC 3339, UTC, whole seconds). An idle or stuck session's message names when its
// silence began, not how long it has lasted: a duration would change the message, and so write
// the status, at every reconcile, and a live runner's heartbeat (every 30 s) brings one; at
// thousands of idle sessions that was hundreds of writes a second saying nothing new.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "its start"
	}
	return t.UTC().Format(time.RFC3339)
}

// stillness is how long there has been no progress: what stuckAfter measures.
func (e *eval) stillness() time.Duration { return e.since(e.lastProgress()) }

// silence is how long the agent has said nothing: what idleAfter measures.
func (e *eval) silence() time.Duration { return e.since(e.agent.lastActivity) }

// since is the time from t to now, never negative (a clock ahead of the manager's).
func (e *eval) since(t time.Time) time.Duration { return max(e.now.Sub(t), 0) }

func (e *eval) idle() bool {
	return e.agent.live && e.silence() >= e.s.IdleAfter
}

func questionMessage(q string) string {
	if q == "" {
		return "The agent is waiting for input"
	}
	return "The agent asks: " + clip.Marked(q, 1024, truncated)
}

func withDetail(msg, detail string) string {
	if detail == "" {
		return msg
	}
	return msg + ": " + clip.Marked(detail, 512, truncated)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func failedNames(checks []FailedCheck) string {
	if len(checks) == 0 {
		return ""
	}
	s := ": "
	for i, c := range checks {
		if i == 5 {
			return s + ", …"
		}
		if i > 0 {
			s += ", "
		}
		s += c.Name
	}
	return s
}
