package controller_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// bestOf makes the AgentTask "fix" of w with three attempts and the given selection.
func bestOf(w *world, sel *agentsv1alpha1.SelectionSpec, maxCost string) *agentsv1alpha1.AgentTask {
	GinkgoHelper()
	t := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: w.ns}, Spec: agentsv1alpha1.AgentTaskSpec{
		ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "widgets"}, Prompt: "Fix the widget", Attempts: ptr.To(int32(3)),
		Selection: sel, MaxCostUSD: maxCost,
	}}
	create(t)
	return t
}

func taskStatus(ns string) func() agentsv1alpha1.AgentTaskStatus {
	return func() agentsv1alpha1.AgentTaskStatus {
		t := &agentsv1alpha1.AgentTask{}
		_ = k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "fix"}, t)
		return t.Status
	}
}

// attempts starts the three attempts' agents: each one's pod runs and its runner reports.
func attempts(w *world) []*agent {
	GinkgoHelper()
	out := make([]*agent, 3)
	for i := range out {
		out[i] = w.agent(fmt.Sprintf("fix-%d", i+1))
		out[i].start()
		out[i].report(agentsv1alpha1.ActivityActive)
	}
	return out
}

// bigPR pushes a large change and opens the pull request.
func (a *agent) bigPR() {
	GinkgoHelper()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "// line %d\n", i)
	}
	sha, err := gh.Push(a.w.full, a.branch(), map[string]string{"big.go": "package main\n" + b.String()}, "A large change")
	Expect(err).NotTo(HaveOccurred())
	a.head = sha
	pr, err := a.runner.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: a.branch(), Base: "main", Head: sha, Title: "Work on " + a.name, Body: "Done"})
	Expect(err).NotTo(HaveOccurred())
	a.pr = int(pr.Number)
}

// getSession reads a session (waiting for the cache-less client to see it).
func getSession(ns, name string) *agentsv1alpha1.AgentSession {
	GinkgoHelper()
	s := session(ns, name)
	Eventually(func() error { return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s) }).Should(Succeed())
	return s
}

func prInfo(w *world, n int) fakegithub.PullRequestInfo {
	GinkgoHelper()
	info, err := gh.PullRequest(w.full, n)
	Expect(err).NotTo(HaveOccurred())
	return info
}

// expectChosen checks the pick's effects: the chosen draft is ready for review, the others'
// pull requests closed with one comment linking it, their sessions Done/Superseded and their
// Worktrees released.
func expectChosen(w *world, atts []*agent, chosen int) {
	GinkgoHelper()
	Eventually(taskStatus(w.ns)).Should(And(HaveField("Chosen", atts[chosen].name), HaveField("Phase", agentsv1alpha1.TaskChosen)))
	st := taskStatus(w.ns)()
	Expect(st.PullRequest).NotTo(BeNil())
	Expect(st.PullRequest.Number).To(Equal(int64(atts[chosen].pr)))
	Eventually(func() bool { return prInfo(w, atts[chosen].pr).Draft }).Should(BeFalse(), "the chosen draft goes up for review")
	for i, a := range atts {
		if i == chosen {
			continue
		}
		Eventually(func() string { return prInfo(w, a.pr).State }).Should(Equal("closed"), "%s's pull request is closed", a.name)
		Expect(prInfo(w, a.pr).Comments).To(ConsistOf(And(ContainSubstring(atts[chosen].name), ContainSubstring(st.PullRequest.URL))), "one comment, linking the chosen pull request")
		Eventually(sessionStatus(w.ns, a.name)).Should(And(HavePhase(agentsv1alpha1.PhaseDone),
			HaveField("Conditions", ContainElement(And(HaveField("Type", agentsv1alpha1.ConditionReady), HaveField("Reason", agentsv1alpha1.ReasonSuperseded))))))
		Eventually(func() agentsv1alpha1.WorktreeState {
			wt := &agentsv1alpha1.Worktree{}
			_ = k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: a.name}, wt)
			return wt.Spec.State
		}).Should(Equal(agentsv1alpha1.WorktreeAbsent), "%s's Worktree is released (its branch stays)", a.name)
	}
}

var _ = Describe("Best of N (AgentTask)", func() {
	// One whose CI fails, one green and small, one green and large (green first).
	run := func(policy agentsv1alpha1.SelectionPolicy) (*world, []*agent) {
		w := newWorld()
		create(w.project().Obj())
		bestOf(w, &agentsv1alpha1.SelectionSpec{Policy: policy}, "")
		Eventually(taskStatus(w.ns)).Should(HaveField("Progress", "3/3"))
		atts := attempts(w)
		for _, a := range atts {
			s := getSession(w.ns, a.name)
			Expect(s.Labels).To(HaveKeyWithValue(agentsv1alpha1.LabelTask, "fix"))
			Expect(s.Spec.PullRequest.Draft).To(Equal(ptr.To(true)))
		}
		atts[0].openPR()
		atts[1].openPR()
		atts[2].bigPR()
		for _, a := range atts {
			Expect(prInfo(w, a.pr).Draft).To(BeTrue(), "attempts open drafts")
			Eventually(func() int64 {
				if pr := a.status().PullRequest; pr != nil {
					return pr.Number
				}
				return 0
			}).Should(Equal(int64(a.pr)))
		}
		atts[0].check("failure")
		atts[2].check("success")
		Eventually(sessionStatus(w.ns, atts[2].name)).Should(HaveField("PullRequest.Checks", agentsv1alpha1.ChecksPassing))
		return w, atts
	}

	It("FirstGreen chooses the first attempt whose checks pass, once, across a manager restart", func() {
		w, atts := run(agentsv1alpha1.SelectFirstGreen)
		expectChosen(w, atts, 2)
		Expect(taskStatus(w.ns)().ChosenBy).To(ContainSubstring("FirstGreen"))

		By("a restart after the pick changes nothing: no second close, comment or choice")
		mgr.stop()
		mgr.start()
		atts[1].check("success") // a later green attempt does not take it over
		Consistently(taskStatus(w.ns), "3s").Should(HaveField("Chosen", atts[2].name))
		for _, a := range atts[:2] {
			Expect(prInfo(w, a.pr).Comments).To(HaveLen(1), "%s: closed once", a.name)
		}

		By("the chosen pull request merges: the task is Merged")
		_, err := gh.Merge(w.full, atts[2].pr, "squash")
		Expect(err).NotTo(HaveOccurred())
		Eventually(taskStatus(w.ns)).Should(And(HaveField("Phase", agentsv1alpha1.TaskMerged),
			HaveField("PullRequest.State", agentsv1alpha1.PullRequestMerged)))
	})

	It("Score waits for every attempt to settle, then chooses the green and small one", func() {
		w, atts := run(agentsv1alpha1.SelectScore)
		Consistently(taskStatus(w.ns), "2s").Should(HaveField("Chosen", ""), "fix-2's checks have not run")
		atts[1].check("success")
		expectChosen(w, atts, 1)
		st := taskStatus(w.ns)()
		Expect(st.ChosenBy).To(ContainSubstring("Score"))
		Expect(st.Attempts).To(HaveLen(3))
		for _, a := range st.Attempts {
			Expect(a.Score).NotTo(BeEmpty(), "%s has a score", a.Name)
			Expect(a.ChangedLines).To(BeNumerically(">", 0), "%s: changed lines from the forge", a.Name)
		}
	})

	It("Human waits for a pick, and follows it", func() {
		w, atts := run(agentsv1alpha1.SelectHuman)
		atts[1].check("success")
		Eventually(taskStatus(w.ns)).Should(And(HaveField("Phase", agentsv1alpha1.TaskWaitingForPick), HaveField("Leader", atts[1].name)))
		Consistently(taskStatus(w.ns), "2s").Should(HaveField("Chosen", ""))
		update(&agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "fix"}}, func(t *agentsv1alpha1.AgentTask) {
			t.Spec.Selection.Pick = atts[0].name
		})
		expectChosen(w, atts, 0)
		Expect(taskStatus(w.ns)().ChosenBy).To(ContainSubstring("picked by a person"))
	})
})

var _ = Describe("An AgentTask applied before its Project", func() {
	It("waits for it, never Failed, and starts its attempts when it comes", func() {
		w := newWorld()
		bestOf(w, nil, "")
		Eventually(taskStatus(w.ns)).Should(HaveField("Conditions", ContainElement(And(
			HaveField("Type", agentsv1alpha1.ConditionStalled), HaveField("Reason", agentsv1alpha1.ReasonProjectNotFound)))))
		Expect(taskStatus(w.ns)().Phase).To(BeEmpty(), "nothing has failed: the Project is not there yet")
		create(w.project().Obj())
		for i := 1; i <= 3; i++ {
			getSession(w.ns, fmt.Sprintf("fix-%d", i))
		}
		Eventually(taskStatus(w.ns)).Should(And(HaveField("Phase", agentsv1alpha1.TaskRunning),
			HaveField("Conditions", Not(ContainElement(And(HaveField("Type", agentsv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionTrue)))))))
		var events corev1.EventList
		Expect(k8sClient.List(ctx, &events, client.InNamespace(w.ns))).To(Succeed())
		for _, e := range events.Items {
			Expect(e.Reason).NotTo(Equal(agentsv1alpha1.ReasonPhaseFailed), "%s: %s", e.InvolvedObject.Name, e.Message)
		}
	})
})

var _ = Describe("An AgentTask's cost cap", func() {
	It("stops the attempts still at work when their cost together reaches it", func() {
		w := newWorld()
		create(w.project().Obj())
		task := bestOf(w, nil, "1")
		for i := 1; i <= 3; i++ {
			Expect(getSession(w.ns, fmt.Sprintf("fix-%d", i)).Spec.Limits.MaxCostUSD).To(Equal("1"), "each attempt is held to the cap alone too")
		}
		atts := attempts(w)
		// Two attempts spend $0.60 each (metered): $1.20 together.
		m := runnerapi.Metered{Requests: 1, InputTokens: 200_000, ByModel: map[string]runnerapi.MeteredModel{"claude-sonnet-4-5-20250929": {Requests: 1, InputTokens: 200_000}}}
		for _, a := range atts[:2] {
			a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{CostUSD: "0.6", InputTokens: 200_000, Turns: 1}))
		}
		Eventually(taskStatus(w.ns)).Should(And(HaveField("CostUSD", "1.2"), HaveField("Phase", agentsv1alpha1.TaskFailed)))
		Expect(findCond(taskStatus(w.ns)().Conditions, agentsv1alpha1.ConditionReady).Reason).To(Equal(agentsv1alpha1.ReasonBudgetExhausted))
		for _, a := range atts {
			Eventually(func() agentsv1alpha1.SessionState { return getSession(w.ns, a.name).Spec.State }).Should(Equal(agentsv1alpha1.SessionStopped), "%s stopped", a.name)
		}
		_ = task
	})
})
