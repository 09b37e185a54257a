package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Stop and restore", func() {
	It("stops by removing the pod and keeping the Worktree, and resumes the agent's conversation", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("pause")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Refactor the parser").Obj())
		a.start()
		first := a.runner.pod.UID
		Expect(a.runner.task.AgentSessionID).To(BeEmpty())
		a.report(agentsv1alpha1.ActivityActive, agentSessionID("conv-7f3a"))
		a.expect(agentsv1alpha1.PhaseWorking)
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Agent.SessionID", "conv-7f3a"))

		a.setState(agentsv1alpha1.SessionStopped)
		a.expect(agentsv1alpha1.PhaseStopped)
		Eventually(podGone(w.ns, a.podName(), first)).Should(BeTrue())
		Eventually(sessionStatus(w.ns, a.name)).Should(And(
			HaveField("PodName", ""),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonSessionStopped))))
		Expect(worktreeStatus(w.ns, a.name)()).To(HaveField("Phase", agentsv1alpha1.WorktreeReady), "the Worktree is kept")

		a.setState(agentsv1alpha1.SessionRunning)
		Eventually(func() bool { return podExists(w.ns, a.podName())() && a.pod().UID != first }).Should(BeTrue())
		Eventually(sessionStatus(w.ns, a.name)).Should(And(HavePhase(agentsv1alpha1.PhaseSpawning), HaveField("Restores", int32(1))))
		a.start()
		Expect(a.runner.task.AgentSessionID).To(Equal("conv-7f3a"), "the new runner resumes the conversation")
		a.report(agentsv1alpha1.ActivityActive, agentSessionID("conv-7f3a"))
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().Restores).To(Equal(int32(1)))
	})

	It("recreates a pod deleted behind its back once the grace has run out, counting a restore", func() {
		w := newWorld()
		create(shortActivity(w.project()).Obj())
		a := w.agent("lost")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Port the tests").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive, agentSessionID("conv-lost"))
		a.expect(agentsv1alpha1.PhaseWorking)
		lost := a.runner.pod

		Expect(k8sClient.Delete(ctx, &corev1.Pod{ObjectMeta: objMeta(w.ns, lost.Name)})).To(Succeed())
		By("within the grace the phase is held and the pod is not replaced")
		Eventually(func() bool {
			st := a.status()
			return podGone(w.ns, lost.Name, lost.UID)() && !podExists(w.ns, lost.Name)() &&
				st.Phase == agentsv1alpha1.PhaseWorking && st.Grace != nil && st.Grace.Signal == "pod" &&
				hasCondition(st.Conditions, agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, agentsv1alpha1.ReasonSignalGrace)
		}).Should(BeTrue())

		By("after the grace the agent is respawned: a new pod, a restore counted")
		Eventually(func() bool { return podExists(w.ns, lost.Name)() && a.pod().UID != lost.UID }).Should(BeTrue())
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Restores", int32(1)))
		a.start()
		Expect(a.runner.task.AgentSessionID).To(Equal("conv-lost"))
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Expect(a.status().Restores).To(Equal(int32(1)))
	})
})
