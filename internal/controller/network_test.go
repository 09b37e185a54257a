package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Egress", func() {
	It("closes the agent pods' egress by default, opens what the Project names, and keeps the policy while the Project exists", func() {
		w := newWorld()
		create(w.project().Obj())
		np := &networkingv1.NetworkPolicy{}
		key := client.ObjectKey{Namespace: w.ns, Name: "widgets-agent-egress"}
		Eventually(func() error { return k8sClient.Get(ctx, key, np) }).Should(Succeed(), "a Project without spec.network gets the closed policy")
		Expect(np.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "Project"), HaveField("Name", "widgets"), HaveField("Controller", HaveValue(BeTrue())))))
		Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress))
		Expect(np.Spec.Ingress).To(BeEmpty())
		Expect(np.Spec.Egress).To(HaveLen(2))
		Expect(np.Spec.Egress[0].To).To(ConsistOf(HaveField("PodSelector.MatchLabels", HaveKeyWithValue("k8s-app", "kube-dns"))), "DNS to the DNS pods only")
		Expect(np.Spec.Egress[1].To).To(ConsistOf(HaveField("IPBlock.CIDR", "127.0.0.1/32")), "the runner channel (this manager listens on loopback)")

		By("the policy selects the session's agent pod")
		a := w.agent("fenced")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Stay inside").Obj())
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		Expect(err).NotTo(HaveOccurred())
		Expect(sel.Matches(labels.Set(a.pod().Labels))).To(BeTrue())

		By("a network the Project names is opened")
		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) {
			p.Spec.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Allow: []agentsv1alpha1.EgressRule{
				{CIDR: "140.82.112.0/20", Ports: []int32{443}},
			}}}
		})
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, np)).To(Succeed())
			g.Expect(np.Spec.Egress).To(HaveLen(3))
			g.Expect(np.Spec.Egress[2].To).To(ConsistOf(HaveField("IPBlock.CIDR", "140.82.112.0/20")))
		}).Should(Succeed())

		By("unsetting it closes it again; the policy stays")
		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) { p.Spec.Network = nil })
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, np)).To(Succeed())
			g.Expect(np.Spec.Egress).To(HaveLen(2))
		}).Should(Succeed())
		Consistently(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &networkingv1.NetworkPolicy{})) }).
			WithTimeout(time.Second).Should(BeFalse())
	})
})
