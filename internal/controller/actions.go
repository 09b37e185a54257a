package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
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

// actionRunner runs one action. An edge action's runner records its own outcome as evidence and
// returns nil; a level action's error is returned, said on the session and retried.
type actionRunner func(ctx context.Context, s *sessionScope, a lifecycle.Action) error

// actionTable is the one place that says who runs each action type.
func (r *AgentSessionReconciler) actionTable() map[lifecycle.ActionType]actionRunner {
	return map[lifecycle.ActionType]actionRunner{
		lifecycle.ActionMerge:           r.runMerge,
		lifecycle.ActionOpenPullRequest: r.runOpenPullRequest,
		lifecycle.ActionSendToAgent:     r.runWake,
		// Notifications are queued in the status the decision wrote (status.notifications) and
		// handed to the dispatcher for every route not yet delivered (dispatch).
		lifecycle.ActionNotify:           r.runNotification,
		lifecycle.ActionEscalate:         r.runNotification,
		lifecycle.ActionCreateWorktree:   r.runCreateWorktree,
		lifecycle.ActionCreatePod:        r.runCreatePod,
		lifecycle.ActionDeletePod:        r.runDeletePod,
		lifecycle.ActionReleaseWorktree:  r.runReleaseWorktree,
		lifecycle.ActionClosePullRequest: r.runClosePullRequest,
		lifecycle.ActionMarkReady:        r.runMarkReady,
	}
}

// runActions runs the decision's actions, then hands every undelivered notification to the
// dispatcher. It returns false when the action hook stopped it, and the level actions' errors.
func (r *AgentSessionReconciler) runActions(ctx context.Context, s *sessionScope) (bool, error) {
	var errs []error
	if s.decision != nil {
		table := r.actionTable()
		for _, a := range s.decision.Actions {
			if !r.hook(ctx, BeforeAction, s.key, a) {
				return false, nil
			}
			run, ok := table[a.Type]
			if !ok {
				// TestActionTableRunsEveryAction keeps this from happening.
				ctrl.LoggerFrom(ctx).Error(fmt.Errorf("no runner for action %s", a.Type), "Action dropped", "action", a.ID)
				continue
			}
			if err := run(ctx, s, a); err != nil {
				errs = append(errs, err)
			}
			if !r.hook(ctx, AfterAction, s.key, a) {
				return false, nil
			}
		}
	}
	err := errors.Join(errs...)
	if (err == nil) != (s.actionErr == nil) {
		// The error the status shows changes: write it (or clear it) at once.
		s.requeue = time.Millisecond
	}
	if err != nil {
		r.actionErrs.set(s.key, err)
	} else {
		r.actionErrs.forget(s.key)
	}
	r.dispatch(ctx, s)
	return true, err
}

// perSession is what the controller keeps in memory per session, between its reconciles: the
// merge runner's record, the last level action's error. A restarted manager starts empty.
type perSession[T any] struct {
	mu sync.Mutex
	m  map[types.NamespacedName]T
}

func (p *perSession[T]) get(key types.NamespacedName) T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[key]
}

func (p *perSession[T]) set(key types.NamespacedName, v T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.NamespacedName]T{}
	}
	p.m[key] = v
}

func (p *perSession[T]) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
}

// runCreatePod creates the session's agent pod. Its name is deterministic: a pod the cache had
// not seen yet is found, not made twice.
// runOpenPullRequest runs the runner's waiting request: it opens the session's pull request,
// or retitles the open one (the forge has one open pull request per head branch), and answers
// the runner's call. The forge's answer is the Poller's observation at once: the next reconcile
// shows the pull request without waiting for a read. A failure is the runner's to see (its call
// is answered with it, and it asks again); it is not retried here.
func (r *AgentSessionReconciler) runOpenPullRequest(ctx context.Context, s *sessionScope, _ lifecycle.Action) error {
	ask := s.report.Ask
	if ask == nil {
		return nil
	}
	res, err := r.openPullRequest(ctx, s, ask.Request)
	r.Reports.AnswerPullRequest(s.key, ask.Seq, PullRequestAnswer{Result: res, Err: err})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Pull request not opened", "branch", ask.Request.Branch, "reason", err.Error())
	}
	return nil
}

func (r *AgentSessionReconciler) openPullRequest(ctx context.Context, s *sessionScope, req runnerapi.PullRequestRequest) (*runnerapi.PullRequestResult, error) {
	if s.forge == nil {
		return nil, fmt.Errorf("the forge is not connected: %w", s.forgeErr)
	}
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	pr, err := s.forge.Conn.Provider.CreatePullRequest(cctx, s.forge.Repo, scm.NewPullRequest{
		Head: scm.Head{Branch: req.Branch}, Base: req.Base, Title: req.Title, Body: req.Body,
		// An AgentTask's attempts open drafts until one is chosen (spec.pullRequest.draft).
		Draft: s.sess.Spec.PullRequest != nil && s.sess.Spec.PullRequest.Draft != nil && *s.sess.Spec.PullRequest.Draft,
	})
	if err != nil {
		if errors.Is(err, scm.ErrInvalid) {
			return nil, fmt.Errorf("the forge refused the pull request: %w: %w", err, runnerapi.ErrInvalid)
		}
		return nil, fmt.Errorf("open pull request: %w", err)
	}
	r.Hub.Observed(s.key, pr)
	ctrl.LoggerFrom(ctx).Info("Pull request open", "number", pr.Number, "url", pr.URL)
	return &runnerapi.PullRequestResult{Number: int64(pr.Number), URL: pr.URL, Created: s.sess.Status.PullRequest == nil}, nil
}

// runMarkReady takes the session's draft out of draft (an AgentTask chose it); the answer is
// handed to the Poller as its observation, so the next decision asks nothing.
func (r *AgentSessionReconciler) runMarkReady(ctx context.Context, s *sessionScope, a lifecycle.Action) error {
	if s.forge == nil {
		return fmt.Errorf("mark pull request #%d ready: the forge is not connected: %w", a.PullRequestNumber, s.forgeErr)
	}
	n := int(a.PullRequestNumber)
	cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
	defer cancel()
	if err := s.forge.Conn.Provider.MarkReadyForReview(cctx, s.forge.Repo, n); err != nil {
		return fmt.Errorf("mark pull request #%d ready: %w", n, err)
	}
	ctrl.LoggerFrom(ctx).Info("Pull request marked ready for review", "number", n)
	r.observedOwnChange(s.key, n, func(pr *scm.PullRequest) {
		pr.Draft = false
		if pr.MergeState == scm.MergeStateDraft {
			pr.MergeState = scm.MergeStateUnknown
		}
	})
	return nil
}

// observedOwnChange hands the Poller what an action just did to pull request n (closed it, took
// it out of draft) as its observation, so that the next decision does not ask for it again
// before the next read.
func (r *AgentSessionReconciler) observedOwnChange(key types.NamespacedName, n int, change func(*scm.PullRequest)) {
	if obs, ok := r.Hub.Get(key); ok && obs.PullRequest != nil && obs.PullRequest.Number == n {
		pr := *obs.PullRequest
		change(&pr)
		r.Hub.Observed(key, &pr)
	}
}

// runCreateWorktree creates the session's own Worktree, by its deterministic name, owned by the
// session, on the branch the reconcile resolved.
func (r *AgentSessionReconciler) runCreateWorktree(ctx context.Context, s *sessionScope, _ lifecycle.Action) error {
	if s.project == nil || s.worktree != nil || s.sess.Spec.WorktreeRef != nil {
		return nil
	}
	wt := &agentsv1alpha1.Worktree{ObjectMeta: metav1.ObjectMeta{
		Name: sessionWorktree(s.sess), Namespace: s.sess.Namespace,
		Labels: mergeLabels(managedLabels(s.project.Name), map[string]string{agentsv1alpha1.LabelSession: s.sess.Name}),
	}}
	wt.Spec.ProjectRef = agentsv1alpha1.LocalObjectReference{Name: s.project.Name}
	wt.Spec.Branch = agentsv1alpha1.BranchName(s.branch)
	if t := s.sess.Spec.Worktree; t != nil {
		wt.Spec.Base, wt.Spec.Mode, wt.Spec.Adopt, wt.Spec.Storage = t.Base, t.Mode, t.Adopt, t.Storage.DeepCopy()
	}
	if err := controllerutil.SetControllerReference(s.sess, wt, r.Scheme); err != nil {
		return fmt.Errorf("own Worktree: %w", err)
	}
	// Born with the Worktree controller's finalizer: it would add it on its first reconcile
	// anyway, and that is one write less per session in a fan-out.
	controllerutil.AddFinalizer(wt, agentsv1alpha1.WorktreeFinalizer)
	if err := r.Client.Create(ctx, wt); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("create Worktree: %w", err)
	}
	r.worktreesCreated.set(s.key, r.now())
	ctrl.LoggerFrom(ctx).Info("Created Worktree", "worktree", klog.KObj(wt), "branch", wt.Spec.Branch)
	// The pod asked for in the same decision is made from it (the object, not its status).
	s.worktree = wt
	return nil
}

func (r *AgentSessionReconciler) runCreatePod(ctx context.Context, s *sessionScope, _ lifecycle.Action) error {
	if s.project == nil || s.worktree == nil {
		return nil
	}
	if c := r.podsCreated.get(s.key); c.uid != "" && r.now().Sub(c.at) < podExpectation {
		return nil // made a moment ago; the cache has not shown it yet
	}
	vol := worktreeVolume(s.project.Name, s.worktree, worktreeMode(s.worktree, s.project))
	pod, err := r.agentPod(s.sess, s.project, s.worktree, vol, s.agent)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(s.sess, pod, r.Scheme); err != nil {
		return fmt.Errorf("own agent pod: %w", err)
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("create agent pod: %w", err)
	}
	r.podsCreated.set(s.key, podCreation{uid: string(pod.UID), at: r.now()})
	ctrl.LoggerFrom(ctx).Info("Created agent pod", "pod", klog.KObj(pod), "image", pod.Spec.Containers[0].Image)
	return nil
}

// runDeletePod deletes the agent pod the decision judged, by UID: a newer pod of the same name
// (the cache behind) is never deleted for it.
func (r *AgentSessionReconciler) runDeletePod(ctx context.Context, s *sessionScope, a lifecycle.Action) error {
	if s.pod == nil || string(s.pod.UID) != a.PodUID || (!s.pod.DeletionTimestamp.IsZero() && !a.Force) {
		return nil
	}
	uid := s.pod.UID
	opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
	if a.Force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	switch err := r.Client.Delete(ctx, s.pod, opts...); {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// The UID precondition failed: the pod judged is gone and a newer one has its name. The
		// next decision judges the newer one.
		return nil
	case err != nil:
		return fmt.Errorf("delete agent pod: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted agent pod", "pod", klog.KObj(s.pod), "force", a.Force, "node", s.pod.Spec.NodeName)
	return nil
}

// runReleaseWorktree sets the session's own Worktree Absent (the Project's cleanup policy after
// a merge): its checkout goes, the record and branch stay.
func (r *AgentSessionReconciler) runReleaseWorktree(ctx context.Context, s *sessionScope, _ lifecycle.Action) error {
	if s.worktree == nil || s.worktree.Spec.State == agentsv1alpha1.WorktreeAbsent {
		return nil
	}
	patch := client.MergeFrom(s.worktree.DeepCopy())
	s.worktree.Spec.State = agentsv1alpha1.WorktreeAbsent
	if s.worktree.Annotations == nil {
		s.worktree.Annotations = map[string]string{}
	}
	// The generation this patch makes (a spec change adds one): a later Present and Absent by
	// hand is another generation, which the guard protects again.
	s.worktree.Annotations[agentsv1alpha1.ReleasedAfterMergeAnnotation] = strconv.FormatInt(s.worktree.Generation+1, 10)
	if err := r.Client.Patch(ctx, s.worktree, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set Worktree Absent after merge: %w", err)
	}
	return nil
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
func (r *AgentSessionReconciler) runWake(_ context.Context, s *sessionScope, _ lifecycle.Action) error {
	if r.Wake != nil {
		r.Wake(s.key)
	}
	return nil
}

// Merge back-off after a transient failure: 2 s, doubling, at most 5 minutes (or the forge's own
// rate-limit reset, when later).
const (
	mergeBackoffBase = 2 * time.Second
	mergeBackoffMax  = 5 * time.Minute
)

// runMerge asks the forge to merge at the head the lifecycle approved, once per head while the
// record says it is under way or done, and records the outcome for the next decision.
func (r *AgentSessionReconciler) runMerge(ctx context.Context, s *sessionScope, a lifecycle.Action) error {
	if s.forge == nil {
		return nil
	}
	prev := r.merges.get(s.key)
	if prev.For(a.PullRequestNumber, a.ExpectedHeadSHA) &&
		(prev.Outcome == lifecycle.MergeInFlight || prev.Outcome == lifecycle.MergeSucceeded || prev.Outcome == lifecycle.MergeRefused) {
		return nil
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
		return nil
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
	return nil
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
