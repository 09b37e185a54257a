package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Two sessions on one Worktree", func() {
	It("take turns: the second waits (WorktreeInUse, no pod) until the first stops, and a restored first waits for the second", func() {
		w := newWorld()
		create(w.project().Obj())
		create(MakeWorktree("shared", w.ns, "widgets", "feature/shared").Obj())
		finishPod(waitPod(w.ns, "shared-worktree"), 0, mustJSON(preparedResult("feature/shared", workspace.Facts{}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "shared")).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))

		first, second := w.agent("first"), w.agent("second")
		first.br, second.br = "feature/shared", "feature/shared"
		create(MakeSession(first.name, w.ns, "widgets").Prompt("Go first").WorktreeRef("shared").Obj())
		first.start()
		first.report(agentsv1alpha1.ActivityActive)
		first.expect(agentsv1alpha1.PhaseWorking)

		By("the second session waits for its turn, without a pod")
		create(MakeSession(second.name, w.ns, "widgets").Prompt("Go second").WorktreeRef("shared").Obj())
		Eventually(readyReason(w.ns, second.name)).Should(Equal(agentsv1alpha1.ReasonWorktreeInUse))
		Expect(sessionPhase(w.ns, second.name)()).To(Equal(agentsv1alpha1.PhaseSpawning))
		Expect(second.status().Conditions).To(ContainElement(HaveField("Message", ContainSubstring("in use by session first"))))
		Consistently(podExists(w.ns, second.podName()), 2*time.Second).Should(BeFalse())

		By("the first stops: its pod goes, and the second gets its turn")
		first.setState(agentsv1alpha1.SessionStopped)
		first.expect(agentsv1alpha1.PhaseStopped)
		Eventually(podExists(w.ns, first.podName())).Should(BeFalse())
		Eventually(podExists(w.ns, second.podName())).Should(BeTrue(), "the second's pod, within a poll of the first's going")
		second.start()
		second.report(agentsv1alpha1.ActivityActive)
		second.expect(agentsv1alpha1.PhaseWorking)

		By("the first is restored while the second works: now the first waits")
		first.setState(agentsv1alpha1.SessionRunning)
		Eventually(readyReason(w.ns, first.name)).Should(Equal(agentsv1alpha1.ReasonWorktreeInUse))
		Consistently(podExists(w.ns, first.podName()), 2*time.Second).Should(BeFalse())
	})
})

var _ = Describe("A checkout deleted behind Shepherd's back", func() {
	It("is Missing while a runner says it is gone, and a prepare that makes it again says what was lost, once", func() {
		w := newWorld()
		create(w.project().Obj())
		create(MakeWorktree("gone", w.ns, "widgets", "feature/gone").Obj())
		finishPod(waitPod(w.ns, "gone-worktree"), 0, mustJSON(preparedResult("feature/gone", workspace.Facts{Unpushed: 2}, workspace.SetupResult{})))
		Eventually(worktreeStatus(w.ns, "gone")).Should(And(HaveField("Phase", agentsv1alpha1.WorktreeReady), HaveField("UnpushedCommits", int32(2))))

		a := w.agent("gone")
		a.br = "feature/gone"
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Work").WorktreeRef("gone").Obj())
		// Statuses keep seconds: the session's prepare finishes in a later second than the first.
		observed := worktreeStatus(w.ns, "gone")().LastObservedTime.Time
		Eventually(func() bool { return time.Now().Truncate(time.Second).After(observed) }).Should(BeTrue())
		a.start() // its prepare made the checkout anew (Restored false): the directory had vanished
		Eventually(func() []string { return warningEvents(w.ns, "gone", agentsv1alpha1.ReasonCheckoutMissing) }).Should(ConsistOf(
			And(ContainSubstring("had vanished"), ContainSubstring("feature/gone"), ContainSubstring("2 unpushed commit(s) are lost"))))
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)

		By("the runner finds the checkout gone while the agent works")
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Workspace = &runnerapi.WorkspaceReport{Path: "/shepherd/workspace/worktrees/gone", Missing: true}
		})
		Eventually(worktreeStatus(w.ns, "gone")).Should(And(HaveField("Phase", agentsv1alpha1.WorktreeMissing),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonCheckoutMissing))))
		Expect(findCond(worktreeStatus(w.ns, "gone")().Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("deleted outside Shepherd"))
		Consistently(func() []string { return warningEvents(w.ns, "gone", agentsv1alpha1.ReasonCheckoutMissing) }, "2s").Should(HaveLen(1))
	})
})

// warningEvents are the messages of the Warning events with reason about the object named name.
func warningEvents(ns, name, reason string) []string {
	var events corev1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range events.Items {
		if e.Type == corev1.EventTypeWarning && e.Reason == reason && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}
