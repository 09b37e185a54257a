package controller_test

import (
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

const closePullRoute = "PATCH /repos/{o}/{r}/pulls/{x}"

// onDeleteSession is a session with spec.onDelete ClosePullRequest whose pull request is open.
func onDeleteSession(w *world, name string) *agent {
	GinkgoHelper()
	a := w.agent(name)
	create(MakeSession(a.name, w.ns, "widgets").Prompt("Try something").With(func(s *agentsv1alpha1.AgentSessionSpec) {
		s.OnDelete = agentsv1alpha1.DeleteClosePullRequest
	}).Obj())
	Eventually(func() []string { return fresh(session(w.ns, a.name)).Finalizers }).
		Should(ContainElement(agentsv1alpha1.ClosePullRequestFinalizer), "the finalizer comes with the policy")
	a.start()
	a.report(agentsv1alpha1.ActivityActive)
	a.openPR()
	a.report(agentsv1alpha1.ActivityReady)
	a.expect(agentsv1alpha1.PhaseMergeable) // no protection, no checks
	return a
}

// closingComments counts the comments Shepherd left on the pull request when deleting.
func closingComments(w *world, a *agent) int {
	GinkgoHelper()
	info, err := gh.PullRequest(w.full, a.pr)
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, c := range info.Comments {
		if strings.Contains(c, "AgentSession that opened this pull request was deleted") {
			n++
		}
	}
	return n
}

// sessionGone reports whether the session is deleted.
func sessionGone(ns, name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, objKey(ns, name), &agentsv1alpha1.AgentSession{}))
	}
}

var _ = Describe("spec.onDelete", func() {
	It("ClosePullRequest closes the open pull request once, with a comment, before the session goes", func() {
		w := newWorld()
		create(w.project().Obj())
		a := onDeleteSession(w, "closes")
		closes := gh.Stats().ByRoute[closePullRoute]
		Expect(k8sClient.Delete(ctx, session(w.ns, a.name))).To(Succeed())
		Eventually(sessionGone(w.ns, a.name)).Should(BeTrue(), "the finalizer goes once the pull request is closed")
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal("closed"))
		Expect(closingComments(w, a)).To(Equal(1))
		Expect(gh.Stats().ByRoute[closePullRoute]-closes).To(Equal(1), "one close call")
	})

	It("ClosePullRequest gives up after its bound when the forge cannot close, says so, and keeps the pull request", func() {
		DeferCleanup(controller.SetClosePullRequestGiveUp(3 * time.Second))
		w := newWorld()
		create(w.project().Obj())
		a := onDeleteSession(w, "gives-up")
		const commentRoute = "POST /repos/{o}/{r}/issues/{x}/comments"
		failures := make([]int, 500)
		for i := range failures {
			failures[i] = http.StatusServiceUnavailable
		}
		gh.FailRoute(commentRoute, failures...)
		DeferCleanup(func() { gh.ClearRouteFailures(commentRoute) })
		Expect(k8sClient.Delete(ctx, session(w.ns, a.name))).To(Succeed())
		Eventually(sessionGone(w.ns, a.name)).Should(BeTrue(), "the finalizer goes at the bound")
		Expect(warnings(w.ns, a.name, agentsv1alpha1.ReasonPullRequestKept)()).To(BeNumerically(">=", 1), "a Warning event says the pull request stays")
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal("open"))
	})

	It("Keep (the default) leaves the pull request open and puts no finalizer on the session", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("keeps")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Try something").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.openPR()
		a.expect(agentsv1alpha1.PhaseMergeable)
		Expect(fresh(session(w.ns, a.name)).Spec.OnDelete).To(Equal(agentsv1alpha1.DeleteKeep), "the default is visible in the object")
		Consistently(func() bool {
			return controllerutil.ContainsFinalizer(fresh(session(w.ns, a.name)), agentsv1alpha1.ClosePullRequestFinalizer)
		}, time.Second).Should(BeFalse())
		Expect(k8sClient.Delete(ctx, session(w.ns, a.name))).To(Succeed())
		Eventually(sessionGone(w.ns, a.name)).Should(BeTrue())
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal("open"))
	})

	It("ClosePullRequest changed back to Keep drops the finalizer", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("changes-mind")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Try").With(func(s *agentsv1alpha1.AgentSessionSpec) {
			s.OnDelete = agentsv1alpha1.DeleteClosePullRequest
		}).Obj())
		Eventually(func() []string { return fresh(session(w.ns, a.name)).Finalizers }).Should(ContainElement(agentsv1alpha1.ClosePullRequestFinalizer))
		update(session(w.ns, a.name), func(s *agentsv1alpha1.AgentSession) { s.Spec.OnDelete = agentsv1alpha1.DeleteKeep })
		Eventually(func() []string { return fresh(session(w.ns, a.name)).Finalizers }).ShouldNot(ContainElement(agentsv1alpha1.ClosePullRequestFinalizer))
	})
})
