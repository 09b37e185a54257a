package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("The merge gate", func() {
	It("does not merge on an approval given before the last push, and merges once it is given again", func() {
		_, a := mergeWorld("gate-push")
		merges := gh.Stats().ByRoute[mergeRoute]
		By("an approval now would merge, but the agent pushes first")
		a.review("APPROVED")
		a.push("after-approval.go")
		a.check("success")
		a.expect(agentsv1alpha1.PhaseMergeable) // GitHub keeps the approval across the push
		Eventually(func() []metav1.Condition { return a.status().Conditions }).Should(
			HaveCondition(agentsv1alpha1.ConditionNeedsAttention, metav1.ConditionTrue, agentsv1alpha1.ReasonMergeGated))
		Consistently(func() int { return gh.Stats().ByRoute[mergeRoute] - merges }, "2s").Should(BeZero())

		By("the reviewer approves the new head")
		a.review("APPROVED")
		a.expect(agentsv1alpha1.PhaseMerged)
		Expect(gh.Stats().ByRoute[mergeRoute] - merges).To(Equal(1))
	})

	It("does not merge a pull request nobody reviewed, unless the Project opts in", func() {
		w := newWorld()
		create(w.project().Reaction(agentsv1alpha1.TriggerApprovedAndGreen, agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge}).Obj())
		a := greenUnreviewed(w, "gate-unreviewed")
		merges := gh.Stats().ByRoute[mergeRoute]
		Eventually(func() []metav1.Condition { return a.status().Conditions }).Should(
			HaveCondition(agentsv1alpha1.ConditionNeedsAttention, metav1.ConditionTrue, agentsv1alpha1.ReasonMergeGated))
		Consistently(func() int { return gh.Stats().ByRoute[mergeRoute] - merges }, "2s").Should(BeZero())

		By("the Project opts in to merging without a review")
		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) {
			p.Spec.Reactions.ApprovedAndGreen.MergeWithoutApproval = true
		})
		a.expect(agentsv1alpha1.PhaseMerged)
		Expect(gh.Stats().ByRoute[mergeRoute] - merges).To(Equal(1))
	})
})

// greenUnreviewed is a session of w's Project (created by the caller) whose pull request passed
// its checks with no review: with no branch protection the forge would merge it, so it is
// Mergeable.
func greenUnreviewed(w *world, name string) *agent {
	GinkgoHelper()
	a := w.agent(name)
	create(MakeSession(a.name, w.ns, "widgets").Prompt("Tidy").Obj())
	a.start()
	a.report(agentsv1alpha1.ActivityActive)
	a.openPR()
	a.check("success")
	a.report(agentsv1alpha1.ActivityReady)
	a.expect(agentsv1alpha1.PhaseMergeable)
	return a
}
