package controller_test

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// mergeRoute is how the fake GitHub names the merge endpoint in its statistics.
const mergeRoute = "PUT /repos/{o}/{r}/pulls/{x}/merge"

// restartManager stops the manager and starts a new one, as a crash and a new leader would.
// The runner then sends its next heartbeat (the new manager knows nothing of it yet), carrying
// marker as its summary; the function returns once a reconcile of the new manager wrote it, so
// that what follows is judged by the new manager.
func restartManager(a *agent, marker string) {
	GinkgoHelper()
	mgr.stop()
	mgr.start()
	a.report(agentsv1alpha1.ActivityReady, func(r *runnerapi.Report) { r.Summary = marker })
	Eventually(sessionStatus(a.w.ns, a.name)).Should(HaveField("Summary", marker))
}

var _ = Describe("Across a manager restart", Serial, func() {
	It("queues a CI failure's message once, delivers it once, and merges once", func() {
		w, a := mergeWorld("once")

		a.check("failure")
		a.expect(agentsv1alpha1.PhaseCIFailed)
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Messages.Pending", HaveLen(1)))
		queued := a.status().Messages.Pending[0]
		Expect(queued.Source).To(Equal(agentsv1alpha1.MessageFromReaction))
		Expect(queued.Trigger).To(Equal(agentsv1alpha1.TriggerCIFailed))
		Expect(queued.Text).To(ContainSubstring("test"))

		By("a restart before delivery neither loses nor repeats the message")
		restartManager(a, "after the first restart")
		st := a.status()
		Expect(st.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed))
		Expect(st.Messages.Pending).To(ConsistOf(HaveField("ID", queued.ID)))
		Expect(st.Reactions).To(ContainElement(And(HaveField("Trigger", agentsv1alpha1.TriggerCIFailed), HaveField("Attempts", int32(1)))))

		msgs := a.pending()
		Expect(msgs).To(ConsistOf(And(HaveField("ID", queued.ID), HaveField("Text", queued.Text))))
		Expect(a.runner.Ack(ctx, queued.ID)).To(Succeed())
		Eventually(sessionStatus(w.ns, a.name)).Should(And(
			HaveField("Messages.Pending", BeEmpty()), HaveField("Messages.Delivered", ConsistOf(queued.ID))))

		By("a restart after delivery does not deliver it again")
		restartManager(a, "after the second restart")
		Expect(a.pending()).To(BeEmpty())
		err := a.runner.Ack(ctx, queued.ID)
		Expect(runnerapi.IsStatus(err, http.StatusConflict)).To(BeTrue(), "a second ack is refused: %v", err)
		st = a.status()
		Expect(st.Messages.Delivered).To(ConsistOf(queued.ID))
		Expect(st.Reactions).To(ContainElement(And(HaveField("Trigger", agentsv1alpha1.TriggerCIFailed), HaveField("Attempts", int32(1)))))

		By("the fix passes and a reviewer approves; a restart in between; the Merge reaction merges exactly once")
		merges := gh.Stats().ByRoute[mergeRoute]
		a.push("fix.go")
		a.check("")
		a.review("APPROVED")
		a.expect(agentsv1alpha1.PhaseApproved)
		restartManager(a, "after the approval")
		a.check("success")
		a.expect(agentsv1alpha1.PhaseMerged)
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Merged).To(BeTrue())
		Expect(gh.Stats().ByRoute[mergeRoute]-merges).To(Equal(1), "one merge call")
		Expect(a.status().Reactions).To(ContainElement(And(
			HaveField("Trigger", agentsv1alpha1.TriggerApprovedAndGreen), HaveField("LastAttemptKey", "head:"+a.head))))
		Expect(a.status().Messages.Delivered).To(ConsistOf(queued.ID), "the CI message was delivered once")
	})

	It("delivers follow-up messages once each, in order", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("follow")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Write the docs").
			Message("tone", "Keep it short.").Message("audience", "Write for operators.").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)

		var msgs []runnerapi.Message
		Eventually(func() []runnerapi.Message { msgs = a.pending(); return msgs }).Should(HaveLen(2))
		Expect(msgs).To(HaveExactElements(
			And(HaveField("ID", "tone"), HaveField("Text", "Keep it short."), HaveField("Source", agentsv1alpha1.MessageFromUser)),
			And(HaveField("ID", "audience"), HaveField("Text", "Write for operators.")),
		))
		Expect(a.runner.Ack(ctx, "tone")).To(Succeed())
		Expect(a.pending()).To(HaveExactElements(HaveField("ID", "audience")))
		err := a.runner.Ack(ctx, "tone")
		Expect(runnerapi.IsStatus(err, http.StatusConflict)).To(BeTrue(), "a second ack is refused: %v", err)

		By("a restart delivers only what was not acknowledged")
		restartManager(a, "restarted")
		Expect(a.pending()).To(HaveExactElements(HaveField("ID", "audience")))
		Expect(a.runner.Ack(ctx, "audience")).To(Succeed())
		Expect(a.pending()).To(BeEmpty())

		By("a message appended later is delivered once, after the others")
		update(session(w.ns, a.name), func(s *agentsv1alpha1.AgentSession) {
			s.Spec.Messages = append(s.Spec.Messages, agentsv1alpha1.Message{ID: "deadline", Text: "Finish by Friday.", From: "lead"})
		})
		Eventually(a.pending).Should(HaveExactElements(And(HaveField("ID", "deadline"), HaveField("Text", "Finish by Friday."))))
		Expect(a.runner.Ack(ctx, "deadline")).To(Succeed())
		Eventually(sessionStatus(w.ns, a.name)).Should(And(
			HaveField("Messages.Pending", BeEmpty()),
			HaveField("Messages.Delivered", HaveExactElements("tone", "audience", "deadline"))))
		Expect(a.pending()).To(BeEmpty())
	})
})
