package lifecycle

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// TestCostKnown: a metered session's cost is known when every model it used has a price; a
// model without one is named with its tokens, never guessed; an agent's own report says nothing.
func TestCostKnown(t *testing.T) {
	g := NewWithT(t)
	metered := func(models ...agentsv1alpha1.ModelUsageStatus) *agentsv1alpha1.UsageStatus {
		return &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, PriceTable: "2026-12-01", Models: models, CostUSD: "0.3"}
	}
	priced := agentsv1alpha1.ModelUsageStatus{Model: "claude-sonnet-4-5", InputTokens: 100000, CostUSD: "0.3"}
	unpriced := agentsv1alpha1.ModelUsageStatus{Model: "my-llama", InputTokens: 1000, OutputTokens: 200}
	for _, c := range []struct {
		name   string
		usage  *agentsv1alpha1.UsageStatus
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"every model priced", metered(priced), metav1.ConditionTrue, agentsv1alpha1.ReasonPriced, "2026-12-01"},
		{"a model without a price", metered(priced, unpriced), metav1.ConditionFalse, agentsv1alpha1.ReasonPriceUnknown, "my-llama (1200 tokens)"},
		{"an unpriced model that used nothing", metered(priced, agentsv1alpha1.ModelUsageStatus{Model: "unknown"}), metav1.ConditionTrue, agentsv1alpha1.ReasonPriced, ""},
		{"the agent's own report", &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromAgent, CostUSD: "1"}, "", "", ""},
	} {
		in := running()
		in.Runner.Usage = c.usage
		d := Decide(in)
		cond := meta.FindStatusCondition(d.Conditions, agentsv1alpha1.ConditionCostKnown)
		if c.status == "" {
			g.Expect(cond).To(BeNil(), c.name)
			continue
		}
		g.Expect(cond).NotTo(BeNil(), c.name)
		g.Expect(cond.Status).To(Equal(c.status), c.name)
		g.Expect(cond.Reason).To(Equal(c.reason), c.name)
		g.Expect(cond.Message).To(ContainSubstring(c.msg), c.name)
	}
}

func TestUsageConsistent(t *testing.T) {
	g := NewWithT(t)
	for _, c := range []struct {
		cli, proxy int64
		want       metav1.ConditionStatus
	}{
		{100_000, 100_000, metav1.ConditionTrue},
		{104_000, 100_000, metav1.ConditionTrue},
		{200_000, 100_000, metav1.ConditionFalse}, // a resumed conversation's totals counted twice
		{50, 120, metav1.ConditionTrue},           // small counts: within 100 tokens
		{0, 5000, metav1.ConditionFalse},          // the CLI reported nothing the proxy saw
	} {
		in := running()
		in.Runner.Usage = &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, OutputTokens: c.proxy,
			Agent: &agentsv1alpha1.AgentUsageStatus{OutputTokens: c.cli}}
		cond := meta.FindStatusCondition(Decide(in).Conditions, agentsv1alpha1.ConditionUsageConsistent)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(c.want), "cli %d proxy %d", c.cli, c.proxy)
	}
}
