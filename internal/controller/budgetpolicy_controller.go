package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
)

// BudgetPolicyReconciler sums the spend of the Projects a BudgetPolicy covers and says whether
// the shared cap has room. It holds nothing itself: the Projects' BudgetAvailable condition and
// their sessions' decisions read the policy's status (budgetEvidence), so a spent policy queues
// sessions exactly as a spent Project budget does.
type BudgetPolicyReconciler struct {
	*Deps
}

// maxPolicyProjects bounds status.projects (the API's MaxItems).
const maxPolicyProjects = 64

// Reconcile follows the fixed shape: get, patch status once in a defer, then the one step.
func (r *BudgetPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	pol := &agentsv1alpha1.BudgetPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, pol); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pol.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	orig := pol.DeepCopy()
	now := r.now()
	var covered []*agentsv1alpha1.Project
	var notice string
	recErr := r.sum(ctx, pol, now, &covered, &notice)
	loc, _ := budgetZone(&pol.Spec.Budget)
	setPolicyBudgetCondition(pol, now, loc)
	setKstatus(&pol.Status.Conditions, pol.Generation, recErr, recErr == nil, agentsv1alpha1.ReasonSucceeded,
		fmt.Sprintf("covers %d Projects", pol.Status.ProjectCount))
	if observedBy(recErr) {
		pol.Status.ObservedGeneration = pol.Generation
	}
	if err := patchStatus(ctx, r.Client, orig, pol); err != nil {
		return statusWriteFailed(recErr, err)
	}
	emitConditionEvents(r.Recorder, orig.Status.Conditions, pol.Status.Conditions, pol, agentsv1alpha1.ConditionBudgetAvailable)
	if notice != "" {
		// The window was marked Notified in the status just written: once a window.
		if r.Recorder != nil {
			r.Recorder.Eventf(pol, nil, corev1.EventTypeNormal, agentsv1alpha1.ReasonBudgetThreshold, "Budget", "%s", notice)
		}
		for _, p := range covered {
			r.sendBudgetNotice(ctx, p, "budgetpolicy."+pol.Name+"."+windowsID(pol.Status.Spend), notice)
		}
	}
	// The windows roll over at midnight in the policy's zone: sum again then.
	end, _ := windowEnds(now, loc)
	return finish(ctx, r.Recorder, pol, orig.Status.Conditions, pol.Status.Conditions, recErr, end.Add(time.Second).Sub(now))
}

// sum reads the namespace's Projects and policies and writes the policy's spend. A selector that
// does not parse, or a time zone that does not exist, stalls the policy (it still covers every
// Project, in UTC, so that a typo holds rather than frees).
func (r *BudgetPolicyReconciler) sum(ctx context.Context, pol *agentsv1alpha1.BudgetPolicy, now time.Time,
	covered *[]*agentsv1alpha1.Project, notice *string) error {
	var projects agentsv1alpha1.ProjectList
	if err := r.Client.List(ctx, &projects, client.InNamespace(pol.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list Projects: %w", err)
	}
	var pols agentsv1alpha1.BudgetPolicyList
	if err := r.Client.List(ctx, &pols, client.InNamespace(pol.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list BudgetPolicies: %w", err)
	}
	prev := pol.Status.Spend
	loc, zoneErr := budgetZone(&pol.Spec.Budget)
	*covered = policySpend(pol, projects.Items, pols.Items, now, loc)
	*notice = budgetNoticeOf("BudgetPolicy "+pol.Name, &pol.Spec.Budget, prev, pol.Status.Spend)
	if pol.Spec.ProjectSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pol.Spec.ProjectSelector); err != nil {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.projectSelector: %v: fix the selector (until then the policy covers every Project of the namespace)", err)
		}
	}
	if zoneErr != nil {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "%v: the policy counts days in UTC until it is fixed", zoneErr)
	}
	return nil
}

// policySpend writes pol's status.spend, projects and projectCount from the Projects it covers,
// in the day and month of now in loc, and returns those Projects. A Project's status.spend counts
// when its windows are the policy's (the same zone); a Project counted in another zone is listed
// with TimeZoneMismatch and not summed (budgetEvidence holds it). Pure.
func policySpend(pol *agentsv1alpha1.BudgetPolicy, projects []agentsv1alpha1.Project, policies []agentsv1alpha1.BudgetPolicy,
	now time.Time, loc *time.Location) []*agentsv1alpha1.Project {
	day, month := lifecycle.DayKey(now, loc), lifecycle.MonthKey(now, loc)
	d, m := newSpendAcc(), newSpendAcc()
	var covered []*agentsv1alpha1.Project
	var shares []agentsv1alpha1.PolicyProject
	zone := zoneName(&pol.Spec.Budget)
	for i := range projects {
		p := &projects[i]
		if !p.DeletionTimestamp.IsZero() || !policyCovers(pol, p) {
			continue
		}
		covered = append(covered, p)
		share := agentsv1alpha1.PolicyProject{Name: p.Name}
		if own := zoneName(spendBudget(p, coveringPolicies(p, policies))); own != zone {
			share.TimeZoneMismatch = own
			shares = append(shares, share)
			continue
		}
		if sp := p.Status.Spend; sp != nil {
			if sp.Day.Start == day {
				d.add(&sp.Day, sp.Day.ByAgent)
				share.DayCostUSD, share.DayTokens = sp.Day.CostUSD, sp.Day.Tokens
			}
			if sp.Month.Start == month {
				m.add(&sp.Month, sp.Month.ByAgent)
				share.MonthCostUSD, share.MonthTokens = sp.Month.CostUSD, sp.Month.Tokens
			}
		}
		shares = append(shares, share)
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].Name < shares[j].Name })
	if len(shares) > maxPolicyProjects {
		shares = shares[:maxPolicyProjects]
	}
	pol.Status.Spend = &agentsv1alpha1.SpendStatus{Day: d.window(day), Month: m.window(month)}
	pol.Status.Projects = shares
	pol.Status.ProjectCount = int32(len(covered)) //nolint:gosec // bounded by the namespace's Projects
	return covered
}

// setPolicyBudgetCondition says whether the policy's cap has room. Pure.
func setPolicyBudgetCondition(pol *agentsv1alpha1.BudgetPolicy, now time.Time, loc *time.Location) {
	conds := &pol.Status.Conditions
	sp := pol.Status.Spend
	if sp == nil {
		sp = &agentsv1alpha1.SpendStatus{}
	}
	why, reset := budgetState(&pol.Spec.Budget, sp, now, loc)
	var mismatch []string
	for _, p := range pol.Status.Projects {
		if p.TimeZoneMismatch != "" {
			mismatch = append(mismatch, fmt.Sprintf("%s (counts days in %s)", p.Name, p.TimeZoneMismatch))
		}
	}
	msg := fmt.Sprintf("spent $%s today and $%s this month", orZero(sp.Day.CostUSD), orZero(sp.Month.CostUSD))
	status, reason := metav1.ConditionTrue, agentsv1alpha1.ReasonWithinBudget
	if why != "" {
		status, reason = metav1.ConditionFalse, agentsv1alpha1.ReasonBudgetExhausted
		msg = why + "; new sessions of the covered Projects wait Queued until " + reset.Format(time.RFC3339)
	}
	if len(mismatch) > 0 {
		msg += fmt.Sprintf("; held until their spec.budget.timeZone is %s: %v", zoneName(&pol.Spec.Budget), mismatch)
	}
	setCondition(conds, pol.Generation, agentsv1alpha1.ConditionBudgetAvailable, status, reason, msg)
}

// SetupWithManager watches BudgetPolicies and the Projects they cover: a Project's spend, labels
// or budget changes sum again, coalesced like the Project's own sessions.
func (r *BudgetPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1alpha1.BudgetPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&agentsv1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.policiesForProject), builder.WithPredicates(projectSpendChanged())).
		Named("budgetpolicy").Complete(r)
}

// policiesForProject maps a Project to the policies of its namespace: every one, since a label
// change may move the Project out of one (the map sees the old and the new object alike, but
// listing all is as cheap: a namespace has a handful).
func (r *BudgetPolicyReconciler) policiesForProject(ctx context.Context, o client.Object) []reconcile.Request {
	var list agentsv1alpha1.BudgetPolicyList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List BudgetPolicies for Project", "project", client.ObjectKeyFromObject(o))
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: list.Items[i].Name}})
	}
	return out
}

// projectSpendChanged passes a Project created or deleted, and an update of its spend, labels
// or spec (its own budget's zone).
func projectSpendChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*agentsv1alpha1.Project)
			n, ok2 := e.ObjectNew.(*agentsv1alpha1.Project)
			if !ok1 || !ok2 {
				return false
			}
			return o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Status.Spend, n.Status.Spend)
		},
	}
}

// policyChanged passes a BudgetPolicy update whose spec or BudgetAvailable condition changed:
// the Projects it covers judge their budget again.
func policyChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*agentsv1alpha1.BudgetPolicy)
			n, ok2 := e.ObjectNew.(*agentsv1alpha1.BudgetPolicy)
			if !ok1 || !ok2 {
				return false
			}
			if o.Generation != n.Generation {
				return true
			}
			a := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable)
			b := meta.FindStatusCondition(n.Status.Conditions, agentsv1alpha1.ConditionBudgetAvailable)
			return (a == nil) != (b == nil) || (a != nil && b != nil && a.Status != b.Status)
		},
	}
}

// projectsForPolicy maps a BudgetPolicy to the Projects of its namespace it covers (the old and
// the new object are both mapped on an update, so Projects a selector change let go are judged
// again too).
func projectsForPolicy(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		pol, ok := o.(*agentsv1alpha1.BudgetPolicy)
		if !ok {
			return nil
		}
		var list agentsv1alpha1.ProjectList
		if err := c.List(ctx, &list, client.InNamespace(pol.Namespace)); err != nil {
			if !apierrors.IsNotFound(err) {
				ctrl.LoggerFrom(ctx).Error(err, "List Projects for BudgetPolicy", "budgetPolicy", client.ObjectKeyFromObject(pol))
			}
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if policyCovers(pol, &list.Items[i]) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
}
