package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// ownedBy matches owner references that make the session the controlling owner, with
// blockOwnerDeletion, as the garbage collector needs to remove the child with it.
func ownedBy(s *agentsv1alpha1.AgentSession) OmegaMatcher {
	return ConsistOf(And(
		HaveField("APIVersion", agentsv1alpha1.GroupVersion.String()),
		HaveField("Kind", "AgentSession"), HaveField("Name", s.Name), HaveField("UID", s.UID),
		HaveField("Controller", HaveValue(BeTrue())), HaveField("BlockOwnerDeletion", HaveValue(BeTrue())),
	))
}

// collectGarbage deletes what owner references tie to uid, as the garbage collector of a real
// cluster does (envtest runs no kube-controller-manager, so nothing else would).
func collectGarbage(ns string, uid types.UID) {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
	var wts agentsv1alpha1.WorktreeList
	Expect(k8sClient.List(ctx, &wts, client.InNamespace(ns))).To(Succeed())
	var owned []client.Object
	for i := range pods.Items {
		owned = append(owned, &pods.Items[i])
	}
	for i := range wts.Items {
		owned = append(owned, &wts.Items[i])
	}
	for _, o := range owned {
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == uid {
				deleteIfExists(o)
			}
		}
	}
}

var _ = Describe("Deleting a session", func() {
	// The controller leaves the removal of a deleted session's pod and own Worktree to the
	// garbage collector (see the deletion branch of AgentSessionReconciler.Reconcile). envtest
	// runs none, so this test checks the owner references the collector follows, plays the
	// collector, and checks what the controllers do next.
	It("removes its pod and its own Worktree through owner references, never a Worktree it only uses", func() {
		w := newWorld()
		create(w.project().MaxConcurrent(1).Obj())
		create(MakeWorktree("shared", w.ns, "widgets", "feature/shared").Obj())
		finishPod(waitPod(w.ns, "shared-worktree"), 0, mustJSON(preparedResult("feature/shared", workspace.Facts{}, workspace.SetupResult{})))

		owner := w.agent("owner")
		create(MakeSession(owner.name, w.ns, "widgets").Prompt("Own everything").Obj())
		owner.start()
		owner.report(agentsv1alpha1.ActivityActive)
		owner.expect(agentsv1alpha1.PhaseWorking)
		borrower := w.agent("borrower")
		create(MakeSession(borrower.name, w.ns, "widgets").Prompt("Borrow the shared checkout").WorktreeRef("shared").Obj())
		borrower.expect(agentsv1alpha1.PhaseQueued)

		sess := fresh(session(w.ns, owner.name))
		Expect(owner.pod().OwnerReferences).To(ownedBy(sess))
		Expect(fresh(worktree(w.ns, owner.name)).OwnerReferences).To(ownedBy(sess))
		Expect(fresh(worktree(w.ns, "shared")).OwnerReferences).To(BeEmpty())

		Expect(k8sClient.Delete(ctx, sess)).To(Succeed())
		collectGarbage(w.ns, sess.UID)
		Eventually(podExists(w.ns, owner.podName())).Should(BeFalse())

		By("the Worktree's finalizer removes the checkout before the Worktree goes")
		Eventually(worktreeStatus(w.ns, owner.name)).Should(HaveField("Phase", agentsv1alpha1.WorktreeRemoving))
		finishPod(waitPod(w.ns, owner.name+"-worktree"), 0, "")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, objKey(w.ns, owner.name), worktree(w.ns, owner.name)))
		}).Should(BeTrue())

		By("its slot goes to the queued session; the shared Worktree stays")
		borrower.expect(agentsv1alpha1.PhaseSpawning)
		Expect(borrower.pod().OwnerReferences).To(ownedBy(fresh(session(w.ns, borrower.name))))
		Expect(worktreeStatus(w.ns, "shared")()).To(And(
			HaveField("Phase", agentsv1alpha1.WorktreeReady), HaveField("BoundSessions", ConsistOf(borrower.name))))
		Expect(k8sClient.Delete(ctx, session(w.ns, borrower.name))).To(Succeed())
		Eventually(worktreeStatus(w.ns, "shared")).Should(HaveField("BoundSessions", BeEmpty()))
		Expect(fresh(worktree(w.ns, "shared")).DeletionTimestamp).To(BeNil())
		Expect(fresh(worktree(w.ns, "shared")).Status.Conditions).To(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
	})
})
