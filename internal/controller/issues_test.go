package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// The manager's side of `kubectl shepherd batch` (internal/ui's issues endpoint): the open
// issues that carry every label, read with the Project's own tracker and credentials.
var _ = Describe("Listing a Project's tracker issues for the UI", func() {
	It("lists the open issues with every label through the Project's tracker, and says when there is none", func() {
		w := newWorld()
		login := w.issue("Fix the login form", "agent", "ready")
		w.issue("Only half labelled", "agent")
		docs := w.issue("Document the API", "ready", "docs", "agent")
		p := w.project().Obj()
		create(p)
		lister := controller.ProjectIssues(mgr.deps)

		issues, err := lister.ProjectIssues(ctx, fresh(p), []string{"agent", "ready"}, 50)
		Expect(err).NotTo(HaveOccurred())
		ids := func(is []tracker.Issue) []string {
			var out []string
			for _, i := range is {
				out = append(out, i.ID)
			}
			return out
		}
		Expect(ids(issues)).To(ConsistOf(login, docs))

		By("a limit bounds the answer")
		issues, err = lister.ProjectIssues(ctx, fresh(p), []string{"agent"}, 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(issues).To(HaveLen(1))

		By("a Project without a tracker")
		none := fresh(p).DeepCopy()
		none.Spec.Tracker = nil
		_, err = lister.ProjectIssues(ctx, none, []string{"agent"}, 10)
		Expect(err).To(MatchError(ui.ErrNoTracker))

		By("a Project whose token is missing: the credential error, not a panic or an empty list")
		broken := fresh(p).DeepCopy()
		broken.Spec.Repository.Credentials.SecretRef = &agentsv1alpha1.SecretKeyRef{Name: "no-such-secret", Key: "token"}
		_, err = lister.ProjectIssues(ctx, broken, []string{"agent"}, 10)
		Expect(err).To(MatchError(ContainSubstring("no-such-secret")))
	})
})
