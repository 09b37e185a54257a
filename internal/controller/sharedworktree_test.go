package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
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
