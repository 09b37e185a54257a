package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// kwokNodes is how many fake nodes the suite's cluster has beside the real one: the scheduler
// places pods on them for real (they run nothing), so placement is tested across nodes.
const kwokNodes = 3

// kwokTaint is the taint of the fake nodes (hack/localcluster): only pods that tolerate it go
// there, never the suite's real workloads.
var kwokTaint = corev1.Toleration{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpEqual, Value: "fake", Effect: corev1.TaintEffectNoSchedule}

// scheduledSessions: a Project whose spec.scheduling sends its pods to the KWOK nodes (node
// selector, the taint's toleration, a RuntimeClass, a PriorityClass), on a ReadWriteOnce
// workspace volume without node affinity (a network block volume, as on a cloud): its sessions'
// pods are placed by the real scheduler on one fake node, the one the first went to, with the
// Project's scheduling; without Shepherd's pod affinity they would spread over the three.
func scheduledSessions(ctx context.Context, c *cluster) {
	By("a RuntimeClass and a PriorityClass, and a ReadWriteOnce volume no node is pinned to")
	suffix := fmt.Sprint(time.Now().UnixNano())
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sandbox-" + suffix}, Handler: "runc",
		Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"type": "kwok"}, Tolerations: []corev1.Toleration{kwokTaint}}}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-agents-" + suffix}, Value: 1000}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-block-" + suffix}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "e2e-block-" + suffix}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: sc.Name, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
		// A volume only the fake nodes would mount (nothing runs there): no node affinity.
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/e2e-block"}},
	}}
	for _, o := range []client.Object{rc, pc, sc, pv} {
		Expect(c.client.Create(ctx, o)).To(Succeed())
		DeferCleanup(func() { _ = c.client.Delete(context.Background(), o) })
	}

	By("a Project scheduled to the fake nodes, its sessions' pods placed by the real scheduler")
	p := newAgentProject(ctx, c, claudeCodeAgent, "e2e-scheduling-", func(s *agentsv1alpha1.ProjectSpec) {
		s.Scheduling = &agentsv1alpha1.SchedulingSpec{NodeSelector: map[string]string{"type": "kwok"},
			Tolerations: []corev1.Toleration{kwokTaint}, RuntimeClassName: rc.Name, PriorityClassName: pc.Name}
		s.Workspace.Storage = &agentsv1alpha1.StorageSpec{StorageClassName: ptr.To(sc.Name), AccessMode: string(corev1.ReadWriteOnce)}
	})
	names := []string{"placed-1", "placed-2", "placed-3", "placed-4"}
	for _, name := range names {
		Expect(c.client.Create(ctx, &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.ns},
			Spec: agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: p.name}, Prompt: "Placed"}})).To(Succeed())
	}
	nodes := map[string]int{}
	Eventually(func(g Gomega) {
		clear(nodes)
		for _, name := range names {
			pod := &corev1.Pod{}
			g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: name + "-agent"}, pod)).To(Succeed())
			g.Expect(pod.Spec.NodeName).NotTo(BeEmpty(), "%s is scheduled", pod.Name)
			g.Expect(pod.Spec.RuntimeClassName).To(HaveValue(Equal(rc.Name)))
			g.Expect(pod.Spec.Priority).To(HaveValue(Equal(int32(1000))), "the PriorityClass's value")
			g.Expect(pod.Spec.Tolerations).To(ContainElement(kwokTaint))
			nodes[pod.Spec.NodeName]++
		}
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	Expect(nodes).To(HaveLen(1), "every pod of the ReadWriteOnce volume on one node: %v", nodes)
	for node := range nodes {
		n := &corev1.Node{}
		Expect(c.client.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		Expect(n.Labels).To(HaveKeyWithValue("type", "kwok"), "the node selector holds")
	}
	fmt.Fprintf(GinkgoWriter, "the 4 sessions' pods on %v\n", nodes)
}
