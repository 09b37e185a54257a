package lifecycle

import (
	"slices"
	"sort"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/pricing"
)

// DayKey and MonthKey name the calendar day ("2026-12-06") and month ("2026-12") of t in loc
// (nil is UTC): the spend windows.
func DayKey(t time.Time, loc *time.Location) string   { return inZone(t, loc).Format("2006-01-02") }
func MonthKey(t time.Time, loc *time.Location) string { return inZone(t, loc).Format("2006-01") }

func inZone(t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc)
}

// withWindows adds to next (a metered usage) what it spent in the current day and month: the
// increase over prev's totals lands in the window of now. A window of prev that is not the
// current one is left behind. Only metered usage has windows: it is what budgets count. Pure.
func withWindows(next, prev *agentsv1alpha1.UsageStatus, now time.Time, loc *time.Location) *agentsv1alpha1.UsageStatus {
	if next == nil || next.Source != agentsv1alpha1.UsageFromProxy {
		return next
	}
	var p agentsv1alpha1.UsageStatus
	if prev != nil && prev.Source == agentsv1alpha1.UsageFromProxy {
		p = *prev
	}
	dCost := max(0, pricing.ParseUSD(next.CostUSD)-pricing.ParseUSD(p.CostUSD))
	dTokens := max(0, totalTokens(next)-totalTokens(&p))
	// Each model's increase too, so that the Project can say what each model cost.
	prevModels := map[string]agentsv1alpha1.ModelUsageStatus{}
	for _, m := range p.Models {
		prevModels[m.Model] = m
	}
	var dModels []agentsv1alpha1.ModelSpend
	for _, m := range next.Models {
		pm := prevModels[m.Model]
		c := max(0, pricing.ParseUSD(m.CostUSD)-pricing.ParseUSD(pm.CostUSD))
		t := max(0, modelTokens(m)-modelTokens(pm))
		if c > 0 || t > 0 {
			dModels = append(dModels, agentsv1alpha1.ModelSpend{Model: m.Model, CostUSD: pricing.Format(c), Tokens: t})
		}
	}
	next.Day = addToWindow(p.Day, DayKey(now, loc), dCost, dTokens, dModels)
	next.Month = addToWindow(p.Month, MonthKey(now, loc), dCost, dTokens, dModels)
	return next
}

// maxWindowModels bounds a window's split by model (the proxy keeps 32 names and "other").
const maxWindowModels = 33

func addToWindow(w *agentsv1alpha1.SpendWindow, key string, cost float64, tokens int64, models []agentsv1alpha1.ModelSpend) *agentsv1alpha1.SpendWindow {
	out := agentsv1alpha1.SpendWindow{Start: key}
	if w != nil && w.Start == key {
		out.CostUSD, out.Tokens = w.CostUSD, w.Tokens
		out.ByModel = append([]agentsv1alpha1.ModelSpend(nil), w.ByModel...)
	}
	out.CostUSD = pricing.Format(pricing.ParseUSD(out.CostUSD) + cost)
	out.Tokens += tokens
	for _, d := range models {
		i := slices.IndexFunc(out.ByModel, func(m agentsv1alpha1.ModelSpend) bool { return m.Model == d.Model })
		if i < 0 {
			if len(out.ByModel) >= maxWindowModels {
				continue
			}
			out.ByModel = append(out.ByModel, agentsv1alpha1.ModelSpend{Model: d.Model, CostUSD: "0"})
			i = len(out.ByModel) - 1
		}
		out.ByModel[i].CostUSD = pricing.Format(pricing.ParseUSD(out.ByModel[i].CostUSD) + pricing.ParseUSD(d.CostUSD))
		out.ByModel[i].Tokens += d.Tokens
	}
	sort.Slice(out.ByModel, func(i, j int) bool { return out.ByModel[i].Model < out.ByModel[j].Model })
	return &out
}

func modelTokens(m agentsv1alpha1.ModelUsageStatus) int64 {
	return m.InputTokens + m.OutputTokens + m.CacheReadTokens + m.CacheWriteTokens
}

func totalTokens(u *agentsv1alpha1.UsageStatus) int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}
