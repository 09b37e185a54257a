package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
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

// TestWindows: a metered session's spend lands in the day and month of the decision, in the
// budget's zone; the next day starts afresh and the month goes on.
func TestWindows(t *testing.T) {
	g := NewWithT(t)
	u := func(cost string, tokens int64) *agentsv1alpha1.UsageStatus {
		return &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, CostUSD: cost, InputTokens: tokens}
	}
	day1 := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	a := withWindows(u("1", 100), nil, day1, nil)
	g.Expect(a.Day).To(gstruct.PointTo(Equal(agentsv1alpha1.SpendWindow{Start: "2026-12-06", CostUSD: "1", Tokens: 100})))
	b := withWindows(u("1.5", 150), a, day1.Add(time.Hour), nil)
	g.Expect(b.Day).To(gstruct.PointTo(Equal(agentsv1alpha1.SpendWindow{Start: "2026-12-06", CostUSD: "1.5", Tokens: 150})))
	c := withWindows(u("2.25", 200), b, day1.Add(3*time.Hour), nil) // 01:00 on the 7th
	g.Expect(c.Day).To(gstruct.PointTo(Equal(agentsv1alpha1.SpendWindow{Start: "2026-12-07", CostUSD: "0.75", Tokens: 50})))
	g.Expect(c.Month).To(gstruct.PointTo(Equal(agentsv1alpha1.SpendWindow{Start: "2026-12", CostUSD: "2.25", Tokens: 200})))
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	g.Expect(withWindows(u("1", 1), nil, day1, tokyo).Day.Start).To(Equal("2026-12-07"), "22:00 UTC is the next morning in Tokyo")
	g.Expect(withWindows(u("0.5", 1), c, day1.Add(4*time.Hour), nil).Day.CostUSD).To(Equal("0.75"), "a count that went down adds nothing")
	g.Expect(withWindows(&agentsv1alpha1.UsageStatus{CostUSD: "3"}, nil, day1, nil).Day).To(BeNil(), "an agent's own report has no windows")
}

// TestWindowsByModel: each model's increase lands in the window too.
func TestWindowsByModel(t *testing.T) {
	g := NewWithT(t)
	day := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	u := func(models ...agentsv1alpha1.ModelUsageStatus) *agentsv1alpha1.UsageStatus {
		return &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy, Models: models}
	}
	a := withWindows(u(agentsv1alpha1.ModelUsageStatus{Model: "claude-sonnet-4-5", InputTokens: 100, CostUSD: "1"}), nil, day, nil)
	b := withWindows(u(agentsv1alpha1.ModelUsageStatus{Model: "claude-sonnet-4-5", InputTokens: 150, CostUSD: "1.5"},
		agentsv1alpha1.ModelUsageStatus{Model: "my-llama", OutputTokens: 7}), a, day.Add(time.Hour), nil)
	g.Expect(b.Day.ByModel).To(Equal([]agentsv1alpha1.ModelSpend{
		{Model: "claude-sonnet-4-5", CostUSD: "1.5", Tokens: 150}, {Model: "my-llama", CostUSD: "0", Tokens: 7}}))
	next := withWindows(u(agentsv1alpha1.ModelUsageStatus{Model: "claude-sonnet-4-5", InputTokens: 170, CostUSD: "1.7"},
		agentsv1alpha1.ModelUsageStatus{Model: "my-llama", OutputTokens: 7}), b, day.Add(24*time.Hour), nil)
	g.Expect(next.Day.ByModel).To(Equal([]agentsv1alpha1.ModelSpend{{Model: "claude-sonnet-4-5", CostUSD: "0.2", Tokens: 20}}), "a new day")
	g.Expect(next.Month.ByModel).To(HaveLen(2), "the month goes on")
}
