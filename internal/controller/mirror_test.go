package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("The Project's MirrorReady", func() {
	It("is Unknown until a prepare fetched the mirror, then True with the time, never for the volume alone", func() {
		w := newWorld()
		create(w.project().Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(
			HaveCondition(agentsv1alpha1.ConditionMirrorReady, metav1.ConditionUnknown, agentsv1alpha1.ReasonMirrorPending))

		a := w.agent("fetcher")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fetch it").Obj())
		a.start() // the pod's prepare reports a checkout made from the mirror
		Eventually(projectConditions(w.ns, "widgets")).Should(
			HaveCondition(agentsv1alpha1.ConditionMirrorReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorFetched))
		p := fresh(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")})
		Expect(p.Status.Mirror).NotTo(BeNil())
		Expect(p.Status.Mirror.LastFetchTime).NotTo(BeNil())
		Expect(p.Status.Mirror.ClaimName).NotTo(BeEmpty())
	})
})
