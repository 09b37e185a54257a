package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
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
			HaveField("Agent", PointTo(And(HaveField("CostUSD", "5.2"), HaveField("InputTokens", int64(990_000))))),
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
