package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

var ownedConditions = []string{
	agentsv1alpha1.ConditionReady, agentsv1alpha1.ConditionWorkspaceReady, agentsv1alpha1.ConditionAgentRunning,
	agentsv1alpha1.ConditionPullRequestOpen, agentsv1alpha1.ConditionChecksPassing, agentsv1alpha1.ConditionReviewApproved,
	agentsv1alpha1.ConditionMergeable, agentsv1alpha1.ConditionNeedsAttention,
}

func TestKstatusConditions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          func() Input
		ready       metav1.ConditionStatus
		reconciling bool
		stalled     bool
		attention   metav1.ConditionStatus
	}{
		{"queued", func() Input { in := from(Start); in.Spec.Admitted = false; return in }, "False", true, false, "False"},
		{"spawning", func() Input { in := from(agentsv1alpha1.PhaseSpawning); noPod(&in); return in }, "False", true, false, "False"},
		{"working", running, "False", true, false, "False"},
		{"within a grace", func() Input { return podGone(t0) }, "False", true, false, "False"},
		{"review pending", func() Input { return withPR(t0, openPR()) }, "False", true, false, "False"},
		{"CI failed, the agent is fixing it", func() Input { return withPR(t0, failing(openPR(), shaA)) }, "False", true, false, "False"},
		{"CI failed, a human must act", func() Input {
			in := withPR(t0, failing(openPR(), shaA))
			in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionNotify}}
			return in
		}, "False", false, true, "True"},
		{"mergeable, a human merges", func() Input { return withPR(t0, approvedGreen(shaA)) }, "False", true, false, "True"},
		{"mergeable, Shepherd merges", func() Input { in := withPR(t0, approvedGreen(shaA)); in.Settings = mergeSettings(); return in }, "False", true, false, "False"},
		{"needs input", func() Input { in := running(); toNeedsInput(&in); return in }, "False", false, true, "True"},
		{"stuck", func() Input { in := running(); toStuck(&in); return in }, "False", false, true, "True"},
		{"worktree not found", func() Input {
			in := from(agentsv1alpha1.PhaseSpawning)
			noPod(&in)
			in.Workspace = WorkspaceEvidence{NotFound: true}
			return in
		}, "False", false, true, "True"},
		{"errored", func() Input { in := running(); exitWith(1)(&in); return in }, "False", false, true, "True"},
		{"done", func() Input { in := running(); exitWith(0)(&in); return in }, "True", false, false, "False"},
		{"merged", func() Input { in := running(); toMerged(&in); return in }, "True", false, false, "False"},
		{"stopped", func() Input { in := running(); toStopped(&in); return in }, "True", false, false, "False"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := tc.in()
			d := Decide(in)
			for _, c := range d.Conditions {
				g.Expect(c.ObservedGeneration).To(Equal(in.Generation), c.Type)
				g.Expect(c.Reason).NotTo(BeEmpty(), c.Type)
				g.Expect(c.LastTransitionTime.Time).To(BeTemporally("==", t0), c.Type)
			}
			for _, typ := range ownedConditions {
				_, ok := cond(d, typ)
				g.Expect(ok).To(BeTrue(), "%s is always present", typ)
			}
			ready, _ := cond(d, agentsv1alpha1.ConditionReady)
			g.Expect(ready.Status).To(Equal(tc.ready))
			g.Expect(ready.Reason).To(Equal(d.Reason))
			rec, hasRec := cond(d, agentsv1alpha1.ConditionReconciling)
			g.Expect(hasRec).To(Equal(tc.reconciling), "Reconciling present: %+v", rec)
			if hasRec {
				g.Expect(rec.Status).To(Equal(metav1.ConditionTrue))
			}
			st, hasStalled := cond(d, agentsv1alpha1.ConditionStalled)
			g.Expect(hasStalled).To(Equal(tc.stalled), "Stalled present: %+v", st)
			if hasStalled {
				g.Expect(st.Status).To(Equal(metav1.ConditionTrue))
			}
			attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
			g.Expect(attention.Status).To(Equal(tc.attention))
		})
	}
}

func TestConditionsFollowTheEvidence(t *testing.T) {
	g := NewWithT(t)
	pr := approvedGreen(shaA)
	pr.MergeState = agentsv1alpha1.MergeStateDirty
	d := Decide(withPR(t0, pr))
	want := map[string][2]string{
		agentsv1alpha1.ConditionWorkspaceReady:  {"True", agentsv1alpha1.ReasonSucceeded},
		agentsv1alpha1.ConditionAgentRunning:    {"True", agentsv1alpha1.ReasonAgentActive},
		agentsv1alpha1.ConditionPullRequestOpen: {"True", agentsv1alpha1.ReasonPullRequestOpened},
		agentsv1alpha1.ConditionChecksPassing:   {"True", agentsv1alpha1.ReasonChecksPassed},
		agentsv1alpha1.ConditionReviewApproved:  {"True", agentsv1alpha1.ReasonApproved},
		agentsv1alpha1.ConditionMergeable:       {"False", agentsv1alpha1.ReasonMergeConflict},
	}
	for typ, w := range want {
		c, _ := cond(d, typ)
		g.Expect(string(c.Status)).To(Equal(w[0]), typ)
		g.Expect(c.Reason).To(Equal(w[1]), typ)
	}

	d = Decide(running())
	for typ, w := range map[string][2]string{
		agentsv1alpha1.ConditionPullRequestOpen: {"False", agentsv1alpha1.ReasonNoPullRequest},
		agentsv1alpha1.ConditionChecksPassing:   {"Unknown", agentsv1alpha1.ReasonNoPullRequest},
		agentsv1alpha1.ConditionMergeable:       {"Unknown", agentsv1alpha1.ReasonNoPullRequest},
	} {
		c, _ := cond(d, typ)
		g.Expect(string(c.Status)).To(Equal(w[0]), typ)
		g.Expect(c.Reason).To(Equal(w[1]), typ)
	}
}

func TestConditionTransitionTimesMoveOnlyOnChange(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.status.Conditions = []metav1.Condition{{Type: "ExternalThing", Status: "True", Reason: "Other", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	s.step(running())

	later := running()
	later.Now = t0.Add(time.Minute)
	later.Runner.LastActivityTime = later.Now
	later.PullRequest = openPR()
	d := s.step(later)
	ready, _ := cond(d, agentsv1alpha1.ConditionReady)
	g.Expect(ready.LastTransitionTime.Time).To(BeTemporally("==", t0), "Ready stayed False")
	g.Expect(ready.Reason).To(Equal(agentsv1alpha1.ReasonReviewRequired))
	pr, _ := cond(d, agentsv1alpha1.ConditionPullRequestOpen)
	g.Expect(pr.LastTransitionTime.Time).To(BeTemporally("==", later.Now), "PullRequestOpen became True")
	ext, ok := cond(d, "ExternalThing")
	g.Expect(ok).To(BeTrue(), "conditions owned by others are kept")
	g.Expect(ext.LastTransitionTime.Time).To(BeTemporally("==", t0.Add(-time.Hour)))
}

func TestConditionsNameTheCause(t *testing.T) {
	t.Run("an unstable pull request is not mergeable, and says why", func(t *testing.T) {
		g := NewWithT(t)
		pr := approvedGreen(shaA)
		pr.MergeState = agentsv1alpha1.MergeStateUnstable
		d := Decide(withPR(t0, pr))
		c, _ := cond(d, agentsv1alpha1.ConditionMergeable)
		g.Expect(string(c.Status)).To(Equal("False"))
		g.Expect(c.Reason).To(Equal(agentsv1alpha1.ReasonMergeUnstable))
		g.Expect(c.Message).To(ContainSubstring("does not require is not green on #12"))
		g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseApproved))
	})
	t.Run("a forge that cannot be read is said on Reconciling until it answers", func(t *testing.T) {
		g := NewWithT(t)
		s := newSim(running().Previous)
		s.step(withPR(t0, failing(openPR(), shaA)))
		down := withPR(t0.Add(time.Minute), PullRequestEvidence{ForgeError: "GET /graphql: 500 Internal Server Error", ForgeErrorReason: agentsv1alpha1.ReasonForgeUnavailable})
		d := s.step(down)
		g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed), "the pull request it knew is kept")
		g.Expect(edge(d)).To(BeEmpty())
		rec, ok := cond(d, agentsv1alpha1.ConditionReconciling)
		g.Expect(ok).To(BeTrue())
		g.Expect(rec.Reason).To(Equal(agentsv1alpha1.ReasonForgeUnavailable))
		g.Expect(rec.Message).To(HavePrefix("The forge cannot be read (GET /graphql: 500 Internal Server Error)"))
		checkIdempotent(t, func() Input { in := down; in.Previous = s.status; return in }())

		d = s.step(withPR(t0.Add(2*time.Minute), failing(openPR(), shaA)))
		rec, _ = cond(d, agentsv1alpha1.ConditionReconciling)
		g.Expect(rec.Reason).NotTo(Equal(agentsv1alpha1.ReasonForgeUnavailable))
	})
	t.Run("a restarted agent container is said on AgentRunning", func(t *testing.T) {
		g := NewWithT(t)
		for restarts, want := range map[int32]string{0: "The agent is running", 1: "The agent is running (its container restarted once)", 3: "The agent is running (its container restarted 3 times)"} {
			in := running()
			in.Pod.Restarts = restarts
			c, _ := cond(Decide(in), agentsv1alpha1.ConditionAgentRunning)
			g.Expect(c.Message).To(Equal(want))
		}
	})
}
