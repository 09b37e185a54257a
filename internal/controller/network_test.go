package controller_test

import (
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
	It("restricts agent pods to DNS, the runner channel and the Project's allowlist, and lifts it when egress is unset", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Allow: []agentsv1alpha1.EgressRule{
				{CIDR: "140.82.112.0/20", Ports: []int32{443}},
			}}}
		}).Obj())
		np := &networkingv1.NetworkPolicy{}
		key := client.ObjectKey{Namespace: w.ns, Name: "widgets-agent-egress"}
		Eventually(func() error { return k8sClient.Get(ctx, key, np) }).Should(Succeed())
		Expect(np.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "Project"), HaveField("Name", "widgets"), HaveField("Controller", HaveValue(BeTrue())))))
		Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress))
		Expect(np.Spec.Egress).To(HaveLen(3))
		Expect(np.Spec.Egress[0].Ports).To(ConsistOf(HaveField("Port.IntVal", int32(53)), HaveField("Port.IntVal", int32(53))), "DNS, UDP and TCP")
		Expect(np.Spec.Egress[1].To).To(ConsistOf(HaveField("IPBlock.CIDR", "127.0.0.1/32")), "the runner channel (this manager listens on loopback)")
		Expect(np.Spec.Egress[2].To).To(ConsistOf(HaveField("IPBlock.CIDR", "140.82.112.0/20")))

		By("the policy selects the session's agent pod")
		a := w.agent("fenced")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Stay inside").Obj())
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		Expect(err).NotTo(HaveOccurred())
		Expect(sel.Matches(labels.Set(a.pod().Labels))).To(BeTrue())

		By("unsetting egress removes the policy")
		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) { p.Spec.Network = nil })
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &networkingv1.NetworkPolicy{})) }).Should(BeTrue())
	})
})
