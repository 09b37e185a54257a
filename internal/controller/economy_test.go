package controller_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("API economy", func() {
	It("writes a Project's NetworkPolicy once, at its creation, however often the Project reconciles", func() {
		w := newWorld()
		// Counted in this namespace: other specs' Projects still reconcile in the background.
		writes := func() int { return managerWrites.in(w.ns, "networkpolicy") }
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		// Egress is closed by default: every Project has its policy, created with the Project.
		Expect(writes()).To(Equal(1), "the Project's NetworkPolicy was created once")
		By("sessions coming and going reconcile the Project again and again")
		for i := range 3 {
			create(MakeSession(fmt.Sprintf("s%d", i), w.ns, "widgets").Prompt("p").Obj())
		}
		Eventually(func() int32 {
			p := &agentsv1alpha1.Project{}
			Expect(k8sClient.Get(ctx, objKey(w.ns, "widgets"), p)).To(Succeed())
			return p.Status.Sessions.Total
		}).Should(BeEquivalentTo(3))
		Expect(writes()).To(Equal(1), "the NetworkPolicy was not patched again: what the controller writes is what the API server keeps")
	})
})
