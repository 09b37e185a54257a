package lifecycle

import (
	"slices"
	"strconv"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// The effects on Kubernetes objects the session owns: its agent pod and its Worktree. They are
// level actions (ActionType.Level): asked for while the evidence calls for them.

// podActions creates the agent pod when the session spawns its agent (a new session, a restore,
// an agent whose pod was declared lost after the grace), or when messages wait for an agent
// that is gone (an agent that exited while its pull request is open is restored by the next
// message for it); it deletes the pod the session no longer needs. A pod that vanished is not
// replaced before the grace has run out: until then the phase holds. An Errored session keeps
// its finished pod, so that `kubectl logs` shows why; it holds no resources, and goes with the
// session or when the session runs again.
//
// The deletion is an action like the others, so it runs only after the decision that calls for
// it was written: removing a pod destroys evidence (the runner's exit report is believed only
// for the current pod, the container's state goes with it).
func (e *eval) podActions() {
	p := e.in.Pod
	// A session's own Worktree and its pod are asked for in one decision: the pod prepares the
	// checkout itself (its prepare step), so it needs the Worktree object, not its status, and
	// one status write then covers both creations (issue 23: writes per session). A pod whose
	// Worktree went away is not live: it is deleted, and made again with the Worktree.
	live := e.in.Spec.Admitted && e.desired() != agentsv1alpha1.SessionStopped && !e.phase.IsTerminal() &&
		e.phase != agentsv1alpha1.PhaseQueued && (e.in.Workspace.Exists || !p.Exists && e.createsWorktree())
	// An agent that never ran is needed whatever the phase: a session whose branch already has a
	// pull request (found before its agent started) still runs its task.
	neverRan := e.prev.StartTime == nil && !e.agent.live
	needAgent := e.phase == agentsv1alpha1.PhaseSpawning || e.messagesWaiting() || neverRan
	if p.Exists {
		if p.Deleting && p.NodeLost {
			// Terminating on a node that has been NotReady (or gone) past the grace: its kubelet
			// will never confirm the deletion, and the pod's fixed name blocks its replacement.
			// Force it; the node's lost state already bounds the wait.
			e.actions = append(e.actions, Action{Type: ActionDeletePod, ID: "pod.forcedelete." + p.UID, PodUID: p.UID, Force: true})
			return
		}
		finished := p.Phase == PodSucceeded || p.Phase == PodFailed
		keepForDiagnosis := finished && e.phase == agentsv1alpha1.PhaseErrored && e.desired() != agentsv1alpha1.SessionStopped
		if !p.Deleting && ((!live && !keepForDiagnosis) || (finished && needAgent)) {
			e.actions = append(e.actions, Action{Type: ActionDeletePod, ID: "pod.delete." + p.UID, PodUID: p.UID})
		}
		return
	}
	if !live || !needAgent || e.in.Workspace.HeldBy != "" {
		return
	}
	switch e.in.Workspace.Phase {
	case agentsv1alpha1.WorktreeFailed, agentsv1alpha1.WorktreeRemoving, agentsv1alpha1.WorktreeRemoved:
		return // the workspace condition says what is wrong
	}
	e.actions = append(e.actions, Action{Type: ActionCreatePod, ID: "pod.create." + strconv.Itoa(int(e.prev.Restores))})
}

// pullRequestActions runs the runner's request to open or update the pull request while the
// session may still change it: not once it ended (a merged or failed session's branch is done)
// nor while it is stopped. A request that is not run is answered by the manager's wait running
// out, and the runner reports the failure.
func (e *eval) pullRequestActions() {
	if e.in.Spec.Deleting {
		// Only on a fresh read: after a restart the status may still say open of a pull request
		// the previous manager closed, and a second close would comment twice.
		if e.in.Spec.ClosePullRequestOnDelete && e.pr.fresh && e.pr.state == agentsv1alpha1.PullRequestOpen {
			e.actions = append(e.actions, Action{Type: ActionClosePullRequest, ID: "pr.close." + strconv.FormatInt(e.pr.number, 10),
				PullRequestNumber: e.pr.number, Text: "Closed by Shepherd: the AgentSession that opened this pull request was deleted (spec.onDelete: ClosePullRequest)."})
		}
		return
	}
	if by := e.in.Spec.SupersededBy; by != "" {
		// Once, on a fresh read (as for a deletion above); the agent's own request is not run.
		if e.pr.fresh && e.pr.state == agentsv1alpha1.PullRequestOpen {
			text := "Closed by Shepherd: the AgentTask chose another attempt, " + by
			if u := e.in.Spec.SupersededURL; u != "" {
				text += " (" + u + ")"
			}
			e.actions = append(e.actions, Action{Type: ActionClosePullRequest, ID: "pr.close." + strconv.FormatInt(e.pr.number, 10),
				PullRequestNumber: e.pr.number, Text: text + ". This attempt's branch is kept."})
		}
		return
	}
	if d := e.in.Spec.Draft; d != nil && !*d && e.pr.fresh && e.pr.state == agentsv1alpha1.PullRequestOpen && e.pr.draft && !e.phase.IsTerminal() {
		// Chosen: the draft this session opened goes up for review (and on to merge).
		e.actions = append(e.actions, Action{Type: ActionMarkReady, ID: "pr.ready." + strconv.FormatInt(e.pr.number, 10), PullRequestNumber: e.pr.number})
	}
	ask := e.in.Runner.PullRequestAsk
	if ask == "" || e.phase.IsTerminal() || e.desired() == agentsv1alpha1.SessionStopped {
		return
	}
	e.actions = append(e.actions, Action{Type: ActionOpenPullRequest, ID: "pr.open." + ask})
}

// createsWorktree: the session's own Worktree is missing and the session is to run.
func (e *eval) createsWorktree() bool {
	ws := e.in.Workspace
	return ws.Own && !ws.Exists && e.in.Spec.Admitted && e.desired() != agentsv1alpha1.SessionStopped &&
		!e.phase.IsTerminal() && e.phase != agentsv1alpha1.PhaseQueued
}

// messagesWaiting reports whether messages wait for the agent once the decision is applied.
func (e *eval) messagesWaiting() bool {
	if len(e.outbox) > 0 {
		return true
	}
	delivered := map[string]bool{}
	for _, id := range e.prev.Messages.Delivered {
		delivered[id] = true
	}
	for _, m := range e.prev.Messages.Pending {
		if !delivered[m.ID] {
			return true
		}
	}
	return false
}

// worktreeActions creates the session's own Worktree once the session is admitted to run, and
// releases it when an AgentTask superseded the session, or by the Project's cleanup policy once
// the pull request merged: the session's own Worktree
// is set Absent (its checkout goes, the record and branch stay), after the agent pod is gone. A
// Worktree named by spec.worktreeRef is the user's: never created nor released.
func (e *eval) worktreeActions() {
	ws := e.in.Workspace
	if e.createsWorktree() {
		// Before the pod's creation in the same decision: the pod names the Worktree.
		at := slices.IndexFunc(e.actions, func(a Action) bool { return a.Type == ActionCreatePod })
		if at < 0 {
			at = len(e.actions)
		}
		e.actions = slices.Insert(e.actions, at, Action{Type: ActionCreateWorktree, ID: "worktree.create"})
		return
	}
	superseded := e.in.Spec.SupersededBy != "" && e.phase == agentsv1alpha1.PhaseDone
	if !superseded && (e.phase != agentsv1alpha1.PhaseMerged || !ws.RemoveAfterMerge) || !ws.Own || !ws.Exists || ws.Absent ||
		e.in.Pod.Exists && !e.in.Pod.Deleting {
		return
	}
	e.actions = append(e.actions, Action{Type: ActionReleaseWorktree, ID: "worktree.release"})
}
