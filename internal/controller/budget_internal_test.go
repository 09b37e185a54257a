package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
	p := func(zone string) *agentsv1alpha1.BudgetSpec {
		return &agentsv1alpha1.BudgetSpec{DailyUSD: "1", TimeZone: zone}
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

func TestBudgetPolicies(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	project := func(name string, labels map[string]string, own *agentsv1alpha1.BudgetSpec, day, month string) agentsv1alpha1.Project {
		p := agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Budget: own}}
		p.Name, p.Labels = name, labels
		p.Status.Spend = &agentsv1alpha1.SpendStatus{
			Day: agentsv1alpha1.SpendWindow{Start: "2026-12-06", CostUSD: day, Tokens: 100,
				ByAgent: []agentsv1alpha1.AgentSpend{{Agent: "codex", CostUSD: day, Tokens: 100}},
				ByModel: []agentsv1alpha1.ModelSpend{{Model: "gpt-5", CostUSD: day, Tokens: 100}}},
			Month: agentsv1alpha1.SpendWindow{Start: "2026-12", CostUSD: month, Tokens: 1000}}
		return p
	}
	policy := func(name string, sel *metav1.LabelSelector, b agentsv1alpha1.BudgetSpec) agentsv1alpha1.BudgetPolicy {
		pol := agentsv1alpha1.BudgetPolicy{Spec: agentsv1alpha1.BudgetPolicySpec{ProjectSelector: sel, Budget: b}}
		pol.Name = name
		return pol
	}
	team := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	projects := []agentsv1alpha1.Project{
		project("api", map[string]string{"team": "a"}, nil, "6", "30"),
		project("web", map[string]string{"team": "a"}, nil, "5", "20"),
		project("ops", map[string]string{"team": "b"}, nil, "100", "100"),
		project("berlin", map[string]string{"team": "a"}, &agentsv1alpha1.BudgetSpec{DailyUSD: "50", TimeZone: "Europe/Berlin"}, "1", "1"),
	}
	pols := []agentsv1alpha1.BudgetPolicy{policy("team-a", team, agentsv1alpha1.BudgetSpec{DailyUSD: "10", MonthlyUSD: "500", TimeZone: "UTC"})}

	covered := policySpend(&pols[0], projects, pols, now, time.UTC)
	st := pols[0].Status
	if len(covered) != 3 || st.ProjectCount != 3 {
		t.Fatalf("the selector covers api, web and berlin: %d, %d", len(covered), st.ProjectCount)
	}
	if st.Spend.Day.CostUSD != "11" || st.Spend.Month.CostUSD != "50" || st.Spend.Day.Tokens != 200 {
		t.Errorf("api and web summed, berlin (another zone) not: %+v", st.Spend)
	}
	if len(st.Spend.Day.ByAgent) != 1 || st.Spend.Day.ByAgent[0].CostUSD != "11" || st.Spend.Day.ByModel[0].Tokens != 200 {
		t.Errorf("by agent and by model: %+v", st.Spend.Day)
	}
	if st.Projects[0].Name != "api" || st.Projects[1].Name != "berlin" || st.Projects[1].TimeZoneMismatch != "Europe/Berlin" || st.Projects[2].DayCostUSD != "5" {
		t.Errorf("the shares, by name: %+v", st.Projects)
	}
	setPolicyBudgetCondition(&pols[0], now, time.UTC)
	c := findCondition(pols[0].Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable)
	if c.Reason != agentsv1alpha1.ReasonBudgetExhausted || !strings.Contains(c.Message, "the daily budget of $10 is spent ($11 on 2026-12-06)") ||
		!strings.Contains(c.Message, "berlin (counts days in Europe/Berlin)") {
		t.Errorf("the policy's condition: %+v", c)
	}

	// A Project under the spent policy is held with the policy's name; one it does not cover is not.
	web, ops, berlin := &projects[1], &projects[2], &projects[3]
	ev := budgetEvidence(web, coveringPolicies(web, pols), now)
	if !strings.Contains(ev.Exhausted, "BudgetPolicy team-a: the daily budget of $10 is spent") || !ev.FinishTurn ||
		!ev.ResetTime.Equal(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("web is held until midnight: %+v", ev)
	}
	if ev := budgetEvidence(ops, coveringPolicies(ops, pols), now); ev.Exhausted != "" {
		t.Errorf("ops is not covered: %+v", ev)
	}
	ev = budgetEvidence(berlin, coveringPolicies(berlin, pols), now)
	if !strings.Contains(ev.Exhausted, "BudgetPolicy team-a counts days in UTC and this Project in Europe/Berlin") || !ev.ResetTime.IsZero() {
		t.Errorf("a Project in another zone is held without a reset: %+v", ev)
	}
	if ev.Location.String() != "Europe/Berlin" {
		t.Errorf("its own budget's zone counts its spend: %v", ev.Location)
	}

	// Continue on every spent budget lets running sessions go on; a Project without a budget of
	// its own counts in its first policy's zone.
	pols[0].Spec.Budget.OnExhausted = agentsv1alpha1.BudgetContinue
	pols[0].Spec.Budget.TimeZone = "Asia/Tokyo"
	if ev := budgetEvidence(web, coveringPolicies(web, pols), now); ev.FinishTurn || ev.Location.String() != "Asia/Tokyo" {
		t.Errorf("Continue, in Tokyo: %+v", ev)
	}

	// Within budget: the Project's condition names the policies that also hold it.
	pols[0].Spec.Budget = agentsv1alpha1.BudgetSpec{DailyUSD: "1000"}
	setBudgetCondition(web, coveringPolicies(web, pols), now)
	c = findCondition(web.Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "also held by BudgetPolicy team-a") {
		t.Errorf("within budget: %+v", c)
	}
	setBudgetCondition(ops, nil, now)
	if findCondition(ops.Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable) != nil {
		t.Error("no budget, no policy: no condition")
	}

	// A selector that does not parse covers every Project: it holds rather than frees.
	bad := policy("bad", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}, agentsv1alpha1.BudgetSpec{DailyUSD: "1"})
	if !policyCovers(&bad, ops) {
		t.Error("an unreadable selector covers every Project")
	}
	if policyCovers(&pols[0], ops) {
		t.Error("a label selector covers only its Projects")
	}
	pols[0].Spec.ProjectSelector = nil
	if !policyCovers(&pols[0], ops) {
		t.Error("no selector covers every Project")
	}
}

func TestServedKinds(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{agentsv1alpha1.GroupVersion})
	for _, kind := range []string{"Project", "Worktree", "AgentSession"} {
		mapper.Add(agentsv1alpha1.GroupVersion.WithKind(kind), meta.RESTScopeNamespace)
	}
	err := servedKinds(mapper)
	if err == nil || !strings.Contains(err.Error(), "does not serve BudgetPolicy.agents.shepherd.dev") || !strings.Contains(err.Error(), "apply this release's CRDs first") {
		t.Fatalf("an upgrade without the new CRD says what to do: %v", err)
	}
	mapper.Add(agentsv1alpha1.GroupVersion.WithKind("BudgetPolicy"), meta.RESTScopeNamespace)
	if err := servedKinds(mapper); err == nil || !strings.Contains(err.Error(), "does not serve AgentTask.agents.shepherd.dev") {
		t.Fatalf("nor without AgentTask's: %v", err)
	}
	mapper.Add(agentsv1alpha1.GroupVersion.WithKind("AgentTask"), meta.RESTScopeNamespace)
	if err := servedKinds(mapper); err != nil {
		t.Fatal(err)
	}
}

func TestRoutineReady(t *testing.T) {
	owned := &agentsv1alpha1.Worktree{}
	owned.Status.Phase = agentsv1alpha1.WorktreeReady
	yes := true
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "AgentSession", Name: "s", Controller: &yes}}
	shared := owned.DeepCopy()
	shared.OwnerReferences = nil
	for _, tc := range []struct {
		name   string
		wt     *agentsv1alpha1.Worktree
		before agentsv1alpha1.WorktreePhase
		want   bool
	}{
		{"a session's Worktree ready at first", owned, agentsv1alpha1.WorktreePending, true},
		{"a session's Worktree ready at its first status", owned, "", true},
		{"a restore is news", owned, agentsv1alpha1.WorktreeMissing, false},
		{"a shared Worktree is news", shared, agentsv1alpha1.WorktreePending, false},
	} {
		if got := routineReady(tc.wt, tc.before); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
