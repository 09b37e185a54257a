package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// maxDuration ends a session at its deadline, counted from the agent's first start; maxTurns
// once that many turns are finished and no other is under way. Either ends it in Done with an
// action-priority notification, deletes the pod, and leaves the pull request alone.
func TestSessionLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(in *Input)
		phase   agentsv1alpha1.SessionPhase
		reason  string
		message string
		requeue time.Duration // the decision is due again within this; 0: not asserted
	}{
		{name: "before maxDuration the session works and is due again at the deadline",
			setup: func(in *Input) { in.Spec.MaxDuration = 2*time.Hour + 90*time.Second },
			phase: agentsv1alpha1.PhaseWorking, reason: agentsv1alpha1.ReasonAgentActive, requeue: 90 * time.Second},
		{name: "at maxDuration exactly the session is Done, mid-turn",
			setup: func(in *Input) { in.Spec.MaxDuration = 2 * time.Hour },
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonMaxDurationReached,
			message: "reached its maxDuration of 2h0m0s: its agent started at 2025-06-01T10:00:00Z"},
		{name: "maxDuration ends a session whose pull request is open, and keeps the pull request",
			setup: func(in *Input) {
				in.Spec.MaxDuration = time.Hour
				in.PullRequest = openPR()
				in.Previous.Phase = agentsv1alpha1.PhaseReviewPending
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonMaxDurationReached},
		{name: "maxDuration does not count before the agent first started (the queue, spawning)",
			setup: func(in *Input) {
				in.Spec.MaxDuration = time.Minute
				in.Previous.StartTime = nil
				in.Previous.Phase = agentsv1alpha1.PhaseSpawning
				in.Runner = RunnerEvidence{}
				in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodPending, Created: in.Now.Add(-time.Minute)}
			},
			phase: agentsv1alpha1.PhaseSpawning, reason: agentsv1alpha1.ReasonSpawning},
		{name: "maxTurns reached while the agent is mid-turn: the turn is not cut",
			setup: func(in *Input) {
				in.Spec.MaxTurns = 3
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Turns: 3}
			},
			phase: agentsv1alpha1.PhaseWorking, reason: agentsv1alpha1.ReasonAgentActive},
		{name: "maxTurns reached and the turn finished: Done",
			setup: func(in *Input) {
				in.Spec.MaxTurns = 3
				in.Runner.State = agentsv1alpha1.ActivityReady
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Turns: 3}
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonMaxTurnsReached, message: "finished 3 turns, its maxTurns of 3"},
		{name: "the same tool call failing maxRepeatedFailures times ends the session mid-turn",
			setup: func(in *Input) {
				in.Spec.MaxRepeatedFailures = 5
				in.Runner.Loop = LoopEvidence{RepeatedFailures: 5, FailingCall: "Bash: go test ./..."}
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonLoopDetected, message: "failed 5 times in a row (maxRepeatedFailures 5): Bash: go test ./..."},
		{name: "fewer failures than the limit: the session goes on",
			setup: func(in *Input) {
				in.Spec.MaxRepeatedFailures = 5
				in.Runner.Loop = LoopEvidence{RepeatedFailures: 4}
			},
			phase: agentsv1alpha1.PhaseWorking, reason: agentsv1alpha1.ReasonAgentActive},
		{name: "maxUnchangedTurns is judged between turns",
			setup: func(in *Input) {
				in.Spec.MaxUnchangedTurns = 3
				in.Runner.State = agentsv1alpha1.ActivityReady
				in.Runner.Loop = LoopEvidence{UnchangedTurns: 3}
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonLoopDetected, message: "3 turns in a row left the checkout unchanged"},
		{name: "maxCostUSD reached mid-turn: the turn is not cut",
			setup: func(in *Input) {
				in.Spec.MaxCostUSD = 2
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, CostUSD: "2.5"}
			},
			phase: agentsv1alpha1.PhaseWorking, reason: agentsv1alpha1.ReasonAgentActive},
		{name: "maxCostUSD reached and the turn finished: Done",
			setup: func(in *Input) {
				in.Spec.MaxCostUSD = 2
				in.Runner.State = agentsv1alpha1.ActivityReady
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, CostUSD: "2.5"}
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonMaxCostReached, message: "spent $2.5, its maxCostUSD of $2"},
		{name: "maxCostUSD does not count an agent's own report",
			setup: func(in *Input) {
				in.Spec.MaxCostUSD = 2
				in.Runner.State = agentsv1alpha1.ActivityReady
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromAgent, CostUSD: "9"}
			},
			phase: agentsv1alpha1.PhaseWorking, reason: agentsv1alpha1.ReasonAgentActive},
		{name: "fewer turns than maxTurns: the session goes on",
			setup: func(in *Input) {
				in.Spec.MaxTurns = 3
				in.Runner.State = agentsv1alpha1.ActivityReady
				in.Runner.Usage = &agentsv1alpha1.UsageStatus{Turns: 2}
			},
			phase: agentsv1alpha1.PhaseWorking},
		{name: "the turns last recorded count when the runner's report is an older pod's",
			setup: func(in *Input) {
				in.Spec.MaxTurns = 2
				in.Previous.Usage = &agentsv1alpha1.UsageStatus{Turns: 2}
				in.Runner = RunnerEvidence{}
				in.Pod = PodEvidence{Exists: true, UID: "pod-2", Phase: PodPending, Created: in.Now}
			},
			phase: agentsv1alpha1.PhaseDone, reason: agentsv1alpha1.ReasonMaxTurnsReached},
		{name: "a merged pull request beats a limit",
			setup: func(in *Input) {
				in.Spec.MaxDuration = time.Minute
				in.PullRequest = openPR()
				in.PullRequest.State = agentsv1alpha1.PullRequestMerged
			},
			phase: agentsv1alpha1.PhaseMerged},
		{name: "spec.state Stopped beats a limit",
			setup: func(in *Input) {
				in.Spec.MaxDuration = time.Minute
				in.Spec.State = agentsv1alpha1.SessionStopped
			},
			phase: agentsv1alpha1.PhaseStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(agentsv1alpha1.PhaseWorking)
			tc.setup(&in)
			d := Decide(in)
			g.Expect(d.Phase).To(Equal(tc.phase), "%s: %s", d.Reason, d.Message)
			if tc.reason != "" {
				g.Expect(d.Reason).To(Equal(tc.reason), d.Message)
			}
			if tc.message != "" {
				g.Expect(d.Message).To(ContainSubstring(tc.message))
			}
			if tc.requeue > 0 {
				g.Expect(d.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", tc.requeue)))
			}
			if !limitReason(tc.reason) {
				g.Expect(d.Actions).NotTo(ContainElement(HaveField("Event", agentsv1alpha1.EventSessionDone)), "no limit, no session.done")
				return
			}
			g.Expect(d.Actions).To(ContainElement(And(
				HaveField("Type", ActionDeletePod), HaveField("PodUID", in.Pod.UID))), "the agent pod goes")
			g.Expect(d.Actions).To(ContainElement(And(
				HaveField("Type", ActionNotify), HaveField("Event", agentsv1alpha1.EventSessionDone),
				HaveField("Priority", limitPriority(tc.reason)), HaveField("Reason", tc.reason))), "a human is told")
			g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventSessionDone))
			for _, ev := range d.Events {
				if ev.Type == agentsv1alpha1.EventSessionDone {
					g.Expect(ev.Priority).To(Equal(limitPriority(tc.reason)), "urgent for a runaway agent, action for the other limits")
				}
			}
			if in.PullRequest.Exists {
				g.Expect(d.PullRequest).NotTo(BeNil())
				g.Expect(d.PullRequest.State).To(Equal(agentsv1alpha1.PullRequestOpen), "the pull request stays for a human")
			}

			// Deciding again on the ended session changes nothing and tells nobody again.
			next := in
			next.Previous = *in.Previous.DeepCopy()
			Apply(&next.Previous, d)
			again := Decide(next)
			g.Expect(again.Phase).To(Equal(tc.phase))
			g.Expect(again.Reason).To(Equal(tc.reason))
			g.Expect(again.Events).To(BeEmpty())
			for _, a := range again.Actions {
				g.Expect(a.Type).NotTo(Equal(ActionNotify))
			}
		})
	}
}

// A closed tracker issue ends the session in Done (IssueClosed) from any live phase, its pod
// deleted and its pull request left alone; a merged pull request still wins.
func TestIssueClosedEndsTheSession(t *testing.T) {
	closed := IssueEvidence{ID: "42", Closed: true, State: "closed"}
	for _, tc := range []struct {
		name  string
		setup func(in *Input)
		phase agentsv1alpha1.SessionPhase
	}{
		{"working", func(in *Input) {}, agentsv1alpha1.PhaseDone},
		{"queued", func(in *Input) {
			in.Previous.Phase, in.Spec.Admitted, in.Previous.StartTime = agentsv1alpha1.PhaseQueued, false, nil
			in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{}
		}, agentsv1alpha1.PhaseDone},
		{"with its pull request open", func(in *Input) {
			in.PullRequest = openPR()
			in.Previous.Phase = agentsv1alpha1.PhaseReviewPending
		}, agentsv1alpha1.PhaseDone},
		{"the pull request merged (the merge closed the issue)", func(in *Input) {
			in.PullRequest = openPR()
			in.PullRequest.State = agentsv1alpha1.PullRequestMerged
		}, agentsv1alpha1.PhaseMerged},
		{"stopped by its user", func(in *Input) { in.Spec.State = agentsv1alpha1.SessionStopped }, agentsv1alpha1.PhaseStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(agentsv1alpha1.PhaseWorking)
			in.Issue = closed
			tc.setup(&in)
			d := Decide(in)
			g.Expect(d.Phase).To(Equal(tc.phase), "%s: %s", d.Reason, d.Message)
			if tc.phase != agentsv1alpha1.PhaseDone {
				return
			}
			g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonIssueClosed))
			g.Expect(d.Message).To(Equal("Issue 42 was closed in the tracker (closed)"))
			ready, _ := cond(d, agentsv1alpha1.ConditionReady)
			g.Expect(ready.Reason).To(Equal(agentsv1alpha1.ReasonIssueClosed))
			if in.Pod.Exists {
				g.Expect(actionsOf(d, ActionDeletePod)).To(HaveLen(1), "the agent pod goes")
			}
			g.Expect(actionsOf(d, ActionNotify)).To(BeEmpty(), "someone closed it on purpose: nobody is paged")
			g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventSessionDone))
		})
	}
	// Without the evidence (an open issue, or a Project that ignores closed issues) the session
	// goes on.
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseWorking)
	in.Issue = IssueEvidence{ID: "42", State: "open"}
	g.Expect(Decide(in).Phase).To(Equal(agentsv1alpha1.PhaseWorking))
}

// A session being deleted with onDelete ClosePullRequest asks for the close of its open pull
// request and nothing else; once the pull request reads closed, nothing.
func TestClosePullRequestOnDelete(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseReviewPending)
	in.PullRequest = openPR()
	in.Spec.Deleting, in.Spec.ClosePullRequestOnDelete = true, true
	in.Spec.Messages = []agentsv1alpha1.Message{{ID: "late", Text: "one more thing"}}
	d := Decide(in)
	g.Expect(d.Actions).To(ConsistOf(And(HaveField("Type", ActionClosePullRequest), HaveField("ID", "pr.close.12"),
		HaveField("PullRequestNumber", int64(12)), HaveField("Text", ContainSubstring("was deleted")))), "only the close: no pod, message or notification for a session on its way out")

	in.PullRequest.State = agentsv1alpha1.PullRequestClosed
	g.Expect(Decide(in).Actions).To(BeEmpty(), "closed: nothing left to do")

	in.PullRequest = PullRequestEvidence{} // not read for this decision: the status's open is old news
	in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
	g.Expect(Decide(in).Actions).To(BeEmpty(), "only a fresh read asks for the close")

	in.PullRequest = openPR()
	in.Spec.ClosePullRequestOnDelete = false
	g.Expect(Decide(in).Actions).To(BeEmpty(), "onDelete Keep")

	in.Spec.ClosePullRequestOnDelete, in.Spec.Deleting = true, false
	g.Expect(actionsOf(Decide(in), ActionClosePullRequest)).To(BeEmpty(), "only on deletion")
}

// A session whose shared Worktree another session holds waits in Spawning, without a pod, and
// looks again shortly; its own pod, once it has one, is never taken away.
func TestWorktreeInUse(t *testing.T) {
	g := NewWithT(t)
	in := from("")
	in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{}
	in.Workspace.Own, in.Workspace.HeldBy = false, "first"
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonWorktreeInUse))
	g.Expect(d.Message).To(ContainSubstring("in use by session first"))
	g.Expect(actionsOf(d, ActionCreatePod)).To(BeEmpty())
	g.Expect(d.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", 5*time.Second)))

	in.Workspace.HeldBy = ""
	g.Expect(actionsOf(Decide(in), ActionCreatePod)).To(HaveLen(1), "its turn: the pod")
}
