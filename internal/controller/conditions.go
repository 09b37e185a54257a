package controller

import (
	"errors"

	"github.com/shepherd-dev/shepherd/internal/clip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// setCondition sets a condition with the object's generation.
// maxConditionMessage keeps condition messages (and the errors and events that repeat them)
// readable, well within the API's 32 KiB limit.
const maxConditionMessage = 1024

func setCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: clip.Marked(msg, maxConditionMessage, "…"), ObservedGeneration: generation,
	})
}

// observedBy says whether a reconcile that ended with err judged the spec of its generation:
// it succeeded, or it stalled on that spec (a missing Secret, a failed checkout: the status says
// what to fix in this generation). A transient error or a wait judged nothing yet.
func observedBy(err error) bool {
	var stalling *StallingError
	return err == nil || errors.As(err, &stalling)
}

// setKstatus sets Ready, Reconciling and Stalled from the reconcile's outcome, the kstatus way:
// Reconciling and Stalled are present only when true. ready says whether the object reached its
// desired state when err is nil; readyReason/readyMsg explain it.
func setKstatus(conds *[]metav1.Condition, generation int64, err error, ready bool, readyReason, readyMsg string) {
	var stalling *StallingError
	var waiting *WaitingError
	switch {
	case err == nil && ready:
		setCondition(conds, generation, agentsv1alpha1.ConditionReady, metav1.ConditionTrue, readyReason, readyMsg)
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionStalled)
	case err == nil:
		setCondition(conds, generation, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, readyReason, readyMsg)
		setCondition(conds, generation, agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, readyReason, readyMsg)
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionStalled)
	case errors.As(err, &stalling):
		setCondition(conds, generation, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, stalling.Reason, err.Error())
		setCondition(conds, generation, agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, stalling.Reason, err.Error())
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionReconciling)
	case errors.As(err, &waiting):
		setCondition(conds, generation, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, waiting.Reason, err.Error())
		setCondition(conds, generation, agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, waiting.Reason, err.Error())
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionStalled)
	default:
		setCondition(conds, generation, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReconcileError, err.Error())
		setCondition(conds, generation, agentsv1alpha1.ConditionReconciling, metav1.ConditionTrue, agentsv1alpha1.ReasonReconcileError, err.Error())
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionStalled)
	}
}
