package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/pricing"
)

// budgetZone is the Project's budget time zone: spec.budget.timeZone, else UTC. An unknown name
// is an error (the Project says so in Stalled) and counts in UTC meanwhile.
func budgetZone(p *agentsv1alpha1.Project) (*time.Location, error) {
	if p == nil || p.Spec.Budget == nil || p.Spec.Budget.TimeZone == "" || p.Spec.Budget.TimeZone == "UTC" {
		return time.UTC, nil
	}
	name := p.Spec.Budget.TimeZone
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC, fmt.Errorf("spec.budget.timeZone %q is not an IANA time zone (such as Europe/Berlin or UTC): %w", name, err)
	}
	if n := zoneCount.Add(1); n <= maxZones {
		zones.Store(name, loc)
	}
	return loc, nil
}

// zones caches loaded time zones: every session of a budgeted Project asks on every decision, and
// loading one reads the zone database. Only valid names are kept, at most maxZones (there are
// about 600), so a spec cannot grow it without bound.
var (
	zones     sync.Map
	zoneCount atomic.Int32
)

const maxZones = 1024

// projectSpend sums the sessions' spend in the day and month of now (in loc): each session keeps
// its own windows (status.usage.day and .month, metered), and a window of another day counts
// nothing. Pure.
func projectSpend(sessions []agentsv1alpha1.AgentSession, now time.Time, loc *time.Location) *agentsv1alpha1.SpendStatus {
	day, month := lifecycle.DayKey(now, loc), lifecycle.MonthKey(now, loc)
	type acc struct {
		cost   float64
		tokens int64
		agents map[string]*acc
		models map[string]*acc
	}
	d, m := &acc{agents: map[string]*acc{}, models: map[string]*acc{}}, &acc{agents: map[string]*acc{}, models: map[string]*acc{}}
	bump := func(in map[string]*acc, key string, cost float64, tokens int64) {
		x := in[key]
		if x == nil {
			x = &acc{}
			in[key] = x
		}
		x.cost += cost
		x.tokens += tokens
	}
	add := func(a *acc, agent string, w *agentsv1alpha1.SpendWindow) {
		c := pricing.ParseUSD(w.CostUSD)
		a.cost += c
		a.tokens += w.Tokens
		bump(a.agents, agent, c, w.Tokens)
		for _, x := range w.ByModel {
			bump(a.models, x.Model, pricing.ParseUSD(x.CostUSD), x.Tokens)
		}
	}
	for i := range sessions {
		u := sessions[i].Status.Usage
		if u == nil {
			continue
		}
		agent := string(sessions[i].Status.Agent.Type)
		if agent == "" {
			agent = "unknown"
		}
		if u.Day != nil && u.Day.Start == day {
			add(d, agent, u.Day)
		}
		if u.Month != nil && u.Month.Start == month {
			add(m, agent, u.Month)
		}
	}
	window := func(start string, a *acc) agentsv1alpha1.SpendWindow {
		w := agentsv1alpha1.SpendWindow{Start: start, CostUSD: pricing.Format(a.cost), Tokens: a.tokens}
		names := make([]string, 0, len(a.agents))
		for n := range a.agents {
			names = append(names, n)
		}
		sort.Strings(names)
		for i, n := range names {
			if i == 16 {
				break
			}
			w.ByAgent = append(w.ByAgent, agentsv1alpha1.AgentSpend{Agent: n, CostUSD: pricing.Format(a.agents[n].cost), Tokens: a.agents[n].tokens})
		}
		models := make([]string, 0, len(a.models))
		for n := range a.models {
			models = append(models, n)
		}
		sort.Strings(models)
		for i, n := range models {
			if i == 33 {
				break // sessions' names are the proxy's, sanitized; a Project of many agents keeps the first 33
			}
			w.ByModel = append(w.ByModel, agentsv1alpha1.ModelSpend{Model: n, CostUSD: pricing.Format(a.models[n].cost), Tokens: a.models[n].tokens})
		}
		return w
	}
	return &agentsv1alpha1.SpendStatus{Day: window(day, d), Month: window(month, m)}
}

// budgetState judges a budget against the spend: which cap is spent (""), and when the spent
// window ends (the later one when both are). A window of another day or month than now's is
// over, so a Project whose status is a day old is within its daily budget. Pure.
func budgetState(b *agentsv1alpha1.BudgetSpec, spend *agentsv1alpha1.SpendStatus, now time.Time, loc *time.Location) (exhausted string, reset time.Time) {
	if b == nil || spend == nil {
		return "", time.Time{}
	}
	nextDay, nextMonth := windowEnds(now, loc)
	var why []string
	if spend.Month.Start == lifecycle.MonthKey(now, loc) {
		if b.MonthlyUSD != "" && pricing.ParseUSD(spend.Month.CostUSD) >= pricing.ParseUSD(b.MonthlyUSD) {
			why = append(why, fmt.Sprintf("the monthly budget of $%s is spent ($%s in %s)", b.MonthlyUSD, spend.Month.CostUSD, spend.Month.Start))
		}
		if b.MonthlyTokens != nil && spend.Month.Tokens >= *b.MonthlyTokens {
			why = append(why, fmt.Sprintf("the monthly budget of %d tokens is spent (%d in %s)", *b.MonthlyTokens, spend.Month.Tokens, spend.Month.Start))
		}
		if len(why) > 0 {
			reset = nextMonth
		}
	}
	if spend.Day.Start == lifecycle.DayKey(now, loc) {
		n := len(why)
		if b.DailyUSD != "" && pricing.ParseUSD(spend.Day.CostUSD) >= pricing.ParseUSD(b.DailyUSD) {
			why = append(why, fmt.Sprintf("the daily budget of $%s is spent ($%s on %s)", b.DailyUSD, spend.Day.CostUSD, spend.Day.Start))
		}
		if b.DailyTokens != nil && spend.Day.Tokens >= *b.DailyTokens {
			why = append(why, fmt.Sprintf("the daily budget of %d tokens is spent (%d on %s)", *b.DailyTokens, spend.Day.Tokens, spend.Day.Start))
		}
		if len(why) > n && reset.IsZero() {
			reset = nextDay
		}
	}
	if len(why) == 0 {
		return "", time.Time{}
	}
	msg := why[0]
	for _, w := range why[1:] {
		msg += "; " + w
	}
	return msg, reset
}

// budgetEvidence is the Project's budget as a session's decision needs it. Pure.
func budgetEvidence(p *agentsv1alpha1.Project, now time.Time) lifecycle.BudgetEvidence {
	loc, _ := budgetZone(p)
	ev := lifecycle.BudgetEvidence{Location: loc}
	if p == nil || p.Spec.Budget == nil {
		return ev
	}
	ev.Exhausted, ev.ResetTime = budgetState(p.Spec.Budget, p.Status.Spend, now, loc)
	ev.FinishTurn = p.Spec.Budget.OnExhausted != agentsv1alpha1.BudgetContinue
	return ev
}

// setBudgetCondition says whether the Project's budget has room; without a budget there is no
// condition. Pure.
func setBudgetCondition(p *agentsv1alpha1.Project, now time.Time) {
	conds := &p.Status.Conditions
	if p.Spec.Budget == nil {
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionBudgetAvailable)
		return
	}
	loc, _ := budgetZone(p)
	why, reset := budgetState(p.Spec.Budget, p.Status.Spend, now, loc)
	if why == "" {
		setCondition(conds, p.Generation, agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget,
			fmt.Sprintf("spent $%s today and $%s this month", p.Status.Spend.Day.CostUSD, p.Status.Spend.Month.CostUSD))
		return
	}
	setCondition(conds, p.Generation, agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionFalse, agentsv1alpha1.ReasonBudgetExhausted,
		why+"; new sessions wait Queued until "+reset.Format(time.RFC3339))
}

// budgetChanged passes a Project update whose BudgetAvailable condition changed status.
func budgetChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*agentsv1alpha1.Project)
			n, ok2 := e.ObjectNew.(*agentsv1alpha1.Project)
			if !ok1 || !ok2 {
				return false
			}
			status := func(p *agentsv1alpha1.Project) metav1.ConditionStatus {
				if c := meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable); c != nil {
					return c.Status
				}
				return ""
			}
			return status(o) != status(n)
		},
	}
}

// notifyBudget sends the Project's budget threshold notification to the routes that take action
// priority, and records it as a Kubernetes Event. Its window was marked Notified in the status
// just written, so it goes out at most once per window: a manager that stops in between loses
// it (the Event and the BudgetAvailable condition still say what matters).
func (r *ProjectReconciler) notifyBudget(ctx context.Context, p *agentsv1alpha1.Project, msg string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, agentsv1alpha1.ReasonBudgetThreshold, "Budget", "%s", msg)
	}
	if r.Notifier == nil || p.Spec.Notifications == nil {
		return
	}
	now := r.now()
	id := "budget." + strings.ReplaceAll(p.Status.Spend.Day.Start+"."+p.Status.Spend.Month.Start, "-", "")
	for _, route := range notify.Select(p.Spec.Notifications.Routes, agentsv1alpha1.PriorityAction) {
		sender, err := r.senderFor(ctx, p, route.Name)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot build the notification sender", "route", route.Name)
			continue
		}
		r.Notifier.Enqueue(notify.Job{Key: p.Namespace + "/" + p.Name + "/" + id + "/" + route.Name, Route: route.Name, Sender: sender,
			Notification: notify.Notification{ID: p.Namespace + "/" + p.Name + "/" + id, Type: agentsv1alpha1.EventBudgetThreshold,
				Priority: agentsv1alpha1.PriorityAction, Reason: agentsv1alpha1.ReasonBudgetThreshold, Message: msg,
				Namespace: p.Namespace, Project: p.Name, Time: now}})
	}
}

// budgetNotice decides the window's notifyAtPercent notification: spend reached that share of a
// cap of the current day or month and the window has not said so yet. It marks the window
// Notified (the status written first, then the notification sent: at most once per window) and
// returns the message, or "". Pure.
func budgetNotice(b *agentsv1alpha1.BudgetSpec, prev, spend *agentsv1alpha1.SpendStatus) string {
	if b == nil || spend == nil {
		return ""
	}
	pct := int32(agentsv1alpha1.DefaultBudgetNotifyPercent)
	if b.NotifyAtPercent != nil {
		pct = *b.NotifyAtPercent
	}
	share := float64(pct) / 100
	var msgs []string
	check := func(w *agentsv1alpha1.SpendWindow, prevW *agentsv1alpha1.SpendWindow, kind, capUSD string, capTokens *int64) {
		if prevW != nil && prevW.Start == w.Start && prevW.Notified {
			w.Notified = true
			return
		}
		var hit []string
		if c := pricing.ParseUSD(capUSD); capUSD != "" && c > 0 && pricing.ParseUSD(w.CostUSD) >= share*c {
			hit = append(hit, fmt.Sprintf("$%s of the %s budget of $%s", w.CostUSD, kind, capUSD))
		}
		if capTokens != nil && float64(w.Tokens) >= share*float64(*capTokens) {
			hit = append(hit, fmt.Sprintf("%d of the %s budget of %d tokens", w.Tokens, kind, *capTokens))
		}
		if len(hit) > 0 {
			w.Notified = true
			msgs = append(msgs, strings.Join(hit, " and ")+" spent ("+w.Start+")")
		}
	}
	var pd, pm *agentsv1alpha1.SpendWindow
	if prev != nil {
		pd, pm = &prev.Day, &prev.Month
	}
	check(&spend.Day, pd, "daily", b.DailyUSD, b.DailyTokens)
	check(&spend.Month, pm, "monthly", b.MonthlyUSD, b.MonthlyTokens)
	if len(msgs) == 0 {
		return ""
	}
	return fmt.Sprintf("Project budget at %d%%: %s. At the cap new sessions wait until the window ends.", pct, strings.Join(msgs, "; "))
}

// windowEnds is when the day and the month of now end, in loc.
func windowEnds(now time.Time, loc *time.Location) (day, month time.Time) {
	local := now.In(loc)
	return time.Date(local.Year(), local.Month(), local.Day()+1, 0, 0, 0, 0, loc),
		time.Date(local.Year(), local.Month()+1, 1, 0, 0, 0, 0, loc)
}
