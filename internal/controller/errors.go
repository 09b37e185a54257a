package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Reconcile errors are typed so that one place (result) maps them to a ctrl.Result and the
// conditions: the sub-reconcilers only say what went wrong.
//
//   - *StallingError: a human must fix something (a missing Secret, a rejected token). The
//     object shows Stalled=True with the reason; no requeue — a watch on the cause, or the next
//     resync, brings it back.
//   - *WaitingError: something is on its way (a pod starting, a rate limit resetting). The object
//     shows Reconciling=True; requeue after the delay, without back-off.
//   - anything else: a transient failure; controller-runtime retries with exponential back-off.

// StallingError means progress needs a human.
type StallingError struct {
	Reason string
	Err    error
}

func (e *StallingError) Error() string { return e.Err.Error() }
func (e *StallingError) Unwrap() error { return e.Err }

// Stalling returns a *StallingError with a formatted message.
func Stalling(reason, format string, args ...any) error {
	return &StallingError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// WaitingError means the reconcile should run again after RequeueAfter.
type WaitingError struct {
	Reason       string
	RequeueAfter time.Duration
	Err          error
}

func (e *WaitingError) Error() string { return e.Err.Error() }
func (e *WaitingError) Unwrap() error { return e.Err }

// Waiting returns a *WaitingError with a formatted message.
func Waiting(after time.Duration, reason, format string, args ...any) error {
	return &WaitingError{Reason: reason, RequeueAfter: after, Err: fmt.Errorf(format, args...)}
}

// result maps a reconcile error to what controller-runtime should do next.
func result(err error, requeueAfter time.Duration) (ctrl.Result, error) {
	var stalling *StallingError
	var waiting *WaitingError
	switch {
	case err == nil:
		return ctrl.Result{RequeueAfter: requeueAfter}, nil
	case errors.As(err, &stalling):
		// Not returned: a retry cannot fix it and would only spin the work queue.
		return ctrl.Result{RequeueAfter: requeueAfter}, nil
	case errors.As(err, &waiting):
		after := waiting.RequeueAfter
		if requeueAfter > 0 && requeueAfter < after {
			after = requeueAfter
		}
		return ctrl.Result{RequeueAfter: after}, nil
	default:
		return ctrl.Result{}, err
	}
}

// finish ends every reconcile of the three reconcilers once their status write succeeded: the
// reconcile's error is said where a human looks (a Stalling error is not returned to
// controller-runtime, so without this it would be seen only in a condition): logged, and
// recorded as a Warning event when the Stalled condition it set is new or says something new;
// then the result. before and after are the object's conditions around the write.
func finish(ctx context.Context, rec recorder.EventRecorder, obj runtime.Object, before, after []metav1.Condition, err error, requeue time.Duration) (ctrl.Result, error) {
	var stalling *StallingError
	if errors.As(err, &stalling) {
		ctrl.LoggerFrom(ctx).Error(err, "Reconcile stalled: a human must act", "reason", stalling.Reason)
		if rec != nil && conditionChanged(before, after, agentsv1alpha1.ConditionStalled) {
			rec.Eventf(obj, nil, corev1.EventTypeWarning, stalling.Reason, "Reconcile", "%s", clip.Marked(err.Error(), maxConditionMessage, "…"))
		}
	}
	return result(err, requeue)
}

// conditionChanged reports whether condition t is in after and differs from before in status,
// reason or message.
func conditionChanged(before, after []metav1.Condition, t string) bool {
	a := meta.FindStatusCondition(after, t)
	if a == nil {
		return false
	}
	b := meta.FindStatusCondition(before, t)
	return b == nil || b.Status != a.Status || b.Reason != a.Reason || b.Message != a.Message
}
