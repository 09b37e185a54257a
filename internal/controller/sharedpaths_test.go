package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Shared paths", func() {
	It("gives a clone-mode Project a workspace volume for the cache, and its checkout pods mount it", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Workspace.Mode = agentsv1alpha1.WorkspaceClone
			s.Workspace.SharedPaths = []string{"node_modules"}
		}).Obj())
		Eventually(func() error {
			return k8sClient.Get(ctx, objKey(w.ns, "widgets-workspace"), &corev1.PersistentVolumeClaim{})
		}).Should(Succeed())

		create(MakeWorktree("feature", w.ns, "widgets", "feature/shared").Obj())
		pod := &corev1.Pod{}
		Eventually(func() error { return k8sClient.Get(ctx, objKey(w.ns, "feature-worktree"), pod) }).Should(Succeed())
		Expect(pod.Spec.Volumes).To(ContainElements(
			And(HaveField("Name", "workspace"), HaveField("PersistentVolumeClaim.ClaimName", "feature-checkout")),
			And(HaveField("Name", "project-workspace"), HaveField("PersistentVolumeClaim.ClaimName", "widgets-workspace")),
		))
		// The checkout step mounts only the cache of the Project's volume; the runner makes it.
		Expect(pod.Spec.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "project-workspace", MountPath: "/shepherd/project/shared", SubPath: "shared"}))
		Expect(pod.Spec.InitContainers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "project-workspace", MountPath: "/shepherd/project"}))
		Expect(pod.Spec.Containers[0].Args).To(ContainElements("--mode=Clone", "--shared-paths=node_modules", "--shared-dir=/shepherd/project/shared"))
	})
})
