package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// writersOf are the field managers that wrote a session's status (managedFields).
func writersOf(ns, name string) []string {
	GinkgoHelper()
	s := &agentsv1alpha1.AgentSession{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	var out []string
	for _, f := range s.ManagedFields {
		if f.Subresource == "status" {
			out = append(out, f.Manager)
		}
	}
	return out
}

var _ = Describe("Shards by namespace", Serial, func() {
	It("runs two managers on disjoint --watch-namespaces, each with its own Lease: both lead, and neither touches the other's sessions", func() {
		w1, w2 := newWorld(), newWorld()
		leases := newNamespace()
		admin := mgr
		admin.stop()
		a := &managerUnderTest{runnerAddr: admin.runnerAddr, webhookAddr: admin.webhookAddr, name: "shard-a",
			leaseNamespace: leases, leaseName: "shepherd-shard-a", namespaces: []string{w1.ns}}
		b := &managerUnderTest{runnerAddr: freeAddr(), webhookAddr: freeAddr(), name: "shard-b",
			leaseNamespace: leases, leaseName: "shepherd-shard-b", namespaces: []string{w2.ns}}
		a.start()
		b.start()
		mgr = a
		DeferCleanup(func() {
			b.stop()
			a.stop()
			mgr = admin
			mgr.start()
		})
		Eventually(a.elected).Should(BeClosed(), "shard a leads its Lease")
		Eventually(b.elected).Should(BeClosed(), "shard b leads its own: one Lease each (--leader-election-id)")

		create(w1.project().Obj())
		create(w2.project().Obj())
		s1, s2 := w1.agent("on-shard-a"), w2.agent("on-shard-b")
		s1.via, s2.via = a, b
		create(MakeSession(s1.name, w1.ns, "widgets").Prompt("One").Obj())
		create(MakeSession(s2.name, w2.ns, "widgets").Prompt("Two").Obj())
		for _, s := range []*agent{s1, s2} {
			s.start()
			s.report(agentsv1alpha1.ActivityActive)
			s.expect(agentsv1alpha1.PhaseWorking)
		}
		Expect(writersOf(w1.ns, s1.name)).To(ConsistOf("shard-a"), "only shard a wrote the session of its namespace")
		Expect(writersOf(w2.ns, s2.name)).To(ConsistOf("shard-b"), "only shard b wrote the session of its namespace")
		_, err := connectRunnerAt(b.runnerAddr, s1.pod(), "widgets")
		Expect(err).To(HaveOccurred(), "shard b's runner channel does not serve a session of shard a's namespace")
	})
})
