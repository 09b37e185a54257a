package controller

import (
	"sort"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// usageStatus is a session's usage from its runner's report. With a model proxy, the proxy's
// count is authoritative: its tokens and requests, and the cost of each model the price table
// knows (a model it does not know keeps its tokens and no cost: never guessed); the CLI's own
// report is kept beside it. Without one, the CLI's report is all there is. Pure.
func usageStatus(u *runnerapi.Usage, prices pricing.Table) *agentsv1alpha1.UsageStatus {
	if u == nil {
		return nil
	}
	if u.Metered == nil {
		return &agentsv1alpha1.UsageStatus{CostUSD: u.CostUSD, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadTokens, Turns: u.Turns, Source: agentsv1alpha1.UsageFromAgent}
	}
	m := u.Metered
	st := &agentsv1alpha1.UsageStatus{
		Source: agentsv1alpha1.UsageFromProxy, Turns: u.Turns, PriceTable: prices.Date,
		Requests: m.Requests, InputTokens: m.InputTokens, OutputTokens: m.OutputTokens,
		CacheReadTokens: m.CacheReadTokens, CacheWriteTokens: m.CacheWriteTokens, Unmetered: m.Unmetered,
	}
	if u.CostUSD != "" || u.InputTokens != 0 || u.OutputTokens != 0 || u.CacheReadTokens != 0 {
		st.Agent = &agentsv1alpha1.AgentUsageStatus{CostUSD: u.CostUSD, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens}
	}
	names := make([]string, 0, len(m.ByModel))
	for n := range m.ByModel {
		names = append(names, n)
	}
	sort.Strings(names)
	total, priced := 0.0, false
	for i, n := range names {
		if i == 33 {
			break // the proxy keeps 32 names and "other"; a status holds no more
		}
		x := m.ByModel[n]
		ms := agentsv1alpha1.ModelUsageStatus{Model: n, Requests: x.Requests, InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
			CacheReadTokens: x.CacheReadTokens, CacheWriteTokens: x.CacheWriteTokens}
		if p, ok := prices.Lookup(n); ok {
			c := p.Cost(pricing.Tokens{Input: x.InputTokens, Output: x.OutputTokens, CacheRead: x.CacheReadTokens, CacheWrite: x.CacheWriteTokens})
			total, priced = total+c, true
			ms.CostUSD = pricing.Format(c)
		}
		st.Models = append(st.Models, ms)
	}
	// No priced model: the cost is unknown, not zero (CostKnown says which models lack a price).
	if priced {
		st.CostUSD = pricing.Format(total)
	}
	return st
}

// taskUsage is what a new pod's runner continues from: the CLI's totals (its own report) and
// the proxy's count. Inverse of usageStatus. Pure.
func taskUsage(st *agentsv1alpha1.UsageStatus) runnerapi.Usage {
	if st == nil {
		return runnerapi.Usage{}
	}
	if st.Source != agentsv1alpha1.UsageFromProxy {
		return runnerapi.Usage{CostUSD: st.CostUSD, InputTokens: st.InputTokens, OutputTokens: st.OutputTokens, CacheReadTokens: st.CacheReadTokens, Turns: st.Turns}
	}
	u := runnerapi.Usage{Turns: st.Turns, Metered: &runnerapi.Metered{Requests: st.Requests, InputTokens: st.InputTokens, OutputTokens: st.OutputTokens,
		CacheReadTokens: st.CacheReadTokens, CacheWriteTokens: st.CacheWriteTokens, Unmetered: st.Unmetered}}
	if a := st.Agent; a != nil {
		u.CostUSD, u.InputTokens, u.OutputTokens, u.CacheReadTokens = a.CostUSD, a.InputTokens, a.OutputTokens, a.CacheReadTokens
	}
	for _, x := range st.Models {
		if u.Metered.ByModel == nil {
			u.Metered.ByModel = map[string]runnerapi.MeteredModel{}
		}
		u.Metered.ByModel[x.Model] = runnerapi.MeteredModel{Requests: x.Requests, InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
			CacheReadTokens: x.CacheReadTokens, CacheWriteTokens: x.CacheWriteTokens}
	}
	return u
}
