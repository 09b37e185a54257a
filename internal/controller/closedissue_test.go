package controller_test

import (
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakelinear"
)

// askNow sets the Project's reconcile request, so its trackers are asked at once rather than at
// the next issuePollInterval (1m at the least).
func askNow(ns string) {
	GinkgoHelper()
	annotate(&agentsv1alpha1.Project{ObjectMeta: objMeta(ns, "widgets")}, agentsv1alpha1.ReconcileRequestAnnotation, strconv.FormatInt(time.Now().UnixNano(), 10))
}

// readyReason is the session's Ready reason, for Eventually.
func readyReason(ns, name string) func() string {
	return func() string {
		c := meta.FindStatusCondition(sessionStatus(ns, name)().Conditions, agentsv1alpha1.ConditionReady)
		if c == nil {
			return ""
		}
		return c.Reason
	}
}

var _ = Describe("A closed tracker issue", func() {
	It("ends its GitHub session Done (IssueClosed) with one listing for all the Project's sessions; an open issue's session goes on", func() {
		w := newWorld()
		closing := w.issue("Fix the login form")
		staying := w.issue("Document the API")
		create(w.project().Obj())
		a, b := w.workingOn("closing", closing), w.workingOn("staying", staying)
		pod := a.pod()

		w.closeIssue(closing)
		before := gh.Stats().ByRoute["GET /repos/{o}/{r}/issues"]
		askNow(w.ns)

		a.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonIssueClosed))
		Expect(meta.FindStatusCondition(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).
			To(Equal("Issue " + closing + " was closed in the tracker (closed)"))
		Eventually(podGone(w.ns, pod.Name, pod.UID)).Should(BeTrue(), "its agent pod goes")
		Expect(gh.Stats().ByRoute["GET /repos/{o}/{r}/issues"] - before).To(BeNumerically(">=", 1))
		Consistently(func() int { return gh.Stats().ByRoute["GET /repos/{o}/{r}/issues"] - before }, 3*time.Second).
			Should(BeNumerically("<=", 2), "one listing per request or interval, not one per session or reconcile")
		Expect(sessionPhase(w.ns, b.name)()).To(Equal(agentsv1alpha1.PhaseWorking), "the open issue's session goes on")
		Expect(wt(w.ns, a.name)).NotTo(BeNil(), "the Worktree is kept, as after any Done")
	})

	It("is seen at once through the forge's issues webhook, without a reconcile request", func() {
		w := newWorld()
		id := w.issue("Rename the flag")
		create(w.project().Obj())
		a := w.workingOn("hooked", id)
		w.closeIssue(id) // delivers issues/closed to the Project's path
		// Within issueHintGap (10 s) of the Project's last query, far below issuePollInterval.
		a.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonIssueClosed))
	})

	It("is ignored when the Project says Ignore", func() {
		w := newWorld()
		id := w.issue("Keep going")
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) { s.Tracker.OnIssueClosed = agentsv1alpha1.IssueClosedIgnore }).Obj())
		a := w.workingOn("ignoring", id)
		w.closeIssue(id)
		askNow(w.ns)
		Consistently(sessionPhase(w.ns, a.name), 3*time.Second).Should(Equal(agentsv1alpha1.PhaseWorking))
	})

	It("ends a Linear session when its issue is done, through the real controllers and the fake Linear", func() {
		w, lin := newWorld(), startLinear()
		id := lin.AddIssue("ENG", fakelinear.Issue{Title: "Speed up the search", Description: "It is slow"})
		create(linearProject(w, lin, nil).Obj())
		a := w.workingOn("linear", id)
		Expect(a.br).To(Equal("shepherd/eng-1-speed-up-the-search"), "the branch is named from the Linear issue")
		Expect(a.runner.task.Prompt).To(ContainSubstring("Speed up the search"), "the prompt is the Linear issue's")

		lin.SetState(id, "Done", "completed")
		askNow(w.ns)
		a.expect(agentsv1alpha1.PhaseDone)
		Expect(meta.FindStatusCondition(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).
			To(Equal("Issue ENG-1 was closed in the tracker (Done)"))
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonIssueClosed))
		_ = metav1.Now()
	})
})

// workingOn creates a session for issue and plays its agent until the session is Working, on
// the branch the session chose from the issue.
func (w *world) workingOn(name, issue string) *agent {
	GinkgoHelper()
	create(MakeSession(name, w.ns, "widgets").Issue(issue).Obj())
	a := w.backlogAgent(name)
	a.start()
	a.report(agentsv1alpha1.ActivityActive)
	a.expect(agentsv1alpha1.PhaseWorking)
	return a
}

// closeIssue closes a GitHub issue of the world's repository, as a maintainer does.
func (w *world) closeIssue(id string) {
	GinkgoHelper()
	n, err := strconv.Atoi(id)
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.CloseIssue(w.full, n)).To(Succeed())
}

// startLinear serves a fake Linear with the team ENG for the test.
func startLinear() *fakelinear.Server {
	lin := fakelinear.New("lin_api_test")
	lin.Start()
	DeferCleanup(lin.Close)
	lin.AddTeam("ENG", "Engineering")
	return lin
}

// linearProject is the world's Project with its issues in lin (team ENG), and backlog.
func linearProject(w *world, lin *fakelinear.Server, backlog *agentsv1alpha1.BacklogSpec) *ProjectBuilder {
	create(&corev1.Secret{ObjectMeta: objMeta(w.ns, "linear"), StringData: map[string]string{"key": "lin_api_test"}})
	return w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Tracker = &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerLinear, BranchPrefix: "shepherd/", Linear: &agentsv1alpha1.LinearSpec{
			TeamKey: "ENG", APIKeySecretRef: agentsv1alpha1.SecretKeyRef{Name: "linear", Key: "key"}, APIURL: agentsv1alpha1.HTTPURL(lin.URL())}}
		s.Backlog = backlog
	})
}

// wt returns the session's own Worktree, or nil.
func wt(ns, session string) *agentsv1alpha1.Worktree {
	w := &agentsv1alpha1.Worktree{}
	if err := k8sClient.Get(ctx, objKey(ns, session), w); err != nil {
		return nil
	}
	return w
}

var _ = Describe("Linear through the controllers", Serial, func() {
	It("runs the backlog: sessions for the labelled issues, oldest first, the issue labelled as its session goes, and a cancelled issue ends its session", func() {
		// The issues exist before the Project, as a team's backlog does.
		w, lin := newWorld(), startLinear()
		search := lin.AddIssue("ENG", fakelinear.Issue{Title: "Speed up the search", Labels: []string{"agent"}})
		login := lin.AddIssue("ENG", fakelinear.Issue{Title: "Fix the login form", Labels: []string{"agent"}})
		lin.AddIssue("ENG", fakelinear.Issue{Title: "Not for agents"})
		create(linearProject(w, lin, &agentsv1alpha1.BacklogSpec{Labels: []string{"agent"}, MaxConcurrent: 5}).Obj())

		Eventually(backlogSessions(w.ns)).Should(Equal([]string{"widgets-eng-1", "widgets-eng-2"}))
		Eventually(func() []string { return lin.Labels(search) }).Should(ConsistOf("agent:claimed"))
		Eventually(func() []string { return lin.Labels(login) }).Should(ConsistOf("agent:claimed"))
		Expect(fresh(session(w.ns, "widgets-eng-1")).Spec.Issue).To(Equal(search))

		a := w.backlogAgent("widgets-eng-1")
		Expect(a.br).To(Equal("shepherd/eng-1-speed-up-the-search"))
		a.start()
		Expect(a.runner.task.Prompt).To(ContainSubstring("Speed up the search"))
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		Eventually(func() []string { return lin.Labels(search) }).Should(ConsistOf("agent:claimed", "agent:in-progress"))

		By("the issue is cancelled in Linear: its session ends, and its in-progress label goes")
		lin.SetState(search, "Canceled", "canceled")
		askNow(w.ns)
		a.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonIssueClosed))
		Eventually(func() []string { return lin.Labels(search) }).Should(ConsistOf("agent:claimed"))
		Expect(sessionPhase(w.ns, "widgets-eng-2")()).NotTo(Equal(agentsv1alpha1.PhaseDone), "the other issue's session goes on")
	})
})
