package lifecycle

import (
	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/clip"
)

// Apply writes a decision onto a status: everything the engine owns (phase, conditions,
// reactions, grace, pull request, activity, queued messages, times) and the runner's
// pass-through fields. It leaves alone what other parts of the controller own (agent type and
// image, branch, worktree and pod names, delivered messages). Call it once per decision; the
// controller then patches the status and only after that records events and runs actions.
func Apply(status *agentsv1alpha1.AgentSessionStatus, d Decision) {
	status.ObservedGeneration = d.ObservedGeneration
	status.Phase = d.Phase
	status.PhaseTransitionTime = d.PhaseTransitionTime.DeepCopy()
	status.Conditions = nil
	for _, c := range d.Conditions {
		status.Conditions = append(status.Conditions, *c.DeepCopy())
	}
	status.Reactions = nil
	for _, r := range d.Reactions {
		status.Reactions = append(status.Reactions, *r.DeepCopy())
	}
	status.Grace = d.Grace.DeepCopy()
	status.PullRequest = d.PullRequest.DeepCopy()
	status.Activity = d.Activity.DeepCopy()

	queued := map[string]bool{}
	for _, m := range status.Messages.Pending {
		queued[m.ID] = true
	}
	for _, m := range d.Outbox {
		if !queued[m.ID] {
			queued[m.ID] = true
			status.Messages.Pending = append(status.Messages.Pending, *m.DeepCopy())
		}
	}

	if d.AgentSessionID != "" {
		status.Agent.SessionID = clip.Marked(d.AgentSessionID, 256, truncated)
	}
	if d.Summary != "" {
		status.Summary = clip.Marked(d.Summary, 4096, truncated)
	}
	if d.Usage != nil {
		status.Usage = d.Usage.DeepCopy()
	}
	status.AdmittedTime = d.AdmittedTime.DeepCopy()
	status.StartTime = d.StartTime.DeepCopy()
	status.CompletionTime = d.CompletionTime.DeepCopy()
	if d.Restored {
		status.Restores++
	}
}
