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
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/pricing"
)

// budgetZone is a budget's time zone: its timeZone, else UTC. An unknown name is an error (the
// Project or the BudgetPolicy says so in Stalled) and counts in UTC meanwhile.
func budgetZone(b *agentsv1alpha1.BudgetSpec) (*time.Location, error) {
	name := zoneName(b)
	if name == "UTC" {
		return time.UTC, nil
	}
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

// zoneName is a budget's timeZone as written, "UTC" when there is none.
func zoneName(b *agentsv1alpha1.BudgetSpec) string {
	if b == nil || b.TimeZone == "" {
		return "UTC"
	}
	return b.TimeZone
}

// spendBudget is the budget whose time zone a Project's spend is counted in: its own, else the
// first (by name) BudgetPolicy that covers it, else none (UTC). Pure.
func spendBudget(p *agentsv1alpha1.Project, covering []*agentsv1alpha1.BudgetPolicy) *agentsv1alpha1.BudgetSpec {
	if p != nil && p.Spec.Budget != nil {
		return p.Spec.Budget
	}
	if len(covering) > 0 {
		return &covering[0].Spec.Budget
	}
	return nil
}

// spendZone is the time zone a Project's days and months are counted in (spendBudget's).
func spendZone(p *agentsv1alpha1.Project, covering []*agentsv1alpha1.BudgetPolicy) *time.Location {
	loc, _ := budgetZone(spendBudget(p, covering))
	return loc
}

// policyCovers says whether a BudgetPolicy covers a Project: its selector matches the Project's
// labels (no selector covers every Project). A selector that does not parse covers every
// Project: a cap that cannot be read holds too much rather than nothing (the policy says so in
// Stalled). Pure.
func policyCovers(pol *agentsv1alpha1.BudgetPolicy, p *agentsv1alpha1.Project) bool {
	if pol.Spec.ProjectSelector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(pol.Spec.ProjectSelector)
	if err != nil {
		return true
	}
	return sel.Matches(labels.Set(p.Labels))
}

// coveringPolicies are the policies that cover p, by name. Pure.
func coveringPolicies(p *agentsv1alpha1.Project, policies []agentsv1alpha1.BudgetPolicy) []*agentsv1alpha1.BudgetPolicy {
	var out []*agentsv1alpha1.BudgetPolicy
	for i := range policies {
		if policies[i].DeletionTimestamp.IsZero() && policyCovers(&policies[i], p) {
			out = append(out, &policies[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
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
	d, m := newSpendAcc(), newSpendAcc()
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
			d.add(u.Day, []agentsv1alpha1.AgentSpend{{Agent: agent, CostUSD: u.Day.CostUSD, Tokens: u.Day.Tokens}})
		}
		if u.Month != nil && u.Month.Start == month {
			m.add(u.Month, []agentsv1alpha1.AgentSpend{{Agent: agent, CostUSD: u.Month.CostUSD, Tokens: u.Month.Tokens}})
		}
	}
	return &agentsv1alpha1.SpendStatus{Day: d.window(day), Month: m.window(month)}
}

// spendAcc sums spend windows, split by agent and by model.
type spendAcc struct {
	cost   float64
	tokens int64
	agents map[string]*spendAcc
	models map[string]*spendAcc
}

func newSpendAcc() *spendAcc {
	return &spendAcc{agents: map[string]*spendAcc{}, models: map[string]*spendAcc{}}
}

func bumpSpend(in map[string]*spendAcc, key string, usd string, tokens int64) {
	x := in[key]
	if x == nil {
		x = &spendAcc{}
		in[key] = x
	}
	x.cost += pricing.ParseUSD(usd)
	x.tokens += tokens
}

// add sums w, its models, and the agents' shares given.
func (a *spendAcc) add(w *agentsv1alpha1.SpendWindow, agents []agentsv1alpha1.AgentSpend) {
	a.cost += pricing.ParseUSD(w.CostUSD)
	a.tokens += w.Tokens
	for _, x := range agents {
		bumpSpend(a.agents, x.Agent, x.CostUSD, x.Tokens)
	}
	for _, x := range w.ByModel {
		bumpSpend(a.models, x.Model, x.CostUSD, x.Tokens)
	}
}

// window is the sum as the window named start: agents by name (the first 16), models by name
// (the first 33, as the API bounds them).
func (a *spendAcc) window(start string) agentsv1alpha1.SpendWindow {
	w := agentsv1alpha1.SpendWindow{Start: start, CostUSD: pricing.Format(a.cost), Tokens: a.tokens}
	for i, n := range sortedKeys(a.agents) {
		if i == 16 {
			break
		}
		w.ByAgent = append(w.ByAgent, agentsv1alpha1.AgentSpend{Agent: n, CostUSD: pricing.Format(a.agents[n].cost), Tokens: a.agents[n].tokens})
	}
	for i, n := range sortedKeys(a.models) {
		if i == 33 {
			break // sessions' names are the proxy's, sanitized; a Project of many models keeps the first 33
		}
		w.ByModel = append(w.ByModel, agentsv1alpha1.ModelSpend{Model: n, CostUSD: pricing.Format(a.models[n].cost), Tokens: a.models[n].tokens})
	}
	return w
}

func sortedKeys(m map[string]*spendAcc) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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

// budgetEvidence is the budgets that hold a Project as a session's decision needs them: its own
// and every BudgetPolicy that covers it. Each spent cap is said; running sessions finish their
// turn if any spent budget says FinishTurn; the reset is the latest of the spent windows' ends.
// A policy whose time zone differs from the one the Project's spend is counted in holds it with
// no reset (the spend cannot be summed until the zones agree). Pure.
func budgetEvidence(p *agentsv1alpha1.Project, covering []*agentsv1alpha1.BudgetPolicy, now time.Time) lifecycle.BudgetEvidence {
	ev := lifecycle.BudgetEvidence{Location: spendZone(p, covering)}
	if p == nil {
		return ev
	}
	var why []string
	spent := func(b *agentsv1alpha1.BudgetSpec, msg string, reset time.Time) {
		why = append(why, msg)
		if b.OnExhausted != agentsv1alpha1.BudgetContinue {
			ev.FinishTurn = true
		}
		if reset.After(ev.ResetTime) {
			ev.ResetTime = reset
		}
	}
	if b := p.Spec.Budget; b != nil {
		if msg, reset := budgetState(b, p.Status.Spend, now, ev.Location); msg != "" {
			spent(b, msg, reset)
		}
	}
	own := zoneName(spendBudget(p, covering))
	for _, pol := range covering {
		b := &pol.Spec.Budget
		if zoneName(b) != own {
			spent(b, fmt.Sprintf("BudgetPolicy %s counts days in %s and this Project in %s: give the Project's spec.budget the policy's timeZone",
				pol.Name, zoneName(b), own), time.Time{})
			continue
		}
		loc, _ := budgetZone(b)
		if msg, reset := budgetState(b, pol.Status.Spend, now, loc); msg != "" {
			spent(b, "BudgetPolicy "+pol.Name+": "+msg, reset)
		}
	}
	if len(why) > 0 {
		ev.Exhausted = strings.Join(why, "; ")
	} else {
		ev.ResetTime = time.Time{}
	}
	return ev
}

// setBudgetCondition says whether the budgets that hold the Project have room; without a budget
// of its own or a policy that covers it there is no condition. Pure.
func setBudgetCondition(p *agentsv1alpha1.Project, covering []*agentsv1alpha1.BudgetPolicy, now time.Time) {
	conds := &p.Status.Conditions
	if p.Spec.Budget == nil && len(covering) == 0 {
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionBudgetAvailable)
		return
	}
	ev := budgetEvidence(p, covering, now)
	if ev.Exhausted == "" {
		msg := "spent $0 today and $0 this month"
		if sp := p.Status.Spend; sp != nil {
			msg = fmt.Sprintf("spent $%s today and $%s this month", orZero(sp.Day.CostUSD), orZero(sp.Month.CostUSD))
		}
		if len(covering) > 0 {
			names := make([]string, len(covering))
			for i, pol := range covering {
				names[i] = pol.Name
			}
			msg += "; also held by BudgetPolicy " + strings.Join(names, ", ")
		}
		setCondition(conds, p.Generation, agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget, msg)
		return
	}
	msg := ev.Exhausted + "; new sessions wait Queued"
	if !ev.ResetTime.IsZero() {
		msg += " until " + ev.ResetTime.Format(time.RFC3339)
	}
	setCondition(conds, p.Generation, agentsv1alpha1.ConditionBudgetAvailable, metav1.ConditionFalse, agentsv1alpha1.ReasonBudgetExhausted, msg)
}

func orZero(usd string) string {
	if usd == "" {
		return "0"
	}
	return usd
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
	r.sendBudgetNotice(ctx, p, "budget."+windowsID(p.Status.Spend), msg)
}

// windowsID names a spend's windows in a notification id ("20261206.202612").
func windowsID(sp *agentsv1alpha1.SpendStatus) string {
	return strings.ReplaceAll(sp.Day.Start+"."+sp.Month.Start, "-", "")
}

// sendBudgetNotice queues a budget notification with id on the Project's action routes.
func (d *Deps) sendBudgetNotice(ctx context.Context, p *agentsv1alpha1.Project, id, msg string) {
	if d.Notifier == nil || p.Spec.Notifications == nil {
		return
	}
	now := d.now()
	for _, route := range notify.Select(p.Spec.Notifications.Routes, agentsv1alpha1.PriorityAction) {
		sender, err := d.senderFor(ctx, p, route.Name)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot build the notification sender", "route", route.Name)
			continue
		}
		d.Notifier.Enqueue(notify.Job{Key: p.Namespace + "/" + p.Name + "/" + id + "/" + route.Name, Route: route.Name, Sender: sender,
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
	return budgetNoticeOf("Project budget", b, prev, spend)
}

// budgetNoticeOf is budgetNotice for the budget named what ("BudgetPolicy team-a"). Pure.
func budgetNoticeOf(what string, b *agentsv1alpha1.BudgetSpec, prev, spend *agentsv1alpha1.SpendStatus) string {
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
	return fmt.Sprintf("%s at %d%%: %s. At the cap new sessions wait until the window ends.", what, pct, strings.Join(msgs, "; "))
}

// windowEnds is when the day and the month of now end, in loc.
func windowEnds(now time.Time, loc *time.Location) (day, month time.Time) {
	local := now.In(loc)
	return time.Date(local.Year(), local.Month(), local.Day()+1, 0, 0, 0, 0, loc),
		time.Date(local.Year(), local.Month()+1, 1, 0, 0, 0, 0, loc)
}
