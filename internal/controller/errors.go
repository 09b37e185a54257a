package controller

import (
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
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
