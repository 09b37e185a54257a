package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

	It("does not wake a Project for a write to its status, its own or anyone's: a session's change does", func() {
		// A Project's own status write is an update of the Project, like this one: when that woke
		// it, a fan-out's Project reconciled back to back (each count changed, so each wrote), and
		// every reconcile read all of its sessions (issue 23: 0.26 Project status writes per
		// session at N=5000, whatever the coalescing delay).
		w := newWorld()
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))
		total := func() int32 {
			p := &agentsv1alpha1.Project{}
			Expect(k8sClient.Get(ctx, objKey(w.ns, "widgets"), p)).To(Succeed())
			return p.Status.Sessions.Total
		}
		Eventually(total).Should(BeZero())
		// Settled: what its creation woke (its children's events) has run, and left nothing to write.
		rv := func() string {
			p := &agentsv1alpha1.Project{}
			Expect(k8sClient.Get(ctx, objKey(w.ns, "widgets"), p)).To(Succeed())
			return p.ResourceVersion
		}
		settled := rv()
		Eventually(func() bool {
			was := settled
			time.Sleep(2 * time.Second)
			settled = rv()
			return settled == was
		}).WithTimeout(30 * time.Second).Should(BeTrue())
		statusWrites := managerWrites.in(w.ns, "project/status")

		By("a status write from outside the controller, a count it will correct on its next reconcile")
		p := &agentsv1alpha1.Project{}
		Expect(k8sClient.Get(ctx, objKey(w.ns, "widgets"), p)).To(Succeed())
		orig := p.DeepCopy()
		p.Status.Sessions.Total = 42
		Expect(k8sClient.Status().Patch(ctx, p, client.MergeFrom(orig))).To(Succeed())
		Consistently(total).WithTimeout(3*time.Second).Should(BeEquivalentTo(42), "the status write did not wake the Project")
		Expect(managerWrites.in(w.ns, "project/status")).To(Equal(statusWrites), "nor did the manager write it")

		By("a session wakes it: the count is right again")
		create(MakeSession("s0", w.ns, "widgets").Prompt("p").Obj())
		Eventually(total).Should(BeEquivalentTo(1))
		Expect(managerWrites.in(w.ns, "project/status")).To(BeNumerically(">", statusWrites))
	})
})
