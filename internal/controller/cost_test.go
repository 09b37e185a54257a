package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// metered is a report of the model proxy's totals beside the CLI's own.
func metered(m runnerapi.Metered, cli runnerapi.Usage) func(*runnerapi.Report) {
	return func(r *runnerapi.Report) {
		u := cli
		u.Metered = &m
		r.Usage = &u
	}
}

var _ = Describe("Cost accounting", Serial, func() {
	It("keeps the model proxy's count per model with its cost, the CLI's beside it, across a manager restart and into a new pod's task", func() {
		w := newWorld()
		create(shortActivity(w.project()).Obj()) // a short grace: the lost pod is replaced soon
		a := w.agent("cost")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Add the feature").Obj())
		a.start()
		Expect(a.runner.task.Usage.Metered).To(BeNil(), "a first pod carries nothing over")

		m := runnerapi.Metered{Requests: 4, InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 2_000_000, CacheWriteTokens: 10_000,
			ByModel: map[string]runnerapi.MeteredModel{
				"claude-sonnet-4-5-20250929": {Requests: 3, InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 2_000_000, CacheWriteTokens: 10_000},
				"my-llama":                   {Requests: 1},
			}}
		a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{CostUSD: "5.2", InputTokens: 990_000, OutputTokens: 100_000, Turns: 1}))
		// Sonnet 4.5 at $3/$15/$0.30/$3.75 per million: 3 + 1.5 + 0.6 + 0.0375.
		want := pricing.Format(5.1375)
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Usage", And(
			HaveField("Source", agentsv1alpha1.UsageFromProxy), HaveField("CostUSD", want), HaveField("Requests", int64(4)),
			HaveField("InputTokens", int64(1_000_000)), HaveField("CacheWriteTokens", int64(10_000)), HaveField("Turns", int32(1)),
			HaveField("PriceTable", pricing.Defaults().Date),
			HaveField("Agent", gstruct.PointTo(And(HaveField("CostUSD", "5.2"), HaveField("InputTokens", int64(990_000))))),
			HaveField("Models", ConsistOf(
				And(HaveField("Model", "claude-sonnet-4-5-20250929"), HaveField("CostUSD", want), HaveField("Requests", int64(3))),
				And(HaveField("Model", "my-llama"), HaveField("CostUSD", ""), HaveField("Requests", int64(1))),
			)),
		)))
		Expect(a.status().Conditions).To(HaveCondition(agentsv1alpha1.ConditionCostKnown, metav1.ConditionTrue, agentsv1alpha1.ReasonPriced),
			"a model that used no tokens costs nothing")

		By("a model without a price is counted in tokens and named, never guessed")
		m.ByModel["my-llama"] = runnerapi.MeteredModel{Requests: 2, InputTokens: 1000, OutputTokens: 200}
		m.Requests, m.InputTokens, m.OutputTokens = 5, 1_001_000, 100_200
		a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{CostUSD: "5.2", Turns: 2}))
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Conditions",
			HaveCondition(agentsv1alpha1.ConditionCostKnown, metav1.ConditionFalse, agentsv1alpha1.ReasonPriceUnknown)))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionCostKnown).Message).To(ContainSubstring("my-llama (1200 tokens)"))
		Expect(a.status().Usage.CostUSD).To(Equal(want), "the priced models' cost alone")

		By("a manager restart keeps the totals exactly")
		before := *a.status().Usage
		restartManager(a, "after the restart")
		Consistently(func() agentsv1alpha1.UsageStatus { return *a.status().Usage }, "2s").Should(Equal(before))

		By("a new pod's runner continues from them: its task carries the proxy's count and the CLI's")
		old := a.pod()
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func() types.UID {
			p := &corev1.Pod{}
			_ = k8sClient.Get(ctx, client.ObjectKeyFromObject(old), p)
			return p.UID
		}).WithTimeout(time.Minute).Should(And(Not(BeEmpty()), Not(Equal(old.UID))))
		a.start()
		t := a.runner.task.Usage
		Expect(t.Metered).NotTo(BeNil())
		Expect(*t.Metered).To(Equal(m), "exactly what was reported, per model")
		Expect(t.CostUSD).To(Equal("5.2"))
		Expect(t.Turns).To(Equal(int32(2)))
	})
})

// otherDayZone is a time zone whose date differs from UTC's now: a Project switched to it is in
// another day, as it would be after midnight (UTC+14 from 10:00 UTC, UTC-12 before noon).
func otherDayZone() string {
	now := time.Now().UTC()
	for _, z := range []string{"Etc/GMT-14", "Etc/GMT+12"} {
		loc, err := time.LoadLocation(z)
		Expect(err).NotTo(HaveOccurred())
		if now.In(loc).Format("2006-01-02") != now.Format("2006-01-02") {
			return z
		}
	}
	Fail("no zone in another day")
	return ""
}

var _ = Describe("A session's maxCostUSD", func() {
	It("ends the session once the proxy metered that much, after the turn", func() {
		w := newWorld()
		create(w.project().Obj())
		a := w.agent("capped")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Spend").With(func(s *agentsv1alpha1.AgentSessionSpec) {
			s.Limits = &agentsv1alpha1.SessionLimits{MaxCostUSD: "1"}
		}).Obj())
		a.start()
		m := runnerapi.Metered{Requests: 1, InputTokens: 1_000_000, ByModel: map[string]runnerapi.MeteredModel{"claude-sonnet-4-5": {Requests: 1, InputTokens: 1_000_000}}}
		a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{}))
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Usage.CostUSD", "3"))
		Consistently(sessionPhase(w.ns, a.name), "1s").Should(Equal(agentsv1alpha1.PhaseWorking), "mid-turn")
		a.report(agentsv1alpha1.ActivityReady, metered(m, runnerapi.Usage{Turns: 1}))
		a.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonMaxCostReached))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("spent $3, its maxCostUSD of $1"))
	})
})

var _ = Describe("Runaway limits", func() {
	It("end a session whose agent fails the same call again and again, mid-turn, and one whose turns change nothing", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Limits = &agentsv1alpha1.LimitsSpec{SessionLimits: agentsv1alpha1.SessionLimits{MaxRepeatedFailures: ptrTo(int32(3)), MaxUnchangedTurns: ptrTo(int32(2))}}
		}).Obj())
		a := w.agent("looping")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Fix it").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Loop = &runnerapi.LoopReport{RepeatedFailures: 2, FailingCall: "Bash: go test ./..."}
		})
		a.expect(agentsv1alpha1.PhaseWorking)
		a.report(agentsv1alpha1.ActivityActive, func(r *runnerapi.Report) {
			r.Loop = &runnerapi.LoopReport{RepeatedFailures: 3, FailingCall: "Bash: go test ./..."}
		})
		a.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, a.name)()).To(Equal(agentsv1alpha1.ReasonLoopDetected))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("failed 3 times in a row (maxRepeatedFailures 3): Bash: go test ./..."))
		Eventually(podExists(w.ns, a.podName())).Should(BeFalse(), "the runaway agent is stopped")

		b := w.agent("idle-loop")
		create(MakeSession(b.name, w.ns, "widgets").Prompt("Think").Obj())
		b.start()
		b.report(agentsv1alpha1.ActivityReady, func(r *runnerapi.Report) { r.Loop = &runnerapi.LoopReport{UnchangedTurns: 1} })
		b.expect(agentsv1alpha1.PhaseWorking)
		b.report(agentsv1alpha1.ActivityReady, func(r *runnerapi.Report) { r.Loop = &runnerapi.LoopReport{UnchangedTurns: 2} })
		b.expect(agentsv1alpha1.PhaseDone)
		Expect(readyReason(w.ns, b.name)()).To(Equal(agentsv1alpha1.ReasonLoopDetected))
	})
})

var _ = Describe("A daily budget", Serial, func() {
	It("queues new sessions at the cap, lets a running agent finish its turn then waits, and resumes both in the next day", func() {
		w := newWorld()
		create(shortActivity(w.project()).With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Budget = &agentsv1alpha1.BudgetSpec{DailyUSD: "5"}
		}).Obj())
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(projectStatus(w.ns, "widgets")().Conditions, agentsv1alpha1.ConditionBudgetAvailable)
		}).Should(gstruct.PointTo(HaveField("Status", metav1.ConditionTrue)))
		a := w.agent("spender")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Spend").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
		a.expect(agentsv1alpha1.PhaseWorking)
		firstPod := a.pod()

		By("the agent spends $5.1375 in the middle of its turn: the Project's budget is spent")
		m := runnerapi.Metered{Requests: 3, InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 2_000_000, CacheWriteTokens: 10_000,
			ByModel: map[string]runnerapi.MeteredModel{"claude-sonnet-4-5": {Requests: 3, InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 2_000_000, CacheWriteTokens: 10_000}}}
		a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{Turns: 0}))
		today := time.Now().UTC().Format("2006-01-02")
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Usage.Day", gstruct.PointTo(And(HaveField("Start", today), HaveField("CostUSD", "5.1375")))))
		Eventually(func() *agentsv1alpha1.SpendStatus { return projectStatus(w.ns, "widgets")().Spend }).Should(gstruct.PointTo(And(
			HaveField("Day.Start", today), HaveField("Day.CostUSD", "5.1375"),
			HaveField("Day.ByAgent", ConsistOf(And(HaveField("Agent", "claude-code"), HaveField("CostUSD", "5.1375")))),
			HaveField("Day.ByModel", ConsistOf(agentsv1alpha1.ModelSpend{Model: "claude-sonnet-4-5", CostUSD: "5.1375", Tokens: 3_110_000})),
			HaveField("Month.CostUSD", "5.1375"))))
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(projectStatus(w.ns, "widgets")().Conditions, agentsv1alpha1.ConditionBudgetAvailable)
		}).Should(gstruct.PointTo(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", agentsv1alpha1.ReasonBudgetExhausted),
			HaveField("Message", ContainSubstring("the daily budget of $5 is spent ($5.1375 on "+today+")")))))
		Consistently(sessionPhase(w.ns, a.name), "2s").Should(Equal(agentsv1alpha1.PhaseWorking), "a turn is never cut")
		Expect(projectEvents(w.ns, "widgets", agentsv1alpha1.ReasonBudgetThreshold)).To(ConsistOf(
			ContainSubstring("Project budget at 80%: $5.1375 of the daily budget of $5 spent")), "the threshold is said once a window")

		By("a new session waits, without a pod")
		b := w.agent("later")
		create(MakeSession(b.name, w.ns, "widgets").Prompt("Wait for it").Obj())
		Eventually(readyReason(w.ns, b.name)).Should(Equal(agentsv1alpha1.ReasonBudgetExhausted))
		Expect(sessionPhase(w.ns, b.name)()).To(Equal(agentsv1alpha1.PhaseQueued))
		Consistently(podExists(w.ns, b.podName()), "2s").Should(BeFalse())

		By("the running agent ends its turn: it waits too, its pod goes, its conversation stays")
		a.report(agentsv1alpha1.ActivityReady, metered(m, runnerapi.Usage{Turns: 1}))
		Eventually(readyReason(w.ns, a.name)).Should(Equal(agentsv1alpha1.ReasonBudgetExhausted))
		Expect(sessionPhase(w.ns, a.name)()).To(Equal(agentsv1alpha1.PhaseQueued))
		Expect(findCond(a.status().Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("resumes at"))
		Eventually(func() types.UID {
			p := &corev1.Pod{}
			_ = k8sClient.Get(ctx, client.ObjectKeyFromObject(firstPod), p)
			return p.UID
		}).ShouldNot(Equal(firstPod.UID))

		By("the next day (the Project's zone moved past midnight): both resume on their own")
		update(projectObj(w.ns, "widgets"), func(p *agentsv1alpha1.Project) { p.Spec.Budget.TimeZone = otherDayZone() })
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(projectStatus(w.ns, "widgets")().Conditions, agentsv1alpha1.ConditionBudgetAvailable)
		}).Should(gstruct.PointTo(HaveField("Status", metav1.ConditionTrue)))
		Eventually(podExists(w.ns, b.podName())).Should(BeTrue())
		Eventually(podExists(w.ns, a.podName())).Should(BeTrue())
		a.start()
		Expect(a.runner.task.Usage.Metered).NotTo(BeNil())
		Expect(a.runner.task.Usage.Metered.Requests).To(Equal(int64(3)), "the conversation's usage carries on")
		a.report(agentsv1alpha1.ActivityActive, metered(m, runnerapi.Usage{Turns: 1}))
		a.expect(agentsv1alpha1.PhaseWorking)
	})
})

func projectObj(ns, name string) *agentsv1alpha1.Project {
	return &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// projectStatus returns a function that reads a Project's status, for Eventually.
func projectStatus(ns, name string) func() agentsv1alpha1.ProjectStatus {
	return func() agentsv1alpha1.ProjectStatus {
		p := projectObj(ns, name)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return agentsv1alpha1.ProjectStatus{}
		}
		return p.Status
	}
}

// projectEvents are the messages of the Events with reason about the Project.
func projectEvents(ns, name, reason string) []string {
	var events corev1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range events.Items {
		if e.Reason == reason && e.InvolvedObject.Kind == "Project" && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}

var _ = Describe("A BudgetPolicy", Serial, func() {
	It("caps two Projects together: the threshold said once, new sessions of both queue, running ones finish their turn, and the next day all resume", func() {
		w := newWorld()
		team := map[string]string{"team": "a"}
		for _, name := range []string{"widgets", "gadgets", "tools"} {
			p := shortActivity(w.project()).Obj()
			p.Name = name
			if name != "tools" {
				p.Labels = team
			}
			create(p)
		}
		create(&agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "team-a"},
			Spec: agentsv1alpha1.BudgetPolicySpec{ProjectSelector: &metav1.LabelSelector{MatchLabels: team},
				Budget: agentsv1alpha1.BudgetSpec{DailyUSD: "5"}}})
		Eventually(policyStatus(w.ns, "team-a")).Should(And(HaveField("ProjectCount", int32(2)),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget)),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded))))
		Eventually(func() []metav1.Condition { return projectStatus(w.ns, "gadgets")().Conditions }).Should(
			HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget),
			"a Project without a budget of its own is held by the policy")

		dollars3 := runnerapi.Metered{Requests: 1, InputTokens: 1_000_000,
			ByModel: map[string]runnerapi.MeteredModel{"claude-sonnet-4-5": {Requests: 1, InputTokens: 1_000_000}}}
		a := w.agent("widget-work")
		create(MakeSession(a.name, w.ns, "widgets").Prompt("Spend").Obj())
		a.start()
		a.report(agentsv1alpha1.ActivityActive, metered(dollars3, runnerapi.Usage{}))
		a.expect(agentsv1alpha1.PhaseWorking)
		firstPod := a.pod()
		Eventually(policyStatus(w.ns, "team-a")).Should(HaveField("Spend.Day.CostUSD", "3"))
		Expect(policyEvents(w.ns, "team-a")).To(BeEmpty(), "$3 of $5 is under 80%")

		By("a session of the other Project spends $3 more: together they are over the cap")
		b := w.agent("gadget-work")
		b.project = "gadgets"
		create(MakeSession(b.name, w.ns, "gadgets").Prompt("Spend too").Obj())
		b.start()
		b.report(agentsv1alpha1.ActivityReady, metered(dollars3, runnerapi.Usage{Turns: 1}))
		today := time.Now().UTC().Format("2006-01-02")
		Eventually(policyStatus(w.ns, "team-a")).Should(And(
			HaveField("Spend.Day.CostUSD", "6"), HaveField("Spend.Day.Start", today),
			HaveField("Spend.Day.ByModel", ConsistOf(agentsv1alpha1.ModelSpend{Model: "claude-sonnet-4-5", CostUSD: "6", Tokens: 2_000_000})),
			HaveField("Projects", ConsistOf(
				And(HaveField("Name", "gadgets"), HaveField("DayCostUSD", "3")),
				And(HaveField("Name", "widgets"), HaveField("DayCostUSD", "3")))),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionFalse, agentsv1alpha1.ReasonBudgetExhausted))))
		Expect(findCond(policyStatus(w.ns, "team-a")().Conditions, agentsv1alpha1.ConditionBudgetAvailable).Message).To(
			ContainSubstring("the daily budget of $5 is spent ($6 on " + today + ")"))
		for _, name := range []string{"widgets", "gadgets"} {
			Eventually(func() []metav1.Condition { return projectStatus(w.ns, name)().Conditions }).Should(
				HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionFalse, agentsv1alpha1.ReasonBudgetExhausted))
			Expect(findCond(projectStatus(w.ns, name)().Conditions, agentsv1alpha1.ConditionBudgetAvailable).Message).To(
				ContainSubstring("BudgetPolicy team-a: the daily budget of $5 is spent"))
		}
		Expect(policyEvents(w.ns, "team-a")).To(ConsistOf(ContainSubstring("BudgetPolicy team-a at 80%: $6 of the daily budget of $5 spent")),
			"the threshold is said once a window")

		By("new sessions of both Projects wait without a pod; a Project the policy does not cover goes on")
		c := w.agent("gadget-later")
		create(MakeSession(c.name, w.ns, "gadgets").Prompt("Wait").Obj())
		Eventually(readyReason(w.ns, c.name)).Should(Equal(agentsv1alpha1.ReasonBudgetExhausted))
		Expect(findCond(c.status().Conditions, agentsv1alpha1.ConditionReady).Message).To(ContainSubstring("BudgetPolicy team-a"))
		Consistently(podExists(w.ns, c.podName()), "2s").Should(BeFalse())
		free := w.agent("tools-work")
		free.project = "tools"
		create(MakeSession(free.name, w.ns, "tools").Prompt("Not covered").Obj())
		Eventually(podExists(w.ns, free.podName())).Should(BeTrue())

		By("the agent mid-turn finishes its turn, then waits too")
		Consistently(sessionPhase(w.ns, a.name), "1s").Should(Equal(agentsv1alpha1.PhaseWorking), "a turn is never cut")
		a.report(agentsv1alpha1.ActivityReady, metered(dollars3, runnerapi.Usage{Turns: 1}))
		Eventually(readyReason(w.ns, a.name)).Should(Equal(agentsv1alpha1.ReasonBudgetExhausted))
		Eventually(func() types.UID {
			p := &corev1.Pod{}
			_ = k8sClient.Get(ctx, client.ObjectKeyFromObject(firstPod), p)
			return p.UID
		}).ShouldNot(Equal(firstPod.UID))

		By("the next day (the policy's zone moved past midnight): the waiting sessions start on their own")
		update(&agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "team-a"}}, func(p *agentsv1alpha1.BudgetPolicy) {
			p.Spec.Budget.TimeZone = otherDayZone()
		})
		Eventually(policyStatus(w.ns, "team-a")).Should(And(HaveField("Spend.Day.CostUSD", "0"),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget))))
		Eventually(podExists(w.ns, c.podName())).Should(BeTrue())
		Eventually(podExists(w.ns, a.podName())).Should(BeTrue())
	})

	It("says what to fix when its selector or time zone does not parse, covering every Project and counting in UTC meanwhile", func() {
		w := newWorld()
		create(w.project().Obj())
		create(&agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "typo"},
			Spec: agentsv1alpha1.BudgetPolicySpec{ProjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "not a label key!", Operator: metav1.LabelSelectorOpExists}}},
				Budget: agentsv1alpha1.BudgetSpec{DailyUSD: "5", TimeZone: "Mars/Olympus"}}})
		Eventually(policyStatus(w.ns, "typo")).Should(And(HaveField("ProjectCount", int32(1)),
			HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonInvalidSpec))))
		Expect(findCond(policyStatus(w.ns, "typo")().Conditions, agentsv1alpha1.ConditionStalled).Message).To(
			ContainSubstring("spec.projectSelector: "), "the selector first")
		update(&agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "typo"}}, func(p *agentsv1alpha1.BudgetPolicy) {
			p.Spec.ProjectSelector = nil
		})
		Eventually(func() string {
			return findCond(policyStatus(w.ns, "typo")().Conditions, agentsv1alpha1.ConditionStalled).Message
		}).Should(And(ContainSubstring(`spec.budget.timeZone "Mars/Olympus" is not an IANA time zone`), ContainSubstring("counts days in UTC until")))
		Eventually(func() []metav1.Condition { return projectStatus(w.ns, "widgets")().Conditions }).Should(
			HaveCondition(agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget))
		Expect(findCond(projectStatus(w.ns, "widgets")().Conditions, agentsv1alpha1.ConditionBudgetAvailable).Message).To(
			ContainSubstring("also held by BudgetPolicy typo"), "the cap still holds, in UTC")
	})
})

// policyStatus returns a function that reads a BudgetPolicy's status, for Eventually.
func policyStatus(ns, name string) func() agentsv1alpha1.BudgetPolicyStatus {
	return func() agentsv1alpha1.BudgetPolicyStatus {
		p := &agentsv1alpha1.BudgetPolicy{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			return agentsv1alpha1.BudgetPolicyStatus{}
		}
		return p.Status
	}
}

// policyEvents are the messages of the BudgetThreshold Events about the BudgetPolicy.
func policyEvents(ns, name string) []string {
	var events corev1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range events.Items {
		if e.Reason == agentsv1alpha1.ReasonBudgetThreshold && e.InvolvedObject.Kind == "BudgetPolicy" && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}
