package controller

import (
	"strings"
	"testing"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestBudgetState(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 23:30 in Berlin on 6 December: 22:30 UTC.
	now := time.Date(2026, 12, 6, 22, 30, 0, 0, time.UTC)
	tokens := int64(1000)
	spend := func(day, dayCost, month, monthCost string, dayTokens int64) *agentsv1alpha1.SpendStatus {
		return &agentsv1alpha1.SpendStatus{Day: agentsv1alpha1.SpendWindow{Start: day, CostUSD: dayCost, Tokens: dayTokens},
			Month: agentsv1alpha1.SpendWindow{Start: month, CostUSD: monthCost}}
	}
	for _, c := range []struct {
		name   string
		budget agentsv1alpha1.BudgetSpec
		spend  *agentsv1alpha1.SpendStatus
		loc    *time.Location
		want   string
		reset  time.Time
	}{
		{"under the daily cap", agentsv1alpha1.BudgetSpec{DailyUSD: "50"}, spend("2026-12-06", "49.99", "2026-12", "49.99", 0), berlin, "", time.Time{}},
		{"at the daily cap: resets at midnight in Berlin", agentsv1alpha1.BudgetSpec{DailyUSD: "50"}, spend("2026-12-06", "50", "2026-12", "50", 0), berlin,
			"the daily budget of $50 is spent ($50 on 2026-12-06)", time.Date(2026, 12, 7, 0, 0, 0, 0, berlin)},
		{"yesterday's spend is over", agentsv1alpha1.BudgetSpec{DailyUSD: "50"}, spend("2026-12-05", "80", "2026-12", "80", 0), berlin, "", time.Time{}},
		{"the same instant is already the 6th in UTC... and the 7th nowhere", agentsv1alpha1.BudgetSpec{DailyUSD: "50"}, spend("2026-12-06", "60", "2026-12", "60", 0), time.UTC,
			"daily budget", time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)},
		{"the monthly cap resets at the month's end, later than the day's", agentsv1alpha1.BudgetSpec{DailyUSD: "50", MonthlyUSD: "500"}, spend("2026-12-06", "60", "2026-12", "500", 0), berlin,
			"the monthly budget of $500 is spent ($500 in 2026-12); the daily budget", time.Date(2027, 1, 1, 0, 0, 0, 0, berlin)},
		{"tokens", agentsv1alpha1.BudgetSpec{DailyTokens: &tokens}, spend("2026-12-06", "0", "2026-12", "0", 1000), berlin,
			"the daily budget of 1000 tokens is spent", time.Date(2026, 12, 7, 0, 0, 0, 0, berlin)},
		{"no spend yet", agentsv1alpha1.BudgetSpec{DailyUSD: "1"}, nil, berlin, "", time.Time{}},
	} {
		b := c.budget
		got, reset := budgetState(&b, c.spend, now, c.loc)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) || !reset.Equal(c.reset) {
			t.Errorf("%s: budgetState = %q, %v; want %q, %v", c.name, got, reset, c.want, c.reset)
		}
	}
}

func TestProjectSpend(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	sess := func(agent, day, dayCost, month, monthCost string, tokens int64) agentsv1alpha1.AgentSession {
		var s agentsv1alpha1.AgentSession
		s.Status.Agent.Type = agentsv1alpha1.AgentType(agent)
		s.Status.Usage = &agentsv1alpha1.UsageStatus{Source: agentsv1alpha1.UsageFromProxy,
			Day:   &agentsv1alpha1.SpendWindow{Start: day, CostUSD: dayCost, Tokens: tokens, ByModel: []agentsv1alpha1.ModelSpend{{Model: agent + "-model", CostUSD: dayCost, Tokens: tokens}}},
			Month: &agentsv1alpha1.SpendWindow{Start: month, CostUSD: monthCost, Tokens: tokens, ByModel: []agentsv1alpha1.ModelSpend{{Model: agent + "-model", CostUSD: monthCost, Tokens: tokens}}}}
		return s
	}
	got := projectSpend([]agentsv1alpha1.AgentSession{
		sess("claude-code", "2026-12-06", "1.5", "2026-12", "3", 100),
		sess("codex", "2026-12-06", "0.25", "2026-12", "0.25", 10),
		sess("claude-code", "2026-12-05", "9", "2026-12", "9", 900), // yesterday: this month only
		sess("codex", "2026-11-30", "7", "2026-11", "7", 70),        // last month: nothing
		{},
	}, now, time.UTC)
	if got.Day.Start != "2026-12-06" || got.Day.CostUSD != "1.75" || got.Day.Tokens != 110 {
		t.Errorf("day: %+v", got.Day)
	}
	if got.Month.Start != "2026-12" || got.Month.CostUSD != "12.25" || got.Month.Tokens != 1010 {
		t.Errorf("month: %+v", got.Month)
	}
	if len(got.Day.ByAgent) != 2 || got.Day.ByAgent[0].Agent != "claude-code" || got.Day.ByAgent[0].CostUSD != "1.5" || got.Day.ByAgent[1].CostUSD != "0.25" {
		t.Errorf("by agent: %+v", got.Day.ByAgent)
	}
	if len(got.Month.ByModel) != 2 || got.Month.ByModel[0] != (agentsv1alpha1.ModelSpend{Model: "claude-code-model", CostUSD: "12", Tokens: 1000}) ||
		got.Month.ByModel[1] != (agentsv1alpha1.ModelSpend{Model: "codex-model", CostUSD: "0.25", Tokens: 10}) {
		t.Errorf("by model: %+v", got.Month.ByModel)
	}
}

func TestBudgetNotice(t *testing.T) {
	tokens := int64(1000)
	b := &agentsv1alpha1.BudgetSpec{DailyUSD: "50", MonthlyTokens: &tokens}
	spend := func(day string, cost string, tok int64) *agentsv1alpha1.SpendStatus {
		return &agentsv1alpha1.SpendStatus{Day: agentsv1alpha1.SpendWindow{Start: day, CostUSD: cost, Tokens: tok},
			Month: agentsv1alpha1.SpendWindow{Start: "2026-12", CostUSD: cost, Tokens: tok}}
	}
	if msg := budgetNotice(b, nil, spend("2026-12-06", "39.99", 10)); msg != "" {
		t.Errorf("under 80%%: %q", msg)
	}
	s1 := spend("2026-12-06", "40", 10)
	msg := budgetNotice(b, nil, s1)
	if !strings.Contains(msg, "at 80%: $40 of the daily budget of $50 spent (2026-12-06)") || !s1.Day.Notified || s1.Month.Notified {
		t.Errorf("at 80%%: %q, %+v", msg, s1)
	}
	s2 := spend("2026-12-06", "45", 10)
	if msg := budgetNotice(b, s1, s2); msg != "" || !s2.Day.Notified {
		t.Errorf("once a window: %q, %+v", msg, s2.Day)
	}
	s3 := spend("2026-12-07", "41", 900)
	msg = budgetNotice(b, s2, s3)
	if !strings.Contains(msg, "$41 of the daily budget") || !strings.Contains(msg, "900 of the monthly budget of 1000 tokens") {
		t.Errorf("a new day, and the month's tokens: %q", msg)
	}
	pct := int32(100)
	if msg := budgetNotice(&agentsv1alpha1.BudgetSpec{DailyUSD: "50", NotifyAtPercent: &pct}, nil, spend("2026-12-06", "49", 0)); msg != "" {
		t.Errorf("notifyAtPercent 100: %q", msg)
	}
}

func TestBudgetZone(t *testing.T) {
	p := func(zone string) *agentsv1alpha1.Project {
		return &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Budget: &agentsv1alpha1.BudgetSpec{DailyUSD: "1", TimeZone: zone}}}
	}
	for range 2 { // the second time from the cache
		loc, err := budgetZone(p("Asia/Tokyo"))
		if err != nil || loc.String() != "Asia/Tokyo" {
			t.Fatalf("Asia/Tokyo: %v, %v", loc, err)
		}
	}
	if _, ok := zones.Load("Asia/Tokyo"); !ok {
		t.Error("a valid zone is cached")
	}
	loc, err := budgetZone(p("Mars/Olympus"))
	if err == nil || loc != time.UTC || !strings.Contains(err.Error(), "not an IANA time zone") {
		t.Errorf("an unknown zone: %v, %v", loc, err)
	}
	if _, ok := zones.Load("Mars/Olympus"); ok {
		t.Error("an unknown zone is not cached")
	}
	if loc, err := budgetZone(nil); loc != time.UTC || err != nil {
		t.Errorf("no budget: %v, %v", loc, err)
	}
}
