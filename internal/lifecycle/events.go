package lifecycle

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// EventPriorities maps every event type to its priority (the reference orchestrator's: urgent
// for stuck, needs input, errored and escalations; action for approved, merged and ready to
// merge; warning for CI failures, changes requested and conflicts; info for the rest).
// docs/reactions.md prints the same table; a test keeps them equal.
var EventPriorities = map[agentsv1alpha1.EventType]agentsv1alpha1.Priority{
	agentsv1alpha1.EventSessionQueued:          agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionSpawned:         agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionWorking:         agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionStuck:           agentsv1alpha1.PriorityUrgent,
	agentsv1alpha1.EventSessionNeedsInput:      agentsv1alpha1.PriorityUrgent,
	agentsv1alpha1.EventSessionKilled:          agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionExited:          agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionDone:            agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventSessionErrored:         agentsv1alpha1.PriorityUrgent,
	agentsv1alpha1.EventPRCreated:              agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventPRUpdated:              agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventPRMerged:               agentsv1alpha1.PriorityAction,
	agentsv1alpha1.EventPRClosed:               agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventCIPassing:              agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventCIFailing:              agentsv1alpha1.PriorityWarning,
	agentsv1alpha1.EventCIFixSent:              agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventCIFixFailed:            agentsv1alpha1.PriorityWarning,
	agentsv1alpha1.EventReviewPending:          agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventReviewApproved:         agentsv1alpha1.PriorityAction,
	agentsv1alpha1.EventReviewChangesRequested: agentsv1alpha1.PriorityWarning,
	agentsv1alpha1.EventReviewCommentsSent:     agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventReviewCommented:        agentsv1alpha1.PriorityInfo,
	agentsv1alpha1.EventMergeReady:             agentsv1alpha1.PriorityAction,
	agentsv1alpha1.EventMergeConflicts:         agentsv1alpha1.PriorityWarning,
	agentsv1alpha1.EventMergeCompleted:         agentsv1alpha1.PriorityAction,
	agentsv1alpha1.EventReactionEscalated:      agentsv1alpha1.PriorityUrgent,
	agentsv1alpha1.EventReactionTemplateFailed: agentsv1alpha1.PriorityWarning,
}

// Some events change priority with their cause: an agent lost unexpectedly (session.killed),
// a failed exit (session.exited) or a conflict sent to the agent (merge.conflicts) are stated
// with the priority given where they are emitted.

func (e *eval) event(t agentsv1alpha1.EventType, p agentsv1alpha1.Priority, reason, msg string) {
	e.events = append(e.events, Event{Type: t, Priority: p, Reason: reason, Message: msg})
}

// reactionEvent records an event of a reaction; they follow the fact and phase events.
func (e *eval) reactionEvent(t agentsv1alpha1.EventType, p agentsv1alpha1.Priority, reason string, trig agentsv1alpha1.ReactionTrigger, msg string) {
	e.reactionEvents = append(e.reactionEvents, Event{Type: t, Priority: p, Reason: reason, Message: msg, Trigger: trig})
}

// transitionEvents compares what was decided with the previous status: the agent's exit, the
// pull request's facts, then the phase. Comparing with persisted facts is what makes a
// re-decision with the same evidence silent.
func (e *eval) transitionEvents() {
	if x := e.agent.exit; x != nil && e.ranRuntime && (e.prev.Activity == nil || e.prev.Activity.State != agentsv1alpha1.ActivityExited) {
		p := agentsv1alpha1.PriorityInfo
		if !x.clean() {
			p = agentsv1alpha1.PriorityWarning
		}
		e.event(agentsv1alpha1.EventSessionExited, p, agentsv1alpha1.ReasonAgentExited, "The agent exited ("+x.describe()+")")
	}
	merged := e.pullRequestEvents()
	if e.restored && e.phase != agentsv1alpha1.PhaseQueued {
		e.event(agentsv1alpha1.EventSessionSpawned, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonRestored, "Restoring the agent and resuming its conversation")
	}
	// A restore into Spawning was announced just above.
	if e.phase != e.prevPhase && (!e.restored || e.phase != agentsv1alpha1.PhaseSpawning) {
		e.phaseEvent(merged)
	}
	e.events = mergeEvents(e.events, e.reactionEvents)
}

// mergeEvents appends the reaction events to the fact and phase events so that a decision
// emits each event type at most once: a reaction's event says what Shepherd did about the fact
// (MergeRequested about a pull request turning mergeable, ConflictsSent about a conflict), so it
// takes the place of the fact's event of the same type, keeping the more urgent priority.
func mergeEvents(events, reactions []Event) []Event {
	for _, r := range reactions {
		i := slices.IndexFunc(events, func(ev Event) bool { return ev.Type == r.Type })
		if i < 0 {
			events = append(events, r)
			continue
		}
		if urgency(events[i].Priority) > urgency(r.Priority) {
			r.Priority = events[i].Priority
		}
		events[i] = r
	}
	return events
}

// urgency orders priorities, least urgent first (urgent, action, warning, info, as the
// notification routes rank them).
func urgency(p agentsv1alpha1.Priority) int {
	return slices.Index([]agentsv1alpha1.Priority{agentsv1alpha1.PriorityInfo, agentsv1alpha1.PriorityWarning,
		agentsv1alpha1.PriorityAction, agentsv1alpha1.PriorityUrgent}, p)
}

func (e *eval) phaseEvent(mergedEmitted bool) {
	info, urgent := agentsv1alpha1.PriorityInfo, agentsv1alpha1.PriorityUrgent
	switch e.phase {
	case agentsv1alpha1.PhaseQueued:
		e.event(agentsv1alpha1.EventSessionQueued, info, e.reason, e.message)
	case agentsv1alpha1.PhaseSpawning:
		if e.podLostNow {
			e.event(agentsv1alpha1.EventSessionKilled, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonPodMissing, e.lostDetail)
		} else {
			e.event(agentsv1alpha1.EventSessionSpawned, info, e.reason, e.message)
		}
	case agentsv1alpha1.PhaseWorking:
		e.event(agentsv1alpha1.EventSessionWorking, info, agentsv1alpha1.ReasonAgentActive, e.message)
	case agentsv1alpha1.PhaseNeedsInput:
		e.event(agentsv1alpha1.EventSessionNeedsInput, urgent, e.reason, e.message)
	case agentsv1alpha1.PhaseStuck:
		e.event(agentsv1alpha1.EventSessionStuck, urgent, e.reason, e.message)
	case agentsv1alpha1.PhaseStopped:
		e.event(agentsv1alpha1.EventSessionKilled, info, e.reason, e.message)
	case agentsv1alpha1.PhaseDone:
		p := info
		if limitReason(e.reason) {
			// A limit cut the work short: a human decides what becomes of it (at once, for a
			// runaway agent).
			p = limitPriority(e.reason)
		}
		e.event(agentsv1alpha1.EventSessionDone, p, e.reason, e.message)
	case agentsv1alpha1.PhaseErrored:
		e.event(agentsv1alpha1.EventSessionErrored, urgent, e.reason, e.message)
	case agentsv1alpha1.PhaseMerged:
		if !mergedEmitted {
			e.event(agentsv1alpha1.EventPRMerged, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonPullRequestMerged, e.message)
		}
	case agentsv1alpha1.PhaseMergeable:
		e.event(agentsv1alpha1.EventMergeReady, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonMergeable, e.message)
	}
}

// pullRequestEvents reports what changed on the pull request since the previous status. It
// returns whether pr.merged was emitted.
func (e *eval) pullRequestEvents() bool {
	cur := e.prStatus
	if !e.pr.fresh && !e.ownMerge || cur == nil {
		return false
	}
	prev := e.prev.PullRequest
	ref := e.pr.ref()
	if prev == nil || prev.Number != cur.Number {
		prev = &agentsv1alpha1.PullRequestStatus{}
		if cur.State == agentsv1alpha1.PullRequestOpen {
			e.event(agentsv1alpha1.EventPRCreated, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonPullRequestOpened, "Pull request "+ref+" opened: "+orDefault(cur.URL, ref))
		}
	}
	merged := false
	if prev.State != cur.State {
		switch cur.State {
		case agentsv1alpha1.PullRequestMerged:
			merged = true
			e.event(agentsv1alpha1.EventPRMerged, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonPullRequestMerged, "Pull request "+ref+" was merged")
			if st := e.reactions[agentsv1alpha1.TriggerApprovedAndGreen]; st != nil && st.LastAttemptKey == "head:"+cur.HeadSHA &&
				e.s.reaction(agentsv1alpha1.TriggerApprovedAndGreen).Action == agentsv1alpha1.ReactionMerge {
				e.event(agentsv1alpha1.EventMergeCompleted, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonMergeCompleted, "The merge Shepherd requested of "+ref+" went through")
			}
		case agentsv1alpha1.PullRequestClosed:
			e.event(agentsv1alpha1.EventPRClosed, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonPullRequestClosed, "Pull request "+ref+" was closed without merging")
		case agentsv1alpha1.PullRequestOpen:
			if prev.State != "" {
				e.event(agentsv1alpha1.EventPRUpdated, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonPullRequestUpdated, "Pull request "+ref+" was reopened")
			}
		}
	}
	if cur.State != agentsv1alpha1.PullRequestOpen {
		return merged
	}
	if prev.HeadSHA != "" && prev.HeadSHA != cur.HeadSHA {
		e.event(agentsv1alpha1.EventPRUpdated, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonPullRequestUpdated,
			fmt.Sprintf("Pull request %s has a new head commit %s", ref, short(cur.HeadSHA)))
	}
	switch {
	case cur.Checks == agentsv1alpha1.ChecksFailing && (prev.Checks != agentsv1alpha1.ChecksFailing || prev.HeadSHA != cur.HeadSHA):
		e.event(agentsv1alpha1.EventCIFailing, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonChecksFailed,
			fmt.Sprintf("Checks failed on %s at %s%s", ref, short(cur.HeadSHA), failedNames(e.pr.failed)))
	case cur.Checks == agentsv1alpha1.ChecksPassing && prev.Checks != agentsv1alpha1.ChecksPassing:
		e.event(agentsv1alpha1.EventCIPassing, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonChecksPassed,
			fmt.Sprintf("Checks pass on %s at %s", ref, short(cur.HeadSHA)))
	}
	if cur.ReviewDecision != prev.ReviewDecision {
		switch cur.ReviewDecision {
		case agentsv1alpha1.ReviewApproved:
			e.event(agentsv1alpha1.EventReviewApproved, agentsv1alpha1.PriorityAction, agentsv1alpha1.ReasonApproved, "Pull request "+ref+" was approved")
		case agentsv1alpha1.ReviewChangesRequested:
			e.event(agentsv1alpha1.EventReviewChangesRequested, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonChangesRequested, "A reviewer requested changes on "+ref)
		case agentsv1alpha1.ReviewRequired:
			e.event(agentsv1alpha1.EventReviewPending, agentsv1alpha1.PriorityInfo, agentsv1alpha1.ReasonReviewRequired, "Pull request "+ref+" waits for a review")
		}
	}
	if cur.MergeState == agentsv1alpha1.MergeStateDirty && prev.MergeState != agentsv1alpha1.MergeStateDirty {
		e.event(agentsv1alpha1.EventMergeConflicts, agentsv1alpha1.PriorityWarning, agentsv1alpha1.ReasonMergeConflict,
			"Pull request "+ref+" conflicts with "+orDefault(cur.BaseBranch, "its base"))
	}
	return merged
}

// queueUserMessages queues every spec message not yet delivered or queued, in spec order, while
// the session can still reach an agent. Humans go before reactions.
func (e *eval) queueUserMessages() {
	if e.phase.IsTerminal() {
		// Nobody would read them; they are queued after a restore.
		return
	}
	seen := map[string]bool{}
	for _, id := range e.prev.Messages.Delivered {
		seen[id] = true
	}
	for _, m := range e.prev.Messages.Pending {
		seen[m.ID] = true
	}
	for _, m := range e.in.Spec.Messages {
		if seen[m.ID] || m.ID == "" {
			continue
		}
		if len(e.prev.Messages.Pending)+len(e.outbox) >= maxPending {
			return
		}
		seen[m.ID] = true
		e.outbox = append(e.outbox, agentsv1alpha1.OutboxMessage{ID: m.ID, Source: agentsv1alpha1.MessageFromUser, CreatedTime: ptr(metav1.NewTime(e.now))})
		e.actions = append(e.actions, Action{Type: ActionSendToAgent, ID: m.ID, Source: agentsv1alpha1.MessageFromUser, Text: m.Text})
	}
}

// builtinNotifications notify on outcomes no trigger covers, so that routes hear of them: a
// session that errored (urgent) and a merge (action). An exited reaction that already notified
// of the same exit takes the place of the errored one.
func (e *eval) builtinNotifications() {
	if e.phase == e.prevPhase {
		return
	}
	id := func(kind string) string { return kind + "." + e.now.UTC().Format("20060102T150405Z") }
	switch e.phase {
	case agentsv1alpha1.PhaseErrored:
		for _, a := range e.actions {
			if a.Type == ActionNotify && a.Trigger == agentsv1alpha1.TriggerExited {
				return
			}
		}
		e.actions = append(e.actions, Action{Type: ActionNotify, ID: id("errored"), Event: agentsv1alpha1.EventSessionErrored, Reason: e.reason,
			Priority: agentsv1alpha1.PriorityUrgent, Text: "The session errored: " + e.message + "."})
	case agentsv1alpha1.PhaseDone:
		if limitReason(e.reason) {
			e.actions = append(e.actions, Action{Type: ActionNotify, ID: id("limit"), Event: agentsv1alpha1.EventSessionDone, Reason: e.reason,
				Priority: limitPriority(e.reason), Text: e.message + "; the pull request, if any, stays open for you."})
		}
	case agentsv1alpha1.PhaseMerged:
		e.actions = append(e.actions, Action{Type: ActionNotify, ID: id("merged"), Event: agentsv1alpha1.EventPRMerged, Reason: agentsv1alpha1.ReasonPullRequestMerged,
			Priority: agentsv1alpha1.PriorityAction, Text: e.message + "."})
	}
}

// limitReason reports whether a session ended at one of its limits (maxDuration, maxTurns):
// work cut short, which a human decides about.
func limitReason(reason string) bool {
	return reason == agentsv1alpha1.ReasonMaxDurationReached || reason == agentsv1alpha1.ReasonMaxTurnsReached ||
		reason == agentsv1alpha1.ReasonMaxCostReached || reason == agentsv1alpha1.ReasonLoopDetected
}

// limitPriority is the priority of a limit's notification: a runaway agent is escalated
// (urgent); the other limits ask a human to decide (action).
func limitPriority(reason string) agentsv1alpha1.Priority {
	if reason == agentsv1alpha1.ReasonLoopDetected {
		return agentsv1alpha1.PriorityUrgent
	}
	return agentsv1alpha1.PriorityAction
}
