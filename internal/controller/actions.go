package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

// The actions of a decision run here, in the order the decision lists them, only after the
// status write that recorded the decision succeeded: the status holds what makes each action
// idempotent (docs/architecture.md lists every action with its key), so a manager that stops
// anywhere around an action repeats at most what the forge or the runner makes harmless.

// ActionPoint names a place around an action at which a test may stop the manager.
type ActionPoint string

// Action points.
const (
	// BeforeAction: the decision is written, its action not run yet.
	BeforeAction ActionPoint = "BeforeAction"
	// AfterAction: the action ran, and what it did is not written anywhere yet.
	AfterAction ActionPoint = "AfterAction"
)

// ActionHook is called at every action point (Config.ActionHook; the crash-point tests set it,
// a manager never does). An error stops the reconcile there, as a crash would: nothing more of
// that decision runs.
type ActionHook func(ctx context.Context, point ActionPoint, session types.NamespacedName, a lifecycle.Action) error

// actionRunner runs one action.
type actionRunner func(ctx context.Context, s *sessionScope, a lifecycle.Action)

// actionTable is the one place that says who runs each action type.
func (r *AgentSessionReconciler) actionTable() map[lifecycle.ActionType]actionRunner {
	return map[lifecycle.ActionType]actionRunner{
		lifecycle.ActionMerge:       r.runMerge,
		lifecycle.ActionSendToAgent: r.runWake,
		// Notifications are queued in the status the decision wrote (status.notifications) and
		// handed to the dispatcher for every route not yet delivered (dispatch).
		lifecycle.ActionNotify:   r.runNotification,
		lifecycle.ActionEscalate: r.runNotification,
	}
}

// runActions runs the decision's actions, then hands every undelivered notification to the
// dispatcher. It returns false when the action hook stopped it.
func (r *AgentSessionReconciler) runActions(ctx context.Context, s *sessionScope) bool {
	if s.decision != nil {
		table := r.actionTable()
		for _, a := range s.decision.Actions {
			if !r.hook(ctx, BeforeAction, s.key, a) {
				return false
			}
			run, ok := table[a.Type]
			if !ok {
				// The lifecycle's action table test keeps this from happening.
				ctrl.LoggerFrom(ctx).Error(fmt.Errorf("no runner for action %s", a.Type), "Action dropped", "action", a.ID)
				continue
			}
			run(ctx, s, a)
			if !r.hook(ctx, AfterAction, s.key, a) {
				return false
			}
		}
	}
	r.dispatch(ctx, s)
	return true
}

func (r *AgentSessionReconciler) hook(ctx context.Context, p ActionPoint, key types.NamespacedName, a lifecycle.Action) bool {
	if r.ActionHook == nil {
		return true
	}
	if err := r.ActionHook(ctx, p, key, a); err != nil {
		ctrl.LoggerFrom(ctx).Info("Stopped at an action point", "point", p, "action", a.ID, "reason", err.Error())
		return false
	}
	return true
}

// runWake tells the runner channel that a message waits (its long poll returns at once). The
// message itself is in status.messages.pending, written with the decision.
func (r *AgentSessionReconciler) runWake(_ context.Context, s *sessionScope, _ lifecycle.Action) {
	if r.Wake != nil {
		r.Wake(s.key)
	}
}

// runNotification hands the notification the action queued to the dispatcher.
func (r *AgentSessionReconciler) runNotification(ctx context.Context, s *sessionScope, a lifecycle.Action) {
	if r.Notifier == nil || s.project == nil {
		return
	}
	for _, n := range s.sess.Status.Notifications {
		if n.ID != clip.To(a.ID, 128) {
			continue
		}
		for _, route := range n.Routes {
			r.enqueue(ctx, s, n, route)
		}
	}
}

// Merge back-off after a transient failure: 2 s, doubling, at most 5 minutes (or the forge's own
// rate-limit reset, when later).
const (
	mergeBackoffBase = 2 * time.Second
	mergeBackoffMax  = 5 * time.Minute
)

// mergeRecords is the merge runner's record per session: what became of the last merge it ran.
// It is evidence for the next decision (lifecycle.Input.Merge). It lives in memory: a restarted
// manager has none, and the lifecycle asks for the merge again.
type mergeRecords struct {
	mu sync.Mutex
	m  map[types.NamespacedName]lifecycle.MergeEvidence
}

func (m *mergeRecords) get(key types.NamespacedName) lifecycle.MergeEvidence {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key]
}

func (m *mergeRecords) set(key types.NamespacedName, ev lifecycle.MergeEvidence) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[types.NamespacedName]lifecycle.MergeEvidence{}
	}
	m.m[key] = ev
}

func (m *mergeRecords) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// runMerge asks the forge to merge at the head the lifecycle approved, once per head while the
// record says it is under way or done, and records the outcome for the next decision.
func (r *AgentSessionReconciler) runMerge(ctx context.Context, s *sessionScope, a lifecycle.Action) {
	if s.forge == nil {
		return
	}
	prev := r.merges.get(s.key)
	if prev.For(a.PullRequestNumber, a.ExpectedHeadSHA) &&
		(prev.Outcome == lifecycle.MergeInFlight || prev.Outcome == lifecycle.MergeSucceeded || prev.Outcome == lifecycle.MergeRefused) {
		return
	}
	rec := lifecycle.MergeEvidence{PullRequestNumber: a.PullRequestNumber, HeadSHA: a.ExpectedHeadSHA, Outcome: lifecycle.MergeInFlight, Attempts: 1}
	if prev.For(a.PullRequestNumber, a.ExpectedHeadSHA) {
		rec.Attempts = prev.Attempts + 1
	}
	r.merges.set(s.key, rec)

	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	res, err := s.forge.Conn.Provider.MergePullRequest(cctx, s.forge.Repo, int(a.PullRequestNumber), scm.MergeOptions{
		Method: scm.MergeMethod(a.MergeMethod), ExpectedHeadSHA: a.ExpectedHeadSHA,
	})
	cancel()
	now := r.now()
	log := ctrl.LoggerFrom(ctx).WithValues("pullRequest", a.PullRequestNumber, "head", a.ExpectedHeadSHA, "attempt", rec.Attempts)
	rec = mergeOutcome(rec, res, err, now)
	r.merges.set(s.key, rec)
	switch rec.Outcome {
	case lifecycle.MergeSucceeded:
		log.Info("Merged pull request", "mergeCommit", res.SHA)
		// The next decision says Merged from this record at once; the forge's re-read confirms.
		s.requeue = time.Millisecond
	case lifecycle.MergeRetrying:
		log.Info("Merge failed for now; retrying", "error", err.Error(), "retryAt", rec.RetryAt)
		s.requeue = rec.RetryAt.Sub(now)
		return
	case lifecycle.MergeHeadMoved:
		log.Info("Merge refused: the head moved", "error", err.Error())
	default:
		log.Error(err, "Merge refused")
		if r.Recorder != nil {
			r.Recorder.Eventf(s.sess, nil, corev1.EventTypeWarning, agentsv1alpha1.ReasonMergeFailed, "Merge",
				"merge of #%d at %s refused: %v", a.PullRequestNumber, shortSHA(a.ExpectedHeadSHA), err)
		}
		s.requeue = time.Millisecond
	}
	r.Hub.Notify(scm.Hint{Repo: s.forge.Repo, Event: "merge", Numbers: []int{int(a.PullRequestNumber)}})
}

// mergeOutcome classifies the forge's answer to a merge call. Pure.
func mergeOutcome(rec lifecycle.MergeEvidence, res scm.MergeResult, err error, now time.Time) lifecycle.MergeEvidence {
	switch {
	case err == nil:
		rec.Outcome, rec.MergeCommitSHA, rec.Error = lifecycle.MergeSucceeded, res.SHA, ""
	case errors.Is(err, scm.ErrHeadChanged):
		rec.Outcome, rec.Error = lifecycle.MergeHeadMoved, err.Error()
	case scm.Retryable(err) || errors.Is(err, context.DeadlineExceeded):
		backoff := min(mergeBackoffBase<<min(rec.Attempts-1, 16), mergeBackoffMax)
		rec.Outcome, rec.Error, rec.RetryAt = lifecycle.MergeRetrying, err.Error(), now.Add(backoff)
		if reset := scm.RetryAfter(err); reset.After(rec.RetryAt) {
			rec.RetryAt = reset
		}
	default:
		rec.Outcome, rec.Error = lifecycle.MergeRefused, err.Error()
	}
	return rec
}
