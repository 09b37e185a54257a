package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-dev/shepherd/internal/controller"
)

var _ = Describe("The cluster's own ranges", func() {
	It("finds the nodes' pod ranges, the service range and the API server, from the API server itself", func() {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ranges-node"},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.7.0/24", PodCIDRs: []string{"10.244.7.0/24", "fd00:10:244:7::/64"}}}
		create(node)
		DeferCleanup(func() { Expect(k8sClient.Delete(ctx, node)).To(Succeed()) })

		var r controller.ClusterRanges
		Eventually(func(g Gomega) {
			var err error
			r, err = controller.DiscoverClusterRanges(ctx, k8sClient)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.APIServer).To(HaveLen(2), "the kubernetes Service's IP and the API server's address")
		}).Should(Succeed())
		Expect(r.Pods).To(ContainElements("10.244.7.0/24", "fd00:10:244:7::/64"))
		Expect(r.Services).NotTo(BeEmpty(), "the API server's default ServiceCIDR")
		svc := &corev1.Service{}
		Expect(k8sClient.Get(ctx, objKey("default", "kubernetes"), svc)).To(Succeed())
		Expect(r.APIServer).To(ContainElement(svc.Spec.ClusterIP + "/32"))
		Expect(r.All()).To(ContainElements("10.244.7.0/24", svc.Spec.ClusterIP+"/32"))
	})
})
