package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

var _ = Describe("A session from prompt to merge", func() {
	It("drives the phases with the fake GitHub and a simulated runner", func() {
		ns := newNamespace()
		full := newRepo(ns)
		Expect(gh.SetProtection(full, fakegithub.Protection{RequiredChecks: []string{"test"}, RequiredApprovals: 1})).To(Succeed())
		Expect(k8sClient.Create(ctx, project(ns, full).Reaction(agentsv1alpha1.TriggerApprovedAndGreen,
			agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge}).Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, MakeSession("fix-login", ns, "widgets").Prompt("Fix the login bug").Obj())).To(Succeed())

		r := startRunner(ns, "fix-login", "widgets")
		r.report(agentsv1alpha1.ActivityActive)
		Eventually(sessionPhase(ns, "fix-login")).WithTimeout(20 * time.Second).Should(Equal(agentsv1alpha1.PhaseWorking))

		head, err := gh.Push(full, "shepherd/fix-login", map[string]string{"login.go": "package main\n// fixed\n"}, "Fix login")
		Expect(err).NotTo(HaveOccurred())
		pr, err := r.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: "shepherd/fix-login", Base: "main", Head: head, Title: "Fix login", Body: "Fixes the login bug"})
		Expect(err).NotTo(HaveOccurred())
		r.report(agentsv1alpha1.ActivityReady)
		Eventually(sessionPhase(ns, "fix-login")).WithTimeout(20 * time.Second).Should(BeElementOf(agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseReviewPending))

		_, err = gh.AddCheckRun(full, head, fakegithub.CheckRun{Name: "test", Conclusion: "failure", Log: "--- FAIL: TestLogin\nlogin_test.go:12: want 200, got 500\n"})
		Expect(err).NotTo(HaveOccurred())
		Eventually(sessionPhase(ns, "fix-login")).WithTimeout(20 * time.Second).Should(Equal(agentsv1alpha1.PhaseCIFailed))
		var msgs []runnerapi.Message
		Eventually(func() int {
			msgs, err = r.Pending(ctx, time.Second)
			Expect(err).NotTo(HaveOccurred())
			return len(msgs)
		}).WithTimeout(10 * time.Second).Should(Equal(1))
		Expect(msgs[0].Text).To(ContainSubstring("test"))
		Expect(r.Ack(ctx, msgs[0].ID)).To(Succeed())

		head, err = gh.Push(full, "shepherd/fix-login", map[string]string{"login.go": "package main\n// really fixed\n"}, "Fix the test")
		Expect(err).NotTo(HaveOccurred())
		_, err = gh.AddCheckRun(full, head, fakegithub.CheckRun{Name: "test", Conclusion: "success"})
		Expect(err).NotTo(HaveOccurred())
		Eventually(sessionPhase(ns, "fix-login")).WithTimeout(20 * time.Second).Should(Equal(agentsv1alpha1.PhaseReviewPending))

		_, err = gh.AddReview(full, int(pr.Number), "reviewer", "APPROVED", "LGTM")
		Expect(err).NotTo(HaveOccurred())
		Eventually(sessionPhase(ns, "fix-login")).WithTimeout(20 * time.Second).Should(Equal(agentsv1alpha1.PhaseMerged))
		info, err := gh.PullRequest(full, int(pr.Number))
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Merged).To(BeTrue())

		// Merged is final: the pull request is no longer polled, and the status keeps it.
		Eventually(func() bool {
			_, followed := mgr.deps.Hub.Get(objKey(ns, "fix-login"))
			return followed
		}).Should(BeFalse(), "a merged session's pull request should not cost polls any more")
		Expect(sessionStatus(ns, "fix-login")().PullRequest).To(HaveField("State", agentsv1alpha1.PullRequestMerged))
	})
})
