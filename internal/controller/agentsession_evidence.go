package controller

import (
	"errors"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Evidence builders are pure: Kubernetes, runner and forge observations in, lifecycle evidence
// out. They are table-tested without an API server.

// podEvidence describes the agent pod and its agent container.
func podEvidence(pod *corev1.Pod, nodeLost bool, volumeHeld string) lifecycle.PodEvidence {
	if pod == nil {
		return lifecycle.PodEvidence{}
	}
	ev := lifecycle.PodEvidence{
		Exists:   true,
		UID:      string(pod.UID),
		Phase:    lifecycle.PodPhase(pod.Status.Phase),
		Reason:   pod.Status.Reason,
		Deleting: !pod.DeletionTimestamp.IsZero(),
		NodeLost: nodeLost,

		VolumeHeld: volumeHeld,
	}
	if ev.Phase == "" {
		ev.Phase = lifecycle.PodPending
	}
	ev.Created = pod.CreationTimestamp.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			ev.Unschedulable = c.Message
			if ev.Unschedulable == "" {
				ev.Unschedulable = c.Reason
			}
		}
	}
	// A failing init container (the runner sidecar; prepare in pods made before it ran beside the
	// agent) is the agent's failure to start. The runner is a native sidecar: the kubelet
	// restarts it when it ends, and ends it after the agent, so only its waiting (an image it
	// cannot pull, a crash loop) says anything.
	for _, cs := range pod.Status.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			ev.WaitingReason, ev.WaitingMessage = w.Reason, cs.Name+": "+w.Message
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && cs.Name != containerRunner {
			ev.Terminated = &lifecycle.ContainerExit{ExitCode: t.ExitCode, Reason: cs.Name + " " + t.Reason}
		}
	}
	// The checkout step beside the agent's container: the agent is not running until it ended
	// well (the host only waits until then), and its failure is the pod's, whatever the host
	// still does (the runner ends it, but a step killed without a word leaves that to us).
	prepared := !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == containerPrepare })
	var preparedAt time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerPrepare {
			continue
		}
		switch t, w := cs.State.Terminated, cs.State.Waiting; {
		case t != nil && t.ExitCode == 0:
			prepared, preparedAt = true, t.FinishedAt.Time
		case t != nil:
			ev.Terminated = &lifecycle.ContainerExit{ExitCode: t.ExitCode, Reason: cs.Name + " " + t.Reason}
			if ev.Phase == lifecycle.PodRunning || ev.Phase == lifecycle.PodPending {
				ev.Phase = lifecycle.PodFailed
			}
		case w != nil && w.Reason != "" && ev.WaitingReason == "":
			ev.WaitingReason, ev.WaitingMessage = w.Reason, cs.Name+": "+w.Message
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerAgent {
			continue
		}
		ev.Restarts = cs.RestartCount
		switch {
		case cs.State.Running != nil:
			if !prepared {
				break // the host waits for the checkout
			}
			ev.ContainerRunning = true
			ev.Started = cs.State.Running.StartedAt.Time
			if preparedAt.After(ev.Started) {
				ev.Started = preparedAt
			}
		case cs.State.Waiting != nil:
			if ev.WaitingReason != "" {
				// The checkout step or an init container is held up: that is the news.
				break
			}
			ev.WaitingReason, ev.WaitingMessage = cs.State.Waiting.Reason, cs.State.Waiting.Message
		case cs.State.Terminated != nil:
			if ev.Terminated != nil {
				break // the checkout step failed first; the host only followed
			}
			t := cs.State.Terminated
			ev.Terminated = &lifecycle.ContainerExit{ExitCode: t.ExitCode, Reason: t.Reason}
		}
	}
	return ev
}

// runnerEvidence turns the merged runner report into evidence. Reports from another pod than
// the current one still count (the lifecycle compares PodUID).
func runnerEvidence(r SessionReport, ok bool, prices pricing.Table) lifecycle.RunnerEvidence {
	if !ok || (r.Activity == nil && r.Agent == (SessionReport{}).Agent) {
		// Nothing from a runner yet (at most the pull request it asked the manager to open):
		// not a report, or a pod that runs without one would count as reporting.
		ev := lifecycle.RunnerEvidence{}
		if ok && r.PullRequest != nil {
			ev.PullRequestNumber = r.PullRequest.Number
		}
		if ok && r.Ask != nil {
			ev.PullRequestAsk = strconv.FormatUint(r.Ask.Seq, 10)
		}
		return ev
	}
	ev := lifecycle.RunnerEvidence{
		Reported:       true,
		PodUID:         string(r.PodUID),
		ReportTime:     r.Received,
		AgentSessionID: r.Agent.SessionID,
		Summary:        r.Summary,
	}
	if a := r.Activity; a != nil {
		ev.State, ev.LastActivityTime, ev.Question, ev.ExitCode, ev.Message = a.State, a.LastActivityTime, a.Question, a.ExitCode, a.Message
	}
	if r.PullRequest != nil {
		ev.PullRequestNumber = r.PullRequest.Number
	}
	if r.Ask != nil {
		ev.PullRequestAsk = strconv.FormatUint(r.Ask.Seq, 10)
	}
	ev.Usage = usageStatus(r.Usage, prices)
	if l := r.Loop; l != nil {
		ev.Loop = lifecycle.LoopEvidence{RepeatedFailures: l.RepeatedFailures, FailingCall: l.FailingCall, UnchangedTurns: l.UnchangedTurns}
	}
	return ev
}

// forgeErrorReason classifies a forge error for the session's Reconciling condition, as
// forgeError does for the reconcilers (one classification).
func forgeErrorReason(err error) string {
	var stalling *StallingError
	var waiting *WaitingError
	switch e := forgeError(err, "forge"); {
	case errors.As(e, &stalling):
		return stalling.Reason
	case errors.As(e, &waiting):
		return waiting.Reason
	}
	return agentsv1alpha1.ReasonForgeUnavailable
}

// pullRequestEvidence turns the poller's observation into evidence. Observed is false until the
// forge answered, and while it errors: the lifecycle then keeps what it knew.
func pullRequestEvidence(obs scm.Observation, found bool) lifecycle.PullRequestEvidence {
	if !found || obs.CheckedAt.IsZero() && obs.Err == nil && obs.PullRequest == nil {
		// Not answered yet (a pull request the manager itself opened is known before any read).
		return lifecycle.PullRequestEvidence{}
	}
	if obs.Err != nil && !errors.Is(obs.Err, scm.ErrNotFound) {
		return lifecycle.PullRequestEvidence{ForgeError: obs.Err.Error(), ForgeErrorReason: forgeErrorReason(obs.Err)}
	}
	pr := obs.PullRequest
	if pr == nil {
		return lifecycle.PullRequestEvidence{Observed: true}
	}
	ev := lifecycle.PullRequestEvidence{
		Observed:       true,
		Exists:         true,
		Number:         int64(pr.Number),
		URL:            pr.URL,
		Title:          pr.Title,
		State:          agentsv1alpha1.PullRequestState(pr.State),
		Draft:          pr.Draft,
		Additions:      int32(min(max(pr.Additions, 0), 1<<30)),
		Deletions:      int32(min(max(pr.Deletions, 0), 1<<30)),
		HeadSHA:        pr.HeadSHA,
		HeadBranch:     pr.Head.Branch,
		BaseBranch:     pr.BaseRef,
		MergeState:     mergeState(pr),
		ReviewDecision: reviewDecision(pr.ReviewDecision),
		// The reviews were filtered to the Project's trusted authors by the caller.
		ApprovedAtHead: pr.ApprovedAt(pr.HeadSHA),
		MergeCommitSHA: pr.MergeCommitSHA,
		Checks: lifecycle.ChecksEvidence{
			State:   agentsv1alpha1.ChecksState(pr.Checks.State),
			Passed:  int32(pr.Checks.Passed),
			Failed:  int32(pr.Checks.Failed),
			Pending: int32(pr.Checks.Pending),
		},
	}
	if ev.Checks.State == "" {
		ev.Checks.State = agentsv1alpha1.ChecksNone
	}
	for _, c := range pr.Checks.FailedChecks {
		ev.Checks.FailedChecks = append(ev.Checks.FailedChecks, lifecycle.FailedCheck{Name: c.Name, URL: c.URL, LogExcerpt: c.LogExcerpt})
	}
	for _, t := range pr.Threads {
		if t.Outdated {
			continue
		}
		ev.Threads = append(ev.Threads, lifecycle.ReviewThread{ID: t.ID, Author: t.Author, Path: t.Path, Line: t.Line, Body: t.Body, URL: t.URL})
	}
	ev.ChangeRequests = changeRequests(pr.Reviews)
	return ev
}

// changeRequests are the reviews whose author's latest standing review requests changes.
func changeRequests(reviews []scm.Review) []lifecycle.Review {
	latest := map[string]scm.Review{}
	for _, r := range reviews {
		if r.State == scm.ReviewStateCommented || r.State == scm.ReviewStatePending {
			continue // comments don't change a reviewer's standing verdict
		}
		if cur, ok := latest[r.Author]; !ok || !r.SubmittedAt.Before(cur.SubmittedAt) {
			latest[r.Author] = r
		}
	}
	var out []lifecycle.Review
	for _, r := range latest {
		if r.State == scm.ReviewStateChangesRequested && !r.Dismissed {
			out = append(out, lifecycle.Review{ID: r.ID, Author: r.Author, Body: r.Body, URL: r.URL})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func mergeState(pr *scm.PullRequest) agentsv1alpha1.MergeState {
	switch {
	case pr.Draft:
		return agentsv1alpha1.MergeStateDraft
	case pr.Mergeable == scm.MergeableFalse || pr.MergeState == scm.MergeStateDirty:
		return agentsv1alpha1.MergeStateDirty
	}
	if s := agentsv1alpha1.MergeState(pr.MergeState); s != "" {
		return s
	}
	return agentsv1alpha1.MergeStateUnknown
}

func reviewDecision(d scm.ReviewDecision) agentsv1alpha1.ReviewDecision {
	if d == "" {
		return agentsv1alpha1.ReviewNone
	}
	return agentsv1alpha1.ReviewDecision(d)
}

// nodeLost reports whether the pod's node is gone or has not been Ready for longer than grace.
func nodeLost(node *corev1.Node, found bool, now time.Time, grace time.Duration) bool {
	if !found {
		return true
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue && now.Sub(c.LastTransitionTime.Time) > grace {
			return true
		}
	}
	return false
}

// worktreeHolder is the session that keeps me from its shared Worktree (spec.worktreeRef), ""
// when it is my turn. Sessions of one Worktree take turns: one whose agent pod exists holds it;
// past that, a session that already ran (between two pods: a respawn, a restore) comes before
// one that never did, and among those that never ran the oldest comes first. Sessions that ended,
// are stopped or are being deleted hold nothing. others may include me. Pure.
func worktreeHolder(me *agentsv1alpha1.AgentSession, others []agentsv1alpha1.AgentSession, hasPod func(session string) bool) string {
	var waiting []*agentsv1alpha1.AgentSession
	for i := range others {
		o := &others[i]
		if o.Name == me.Name || o.Status.Phase.IsTerminal() || o.Spec.State == agentsv1alpha1.SessionStopped || !o.DeletionTimestamp.IsZero() {
			continue
		}
		if hasPod(o.Name) {
			return o.Name
		}
		waiting = append(waiting, o)
	}
	if me.Status.StartTime != nil {
		return ""
	}
	sort.Slice(waiting, func(i, j int) bool { return before(waiting[i], waiting[j]) })
	for _, o := range waiting {
		if o.Status.StartTime != nil || before(o, me) {
			return o.Name
		}
	}
	return ""
}

// before orders sessions by creation, then name.
func before(a, b *agentsv1alpha1.AgentSession) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
