package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// closePullRequestGiveUp bounds how long a deleted session with onDelete ClosePullRequest waits
// for a forge that cannot close its pull request (down, refusing, or its Project gone): past
// it the finalizer goes, with a Warning event saying the pull request stays open, so a session's
// deletion waits on the forge this long at most.
var closePullRequestGiveUpNanos atomic.Int64

func init() { closePullRequestGiveUpNanos.Store(int64(5 * time.Minute)) }

// closePullRequestGiveUp is the bound (a test may shorten it while the manager runs).
func closePullRequestGiveUp() time.Duration { return time.Duration(closePullRequestGiveUpNanos.Load()) }

// ensureDeleteFinalizer keeps ClosePullRequestFinalizer on exactly the sessions whose
// spec.onDelete is ClosePullRequest; the reconcile goes on with the patched object (a finalizer
// change brings no reconcile of its own: the session's watch follows generations).
func (r *AgentSessionReconciler) ensureDeleteFinalizer(ctx context.Context, sess *agentsv1alpha1.AgentSession) error {
	want := sess.Spec.OnDelete == agentsv1alpha1.DeleteClosePullRequest
	if controllerutil.ContainsFinalizer(sess, agentsv1alpha1.ClosePullRequestFinalizer) == want {
		return nil
	}
	patch := client.MergeFromWithOptions(sess.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(sess, agentsv1alpha1.ClosePullRequestFinalizer)
	} else {
		controllerutil.RemoveFinalizer(sess, agentsv1alpha1.ClosePullRequestFinalizer)
	}
	if err := r.Client.Patch(ctx, sess, patch); err != nil {
		return fmt.Errorf("patch the finalizer: %w", err)
	}
	return nil
}

// reconcileDeleting is the reconcile of a deleted session that holds ClosePullRequestFinalizer:
// the usual steps and decision (which, deleting, asks for nothing but the close), the status
// written, the close run as an action; then the finalizer goes once the decision has nothing
// left to close, or the forge could not close it within closePullRequestGiveUp.
func (r *AgentSessionReconciler) reconcileDeleting(ctx context.Context, req ctrl.Request, sess *agentsv1alpha1.AgentSession) (ctrl.Result, error) {
	orig := sess.DeepCopy()
	s := r.newScope(sess, req.NamespacedName)
	var recErr error
	for _, step := range r.steps() {
		if recErr = step(ctx, s); recErr != nil {
			break
		}
	}
	res, err := r.finishSession(ctx, s, orig, recErr)
	closing := s.decision != nil && slices.ContainsFunc(s.decision.Actions, func(a lifecycle.Action) bool { return a.Type == lifecycle.ActionClosePullRequest })
	waited, giveUp := s.now.Sub(sess.DeletionTimestamp.Time), closePullRequestGiveUp()
	if closing && waited < giveUp {
		// The close ran (or failed and is retried with back-off); the forge's answer, handed to
		// the Poller, brings the next reconcile, which finds nothing left to close.
		if res.IsZero() && err == nil {
			res.RequeueAfter = giveUp - waited
		}
		return res, err
	}
	if !closing && pullRequestOpen(sess) && waited < giveUp {
		// The status says open but the forge was not read for this decision (a restarted
		// manager, the forge down): wait for a read rather than close, or drop, on old news.
		if res.IsZero() && err == nil {
			res.RequeueAfter = time.Second
		}
		return res, err
	}
	if closing || pullRequestOpen(sess) {
		why := "the forge did not close it"
		if e := r.actionErrs.get(s.key); e != nil {
			why = e.Error()
		} else if recErr != nil {
			why = recErr.Error()
		}
		r.Recorder.Eventf(sess, nil, corev1.EventTypeWarning, agentsv1alpha1.ReasonPullRequestKept, "Delete",
			"Gave up closing the pull request after %s: %s; it stays open", giveUp, why)
	}
	patch := client.MergeFrom(sess.DeepCopy())
	controllerutil.RemoveFinalizer(sess, agentsv1alpha1.ClosePullRequestFinalizer)
	if perr := r.Client.Patch(ctx, sess, patch); perr != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("remove the finalizer: %w", perr))
	}
	return ctrl.Result{}, nil
}

// pullRequestOpen reports whether the session's status last saw its pull request open.
func pullRequestOpen(sess *agentsv1alpha1.AgentSession) bool {
	return sess.Status.PullRequest != nil && sess.Status.PullRequest.State == agentsv1alpha1.PullRequestOpen
}

// runClosePullRequest comments on the session's pull request, then closes it; the forge's
// answer is handed to the Poller as the pull request's observation, so the next decision sees
// it closed without a read. A crash between the comment and the close comments again on the
// retry (the close itself is idempotent; the comment is said once unless the manager stops in
// that instant).
func (r *AgentSessionReconciler) runClosePullRequest(ctx context.Context, s *sessionScope, a lifecycle.Action) error {
	if s.forge == nil {
		return fmt.Errorf("close pull request #%d: the forge is not connected: %w", a.PullRequestNumber, s.forgeErr)
	}
	n := int(a.PullRequestNumber)
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	if err := s.forge.Conn.Provider.Comment(cctx, s.forge.Repo, n, a.Text); err != nil {
		return fmt.Errorf("comment on pull request #%d: %w", n, err)
	}
	if err := s.forge.Conn.Provider.ClosePullRequest(cctx, s.forge.Repo, n); err != nil {
		return fmt.Errorf("close pull request #%d: %w", n, err)
	}
	ctrl.LoggerFrom(ctx).Info("Closed the session's pull request (deleted with onDelete ClosePullRequest, or superseded)", "number", n)
	r.observedOwnChange(s.key, n, func(pr *scm.PullRequest) { pr.State = scm.StateClosed })
	return nil
}
