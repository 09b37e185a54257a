package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Admission under maxConcurrentSessions", func() {
	It("queues sessions beyond the limit and admits them oldest first as slots free", func() {
		w := newWorld()
		create(w.project().MaxConcurrent(1).Obj())

		first := w.agent("first")
		create(MakeSession(first.name, w.ns, "widgets").Prompt("First task").Obj())
		first.pod()
		first.expect(agentsv1alpha1.PhaseSpawning)

		// "zeta" is created a second before "alpha": creation time orders the queue, not the
		// name (the API keeps creation times to the second).
		zeta, alpha := w.agent("zeta"), w.agent("alpha")
		create(MakeSession(zeta.name, w.ns, "widgets").Prompt("Second task").Obj())
		zetaCreated := fresh(session(w.ns, zeta.name)).CreationTimestamp
		Eventually(func() bool { return time.Now().Truncate(time.Second).After(zetaCreated.Time) }).Should(BeTrue())
		create(MakeSession(alpha.name, w.ns, "widgets").Prompt("Third task").Obj())

		for _, q := range []*agent{zeta, alpha} {
			q.expect(agentsv1alpha1.PhaseQueued)
			Expect(q.status().AdmittedTime).To(BeNil())
			Expect(q.status().Conditions).To(HaveCondition(agentsv1alpha1.ConditionAgentRunning, "False", agentsv1alpha1.ReasonQueued))
			Expect(podExists(w.ns, q.podName())()).To(BeFalse(), "a queued session has no pod")
			err := k8sClient.Get(ctx, objKey(w.ns, q.name), worktree(w.ns, q.name))
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a queued session has no Worktree")
		}
		Eventually(func() agentsv1alpha1.SessionCounts {
			return fresh(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}).Status.Sessions
		}).Should(And(HaveField("Total", int32(3)), HaveField("Queued", int32(2)), HaveField("Active", int32(1))))

		By("stopping the first session, the oldest queued one is admitted")
		first.setState(agentsv1alpha1.SessionStopped)
		first.expect(agentsv1alpha1.PhaseStopped)
		zeta.expect(agentsv1alpha1.PhaseSpawning)
		Expect(zeta.status().AdmittedTime).NotTo(BeNil())
		zeta.pod()
		alpha.expect(agentsv1alpha1.PhaseQueued)

		By("a stopped session set Running again waits in the queue too")
		first.setState(agentsv1alpha1.SessionRunning)
		first.expect(agentsv1alpha1.PhaseQueued)
		Expect(podExists(w.ns, first.podName())()).To(BeFalse())

		By("ending the admitted session (its agent exits cleanly: Done) admits the oldest queued one")
		zeta.start()
		zeta.report(agentsv1alpha1.ActivityActive)
		zeta.expect(agentsv1alpha1.PhaseWorking)
		zeta.report(agentsv1alpha1.ActivityExited, exitCode(0))
		zeta.expect(agentsv1alpha1.PhaseDone)
		Eventually(podGone(w.ns, zeta.podName(), zeta.runner.pod.UID)).Should(BeTrue(), "a finished session's pod is removed")
		first.expect(agentsv1alpha1.PhaseSpawning)
		first.pod()
		alpha.expect(agentsv1alpha1.PhaseQueued)

		By("deleting the admitted session frees its slot as well")
		Expect(k8sClient.Delete(ctx, session(w.ns, first.name))).To(Succeed())
		alpha.expect(agentsv1alpha1.PhaseSpawning)
		alpha.pod()
	})
})
