package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// statusObject is a Shepherd object with a status subresource.
type statusObject interface {
	client.Object
}

// patchStatus writes obj's status once, as a merge patch against orig, and only when it changed:
// an unchanged reconcile costs no API write.
//
// The patch carries orig's resourceVersion: a status computed from a stale cache (the informer
// not yet showing our previous write) is refused with a conflict instead of merging half of an
// old decision over a newer one (a JSON merge patch replaces lists such as conditions whole, so
// a stale decision's conditions would land beside the newer phase).
func patchStatus(ctx context.Context, c client.Client, orig, obj statusObject) error {
	if equality.Semantic.DeepEqual(statusOf(orig), statusOf(obj)) {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

// conflictRequeue is how soon a reconcile whose status write met a newer object runs again (the
// cache has usually caught up by then).
const conflictRequeue = 100 * time.Millisecond

// statusWrite is a status write that succeeded: the resourceVersion it replaced, and when.
type statusWrite struct {
	replaced string
	at       time.Time
}

// cacheBehindBound is how long a cache may go on showing the version a write replaced before the
// reconcile goes ahead anyway (its write then meets the conflict it would have met).
const cacheBehindBound = 5 * time.Second

// cacheBehind reports whether an object read from the cache is still the version this manager's
// last status write replaced: the informer has not delivered that write yet (under load, a
// fraction of a second). A reconcile from it would decide from before the write, and its own
// write would be refused as a conflict: in a fan-out of 1000 sessions a third of a wasted
// request per session, each a worker's round trip to a loaded API server (issue 23). Versions are
// compared for equality only (they are opaque). Pure.
func cacheBehind(w statusWrite, cached string, now time.Time) bool {
	return w.replaced != "" && cached == w.replaced && now.Sub(w.at) < cacheBehindBound
}

// statusWriteFailed maps a failed status write to the reconcile's result: an object gone meanwhile
// needs nothing more; a conflict (the object changed since it was read) is retried shortly and
// quietly; anything else is an error.
func statusWriteFailed(recErr, err error) (ctrl.Result, error) {
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	return ctrl.Result{}, errors.Join(recErr, err)
}

func statusOf(o client.Object) any {
	switch v := o.(type) {
	case *agentsv1alpha1.Project:
		return v.Status
	case *agentsv1alpha1.Worktree:
		return v.Status
	case *agentsv1alpha1.AgentSession:
		return v.Status
	case *agentsv1alpha1.BudgetPolicy:
		return v.Status
	case *agentsv1alpha1.AgentTask:
		return v.Status
	}
	return o
}

// notYet are the condition reasons that say something has not happened yet, as it should not
// have so far: no event for them, nor for the condition becoming True after them.
var notYet = map[string]bool{agentsv1alpha1.ReasonSetupPending: true}

// emitConditionEvents records an event for each listed condition whose status or reason changed,
// after the status write that made the change succeeded. The condition's reason is the event's.
func emitConditionEvents(rec recorder.EventRecorder, before, after []metav1.Condition, obj runtime.Object, types ...string) {
	if rec == nil {
		return
	}
	for _, t := range types {
		a := meta.FindStatusCondition(after, t)
		if a == nil {
			continue
		}
		b := meta.FindStatusCondition(before, t)
		if b != nil && b.Status == a.Status && b.Reason == a.Reason {
			continue
		}
		if b == nil && a.Status == metav1.ConditionTrue {
			// The first time a condition is met is not news.
			continue
		}
		if notYet[a.Reason] && (b == nil || notYet[b.Reason]) || b != nil && notYet[b.Reason] && a.Status == metav1.ConditionTrue {
			// Waiting for something that has not happened yet, and then its happening as
			// expected, are routine (a fan-out would write two events per Worktree for them).
			continue
		}
		kind := corev1.EventTypeNormal
		if a.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		rec.Eventf(obj, nil, kind, a.Reason, t, "%s", a.Message)
	}
}

// sessionPhaseChanged passes session events that change what a Project counts: creation,
// deletion and phase changes; not the many status writes within a phase.
func sessionPhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*agentsv1alpha1.AgentSession)
			n, ok2 := e.ObjectNew.(*agentsv1alpha1.AgentSession)
			return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || (o.Status.AdmittedTime == nil) != (n.Status.AdmittedTime == nil)
		},
	}
}

// createOrDelete passes only creations and deletions.
func createOrDelete() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
}

// emitPhaseEvent records a phase change, after the status write that made it. A new object's
// first phase, Pending, is not news (one Event less per session in a fan-out: an API write each).
func emitPhaseEvent(rec recorder.EventRecorder, obj runtime.Object, before, after string) {
	if rec == nil || before == after || after == "" || before == "" && after == string(agentsv1alpha1.WorktreePending) {
		return
	}
	rec.Eventf(obj, nil, corev1.EventTypeNormal, agentsv1alpha1.WorktreePhaseEventReason(agentsv1alpha1.WorktreePhase(after)), "Phase", "phase %s → %s", orNone(before), after)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// worktreePhaseChanged passes Worktree creations, deletions and phase changes.
func worktreePhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*agentsv1alpha1.Worktree)
			n, ok2 := e.ObjectNew.(*agentsv1alpha1.Worktree)
			return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.Generation != n.Generation
		},
	}
}

// findCondition returns the condition of type t, or nil.
func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

// defaultSessionCountDelay is how long the Project controller lets session changes gather
// before it counts them again.
const defaultSessionCountDelay = time.Second

// Beyond a thousand sessions a Project's count waits longer: countDelayPerSession for each
// session it had at its last count, up to maxCountDelay (see coalesceDelay).
const (
	countDelayPerSession = time.Millisecond
	maxCountDelay        = 30 * time.Second
)

// coalesceDelay is how long a Project with n sessions (at its last count) lets session and
// Worktree changes gather before it counts them again: base, or a millisecond per session when
// that is longer, up to maxCountDelay (never below base). A Project reconcile reads every one of
// its sessions, so a fixed delay made the Project controller's work grow with N every second,
// and with N × the run's length over a fan-out: at 10,000 sessions a Project reconcile a
// second copied 16 MB of session structs a second out of the cache (issue 23's heap profile).
// Spaced by the count, it reads about one session a millisecond whatever the size; the cost is
// that a Project of 10,000 sessions shows its counts and spend up to 10 s late.
func coalesceDelay(base time.Duration, n int) time.Duration {
	d := time.Duration(n) * countDelayPerSession
	if d > maxCountDelay {
		d = maxCountDelay
	}
	return max(base, d)
}

// enqueueAfter is an event handler that enqueues key(obj) delay(key) after each event. The
// workqueue holds one entry per key and keeps the earliest time asked for, so a burst of events
// within the delay becomes one reconcile: the reconcile after it sees the state the burst left.
func enqueueAfter(delay func(types.NamespacedName) time.Duration, key func(client.Object) types.NamespacedName) handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
		if k := key(o); k.Name != "" {
			q.AddAfter(reconcile.Request{NamespacedName: k}, delay(k))
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
	}
}
