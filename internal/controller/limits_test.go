package controller_test

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

func turns(n int32) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) { r.Usage = &runnerapi.Usage{Turns: n} }
}

// limitsProject gives every session maxTurns 2 and maxDuration 720h, and routes action
// notifications to rcv.
func limitsProject(w *world, rcv *receiver) *ProjectBuilder {
	return w.project().With(withWebhook(w, rcv.URL)).With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Limits = &agentsv1alpha1.LimitsSpec{SessionLimits: agentsv1alpha1.SessionLimits{
			MaxTurns: ptr.To[int32](2), MaxDuration: &metav1.Duration{Duration: 720 * time.Hour}}}
	})
}

var _ = Describe("Session limits", func() {
	It("end a session at the Project's maxTurns once the turn is finished, tell a human once, and keep the pull request", func() {
		w := newWorld()
		rcv := newReceiver("s3cret", http.StatusOK)
		create(limitsProject(w, rcv).Obj())
		a := w.agent("turns")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Loop for ever").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive, turns(1))
		a.expect(agentsv1alpha1.PhaseWorking)
		a.openPR() // no protection, no checks: Mergeable at once
		a.expect(agentsv1alpha1.PhaseMergeable)
		pod := a.pod()

		By("the second turn is under way: it is not cut")
		a.report(agentsv1alpha1.ActivityActive, turns(2))
		Consistently(sessionPhase(w.ns, a.name), 2*time.Second).Should(Equal(agentsv1alpha1.PhaseMergeable))

		By("the second turn finished: Done, MaxTurnsReached")
		a.report(agentsv1alpha1.ActivityReady, turns(2))
		a.expect(agentsv1alpha1.PhaseDone)
		st := a.status()
		Expect(st.Conditions).To(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMaxTurnsReached))
		Expect(meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady).Message).To(Equal("The agent finished 2 turns, its maxTurns of 2"))
		Eventually(podGone(w.ns, pod.Name, pod.UID)).Should(BeTrue(), "the agent pod goes")

		Eventually(rcv.types).Should(ContainElement(string(agentsv1alpha1.EventSessionDone)))
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Notifications", BeEmpty()))
		Consistently(func() int {
			n := 0
			for _, t := range rcv.types() {
				if t == string(agentsv1alpha1.EventSessionDone) {
					n++
				}
			}
			return n
		}, 2*time.Second).Should(Equal(1), "one notification")
		pr, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(pr.State).To(Equal("open"), "the pull request stays for a human")
	})

	It("end a session at its own maxDuration, over the Project's, at the deadline without new evidence", func() {
		w := newWorld()
		rcv := newReceiver("s3cret", http.StatusOK)
		create(limitsProject(w, rcv).Obj())
		a := w.agent("clock")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Take your time").With(func(s *agentsv1alpha1.AgentSessionSpec) {
			s.Limits = &agentsv1alpha1.SessionLimits{MaxDuration: &metav1.Duration{Duration: time.Minute}}
		}).Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive, turns(0))
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().StartTime).NotTo(BeNil())

		By("the agent started 55 s ago (status.startTime moved back, rather than a test that waits a minute)")
		s := session(w.ns, a.name)
		Expect(k8sClient.Get(ctx, objKey(w.ns, a.name), s)).To(Succeed())
		base := s.DeepCopy()
		s.Status.StartTime = &metav1.Time{Time: time.Now().Add(-55 * time.Second)}
		Expect(k8sClient.Status().Patch(ctx, s, client.MergeFrom(base))).To(Succeed())

		// A status write alone wakes no reconcile (the watch follows generations and annotations):
		// an annotation does, after the status change in the watch's order.
		annotate(s, "test.shepherd.dev/nudge", "1")

		By("nothing else happens; the deadline alone ends the session, mid-turn")
		a.expect(agentsv1alpha1.PhaseDone)
		st := a.status()
		Expect(st.Conditions).To(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMaxDurationReached))
		Expect(meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("reached its maxDuration of 1m0s"))
		Eventually(rcv.types).Should(ContainElement(string(agentsv1alpha1.EventSessionDone)))
	})
})
