package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// A pod stuck Terminating on a node that has been NotReady past the grace is force-deleted, so
// that the session's agent is respawned under the pod's fixed name (issue 20, lost nodes).
// envtest has no kubelet: a bound pod deleted gracefully stays Terminating, as on a dead node.
var _ = Describe("An agent pod Terminating on a lost node", func() {
	It("is force-deleted and the agent respawned", func() {
		w := newWorld()
		// The shortest grace: the replacement waits out the missing pod's grace, by design.
		create(shortActivity(w.project()).Obj())
		a := w.agent("lost-node")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Tidy").Obj())
		old := a.pod()
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)

		By("its node goes NotReady for an hour (the pod bound to it)")
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost-" + w.ns}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, node) })
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
		Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
		Expect(clientset.CoreV1().Pods(w.ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: old.Name, UID: old.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}, metav1.CreateOptions{})).To(Succeed())

		By("the pod deleted gracefully: without a kubelet it stays Terminating")
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		p := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: old.Name}, p)).To(Succeed())
		Expect(p.DeletionTimestamp).NotTo(BeNil(), "a bound pod is deleted gracefully")

		By("Shepherd force-deletes it and creates the replacement under the same name")
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: old.Name}, p)
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.UID).NotTo(Equal(old.UID), "the Terminating pod is gone")
		}).WithTimeout(time.Minute).Should(Succeed())
		By("the agent is respawned in a new pod, once the missing pod's grace is spent")
		Eventually(func() types.UID {
			p := &corev1.Pod{}
			_ = k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: old.Name}, p)
			return p.UID
		}).WithTimeout(time.Minute).Should(And(Not(BeEmpty()), Not(Equal(old.UID))))
	})
})
