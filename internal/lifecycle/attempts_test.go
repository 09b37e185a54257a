package lifecycle

import (
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// An attempt an AgentTask did not choose (spec.supersededBy) ends Done/Superseded: its pod goes,
// its open pull request is closed once (on a fresh read) with a comment linking the chosen one,
// and its own Worktree is released once the pod is gone. Its runner's requests are not run.
func TestSupersededAttempt(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseReviewPending)
	in.PullRequest = openPR()
	in.Spec.SupersededBy, in.Spec.SupersededURL = "fix-2", "https://github.com/acme/app/pull/14"
	in.Runner.PullRequestAsk = "7"
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseDone))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSuperseded))
	g.Expect(d.Message).To(ContainSubstring("fix-2"))
	g.Expect(levelActions(d)).To(Equal([]ActionType{ActionClosePullRequest, ActionDeletePod}), "close and stop; the Worktree waits for the pod")
	g.Expect(actionsOf(d, ActionClosePullRequest)[0]).To(And(HaveField("ID", "pr.close.12"), HaveField("PullRequestNumber", int64(12)),
		HaveField("Text", ContainSubstring("https://github.com/acme/app/pull/14"))))
	g.Expect(actionsOf(d, ActionOpenPullRequest)).To(BeEmpty(), "a superseded attempt's pull request requests are not run")

	in.Previous = applied(in.Previous, d)
	in.PullRequest.State = agentsv1alpha1.PullRequestClosed
	in.Pod = PodEvidence{}
	d = Decide(in)
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSuperseded), "its own close does not change why it ended")
	g.Expect(levelActions(d)).To(Equal([]ActionType{ActionReleaseWorktree}), "the pod gone: the Worktree released, nothing closed twice")

	in.Workspace.Absent = true
	g.Expect(levelActions(Decide(in))).To(BeEmpty(), "a fixed point")

	in.PullRequest = PullRequestEvidence{}
	in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
	g.Expect(actionsOf(Decide(in), ActionClosePullRequest)).To(BeEmpty(), "only a fresh read asks for the close (after a restart, the status may be old news)")

	in = from(agentsv1alpha1.PhaseReviewPending)
	in.PullRequest = openPR()
	in.PullRequest.State = agentsv1alpha1.PullRequestMerged
	in.Spec.SupersededBy = "fix-2"
	g.Expect(Decide(in).Phase).To(Equal(agentsv1alpha1.PhaseMerged), "a merge outranks being superseded")
}

// The chosen attempt's draft goes up for review once: spec.pullRequest.draft false while the
// forge shows its pull request an open draft. Unset, a draft is never touched.
func TestChosenAttemptLeavesDraft(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseReviewPending)
	in.PullRequest = openPR()
	in.PullRequest.Draft = true
	in.Spec.Draft = ptr(true)
	g.Expect(actionsOf(Decide(in), ActionMarkReady)).To(BeEmpty(), "still an attempt")

	in.Spec.Draft = nil
	g.Expect(actionsOf(Decide(in), ActionMarkReady)).To(BeEmpty(), "a user's draft is the user's")

	in.Spec.Draft = ptr(false)
	d := Decide(in)
	g.Expect(actionsOf(d, ActionMarkReady)).To(ConsistOf(And(HaveField("ID", "pr.ready.12"), HaveField("PullRequestNumber", int64(12)))))
	g.Expect(d.ObservedGeneration).To(Equal(in.Previous.ObservedGeneration), "not observed until the forge shows it ready")

	in.PullRequest.Draft = false
	g.Expect(actionsOf(Decide(in), ActionMarkReady)).To(BeEmpty(), "ready: nothing more")

	in.PullRequest = PullRequestEvidence{}
	in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, Draft: true}
	g.Expect(actionsOf(Decide(in), ActionMarkReady)).To(BeEmpty(), "only on a fresh read")
}

// applied is prev with d written onto it, as the controller's status write does.
func applied(prev agentsv1alpha1.AgentSessionStatus, d Decision) agentsv1alpha1.AgentSessionStatus {
	st := *prev.DeepCopy()
	Apply(&st, d)
	return st
}
