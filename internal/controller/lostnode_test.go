package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
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
		// Watched, not read after the delete: Shepherd may force-delete the Terminating pod before
		// a read could see it (it did, on a loaded CI machine); a watch sees every step in order.
		watcher, err := clientset.CoreV1().Pods(w.ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", old.Name).String(), ResourceVersion: old.ResourceVersion})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(watcher.Stop)
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(watcher.ResultChan()).WithTimeout(30*time.Second).Should(Receive(Satisfy(func(ev watch.Event) bool {
			got, ok := ev.Object.(*corev1.Pod)
			// A grace period above zero: a force delete (Shepherd's, later) also passes through a
			// deletionTimestamp, with a grace of 0.
			return ok && ev.Type == watch.Modified && got.UID == old.UID && got.DeletionTimestamp != nil &&
				got.DeletionGracePeriodSeconds != nil && *got.DeletionGracePeriodSeconds > 0
		})), "a bound pod is deleted gracefully: it is Terminating, with a grace period, before it is gone")
		watcher.Stop()
		p := &corev1.Pod{}

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

	It("says which node still holds the replacement's ReadWriteOnce volume, and what frees it", func() {
		restore := controller.SetVolumeHeldAfter(0)
		DeferCleanup(restore)
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("held")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Tidy").Obj())
		pod := a.pod()
		var claim string
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		Expect(claim).NotTo(BeEmpty(), "the agent pod mounts a claim")

		By("the claim is bound to a ReadWriteOnce volume that a lost node still has attached")
		pv := "pv-" + w.ns
		pvc := &corev1.PersistentVolumeClaim{}
		Eventually(func() error {
			if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: claim}, pvc); err != nil {
				return err
			}
			pvc.Spec.VolumeName = pv
			return k8sClient.Update(ctx, pvc)
		}).Should(Succeed())
		Expect(pvc.Spec.AccessModes).To(ContainElement(corev1.ReadWriteOnce))
		lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost-" + w.ns}}
		here := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "here-" + w.ns}}
		for _, n := range []*corev1.Node{lost, here} {
			Expect(k8sClient.Create(ctx, n)).To(Succeed())
			DeferCleanup(func() { _ = k8sClient.Delete(ctx, n) })
		}
		lost.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			LastTransitionTime: metav1.NewTime(time.Now().Add(-3 * time.Minute)), LastHeartbeatTime: metav1.NewTime(time.Now().Add(-3 * time.Minute))}}
		Expect(k8sClient.Status().Update(ctx, lost)).To(Succeed())
		here.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}
		Expect(k8sClient.Status().Update(ctx, here)).To(Succeed())
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-" + w.ns}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "csi.example.com", NodeName: lost.Name, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
		Expect(k8sClient.Create(ctx, va)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, va) })
		va.Status.Attached = true
		Expect(k8sClient.Status().Update(ctx, va)).To(Succeed())

		By("the pod is scheduled elsewhere and waits for the volume")
		Expect(clientset.CoreV1().Pods(w.ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: here.Name}}, metav1.CreateOptions{})).To(Succeed())
		setPodStatus(pod, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: p.Spec.Containers[0].Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		})
		Eventually(readyReason(w.ns, a.name)).Should(Equal(agentsv1alpha1.ReasonVolumeAttachedElsewhere))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).To(And(
			ContainSubstring("volume "+pv), ContainSubstring("still attached to node "+lost.Name), ContainSubstring("node.kubernetes.io/out-of-service")))
		Expect(a.status().Phase).To(Equal(agentsv1alpha1.PhaseSpawning))

		By("once detached, the reason goes")
		va.Status.Attached = false
		Expect(k8sClient.Status().Update(ctx, va)).To(Succeed())
		setPodStatus(pod, func(p *corev1.Pod) { p.Status.Message = "poke" }) // a pod event wakes the session
		Eventually(readyReason(w.ns, a.name)).ShouldNot(Equal(agentsv1alpha1.ReasonVolumeAttachedElsewhere))
	})
})
