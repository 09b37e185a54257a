package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=worktrees,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=worktrees/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;create;update;patch;delete

// WorktreeReconciler gives each Worktree a usable checkout (or removes it when Absent), reports
// what is in it, and protects unpushed work from deletion.
//
// Who makes the checkout: while a session's agent pod uses the Worktree, that pod's prepare init
// container does (it runs in the agent image, with the agent's toolchain for setup commands);
// otherwise the controller runs a short worktree pod with the same prepare. Both leave their
// result in the container's termination message, which survives a manager restart.
type WorktreeReconciler struct {
	*Deps
	// Events wakes a Worktree whose checkout a runner reported gone (ReportStore.OnWorktreeChange).
	Events chan event.GenericEvent
}

// worktreeScope is what one Worktree reconcile observed.
type worktreeScope struct {
	wt      *agentsv1alpha1.Worktree
	project *agentsv1alpha1.Project
	mode    agentsv1alpha1.WorkspaceMode
	vol     checkoutVolume
	// volumeFound is false when the checkout's volume claim does not exist (yet, or any more).
	volumeFound bool
	// volumeRecreated is true when the claim had to be made again after the checkout was Ready.
	volumeRecreated bool
	// checkoutLost is true when a prepare newer than the status made the checkout anew although
	// the Worktree was Ready: its directory had been deleted behind Shepherd's back.
	checkoutLost bool
	bound        []string
	// sessions are the AgentSessions bound to the Worktree (not being deleted).
	sessions []agentsv1alpha1.AgentSession
	// sessionPods are the agent pods of sessions using this Worktree.
	sessionPods []corev1.Pod
	// wtPod is the Worktree's own prepare/remove pod.
	wtPod   *corev1.Pod
	result  checkoutResult
	hasRes  bool
	live    *runnerapi.WorkspaceReport
	liveAt  time.Time
	removed bool
	// blocked explains why removal or deletion waits, when it does.
	blocked       string
	blockedReason string
	requeue       time.Duration
}

// Reconcile follows the fixed shape.
func (r *WorktreeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	wt := &agentsv1alpha1.Worktree{}
	if err := r.Client.Get(ctx, req.NamespacedName, wt); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wt.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(wt, agentsv1alpha1.WorktreeFinalizer) {
		patch := client.MergeFrom(wt.DeepCopy())
		controllerutil.AddFinalizer(wt, agentsv1alpha1.WorktreeFinalizer)
		if err := r.Client.Patch(ctx, wt, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	orig := wt.DeepCopy()
	s := &worktreeScope{wt: wt}
	var recErr error
	defer func() {
		if !wt.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(wt, agentsv1alpha1.WorktreeFinalizer) {
			return // released: the object is going away
		}
		setWorktreeStatus(wt, s, recErr)
		if wait, quiet := quietStart(orig, wt, s, recErr, r.now()); quiet {
			res = ctrl.Result{RequeueAfter: wait}
			return
		}
		if err := patchStatus(ctx, r.Client, orig, wt); err != nil {
			res, retErr = statusWriteFailed(recErr, err)
			return
		}
		emitConditionEvents(r.Recorder, orig.Status.Conditions, wt.Status.Conditions, wt,
			agentsv1alpha1.ConditionSetupSucceeded, agentsv1alpha1.ConditionDeletionBlocked)
		// A session's own Worktree's first Ready is never said; where the Project omits routine
		// events, no routine phase change is.
		quiet := routineReady(wt, orig.Status.Phase) || s.project.OmitsRoutineEvents() && routineWorktreePhase(orig.Status.Phase, wt.Status.Phase)
		if !quiet {
			emitPhaseEvent(r.Recorder, wt, string(orig.Status.Phase), string(wt.Status.Phase))
		}
		if s.checkoutLost && r.Recorder != nil {
			// Once: the status just written has observed the new checkout.
			r.Recorder.Eventf(wt, nil, corev1.EventTypeWarning, agentsv1alpha1.ReasonCheckoutMissing, "Prepare", "%s", lostCheckoutMessage(orig, wt))
		}
		res, retErr = finish(ctx, r.Recorder, wt, orig.Status.Conditions, wt.Status.Conditions, recErr, s.requeue)
	}()

	steps := []func(context.Context, *worktreeScope) error{
		r.resolveProject,
		r.observe,
	}
	if !wt.DeletionTimestamp.IsZero() {
		steps = append(steps, r.reconcileDelete)
	} else if wt.Spec.State == agentsv1alpha1.WorktreeAbsent {
		steps = append(steps, r.reconcileAbsent)
	} else {
		steps = append(steps, r.reconcileVolume, r.reconcilePresent)
	}
	for _, step := range steps {
		if recErr = step(ctx, s); recErr != nil {
			break
		}
	}
	return res, retErr
}

func (r *WorktreeReconciler) resolveProject(ctx context.Context, s *worktreeScope) error {
	p := &agentsv1alpha1.Project{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.wt.Namespace, Name: s.wt.Spec.ProjectRef.Name}, p)
	if apierrors.IsNotFound(err) {
		if !s.wt.DeletionTimestamp.IsZero() {
			// Deleting a Worktree whose Project is gone: nothing is left to clean up through it.
			return nil
		}
		return Stalling(agentsv1alpha1.ReasonProjectNotFound, "Project %q not found in namespace %s: create it, or point spec.projectRef at an existing Project", s.wt.Spec.ProjectRef.Name, s.wt.Namespace)
	}
	if err != nil {
		return fmt.Errorf("get Project: %w", err)
	}
	s.project = p
	s.mode = worktreeMode(s.wt, p)
	s.vol = worktreeVolume(p.Name, s.wt, s.mode)
	return nil
}

// observe reads the sessions bound to the Worktree, the pods that prepare it and the live facts
// the runners reported.
func (r *WorktreeReconciler) observe(ctx context.Context, s *worktreeScope) error {
	var sessions agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &sessions, client.InNamespace(s.wt.Namespace), client.MatchingFields{indexWorktree: s.wt.Name}); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	for _, sess := range sessions.Items {
		if !sess.DeletionTimestamp.IsZero() {
			continue
		}
		s.bound = append(s.bound, sess.Name)
		s.sessions = append(s.sessions, sess)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(s.wt.Namespace), client.MatchingFields{indexPodWorktree: s.wt.Name}); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		p := pods.Items[i]
		switch p.Labels[componentLabel] {
		case componentAgent:
			s.sessionPods = append(s.sessionPods, p)
		case componentWorktree:
			s.wtPod = &p
		}
	}
	s.result, s.hasRes = latestResult(pods.Items)
	s.live, s.liveAt = r.Reports.Worktree(s.wt.Namespace, s.wt.Name)
	s.checkoutLost = checkoutLost(s.wt, s.result, s.hasRes)
	return nil
}

// firstStatusWait is how long a session's new Worktree may go without a status while its
// session's pod prepares it.
const firstStatusWait = 30 * time.Second

// quietStart reports whether the first status of a Worktree is not written yet, and when to look
// again. A session's own Worktree, new, whose agent pod (made in the same step as the
// Worktree) is preparing it or about to, has nothing to say before the prepare's result but "Pending,
// preparing the checkout", which its session already says ("Waiting for the workspace"): its
// first status is written with the result, or firstStatusWait after it was created, or as
// soon as anything else is to be said (an error, a blocked deletion, another phase). In a
// fan-out that is one stored write less per session (issue 23). A Worktree a user applies is
// always written at once. Pure.
func quietStart(orig, now *agentsv1alpha1.Worktree, s *worktreeScope, err error, at time.Time) (time.Duration, bool) {
	if err != nil || orig.Status.Phase != "" || orig.Status.ObservedGeneration != 0 || now.Status.Phase != agentsv1alpha1.WorktreePending ||
		now.Labels[agentsv1alpha1.LabelSession] == "" || !now.DeletionTimestamp.IsZero() || s.project == nil || s.blocked != "" ||
		len(s.sessionPods) > 1 || s.wtPod != nil {
		return 0, false
	}
	if c := findCondition(now.Status.Conditions, agentsv1alpha1.ConditionReady); c == nil || c.Message != checkoutPendingMessage {
		return 0, false
	}
	for _, pod := range s.sessionPods {
		if !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return 0, false
		}
	}
	// The Worktree's age: its pod is made right after it (the cache may not show it yet).
	left := now.CreationTimestamp.Add(firstStatusWait).Sub(at)
	if left <= 0 {
		return 0, false
	}
	return left, true
}

// checkoutLost reports whether result, newer than what the status last observed, made the
// checkout anew (not Restored) while the Worktree was Ready (or Missing) with a known head: the checkout's
// directory was gone. Pure.
func checkoutLost(wt *agentsv1alpha1.Worktree, res checkoutResult, has bool) bool {
	st := wt.Status
	if !has || !res.OK || res.Result.Restored || st.Phase != agentsv1alpha1.WorktreeReady && st.Phase != agentsv1alpha1.WorktreeMissing || st.Head == "" {
		return false
	}
	return st.LastObservedTime == nil || res.Finished.Truncate(time.Second).After(st.LastObservedTime.Time)
}

// lostCheckoutMessage says what a vanished checkout took with it, from the last status.
func lostCheckoutMessage(orig *agentsv1alpha1.Worktree, now *agentsv1alpha1.Worktree) string {
	lost := "nothing unpushed was known to be in it"
	switch st := orig.Status; {
	case st.UnpushedCommits > 0 && st.Dirty:
		lost = fmt.Sprintf("its %d unpushed commit(s) and uncommitted changes are lost", st.UnpushedCommits)
	case st.UnpushedCommits > 0:
		lost = fmt.Sprintf("its %d unpushed commit(s) are lost", st.UnpushedCommits)
	case st.Dirty:
		lost = "its uncommitted changes are lost"
	}
	return fmt.Sprintf("the checkout %s had vanished (deleted outside Shepherd) and was made again from branch %s at %s; %s",
		orig.Status.Path, now.Spec.Branch, shortSHA(now.Status.Head), lost)
}

// activeSessionPods reports whether a session's agent pod is (or may be) using the checkout.
func (s *worktreeScope) activeSessionPods() bool {
	for _, p := range s.sessionPods {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}

// resultMayFollow reports whether, with no result yet, a session's pod that is being deleted
// and has not ended may still report its checkout step's: until its grace period is over, and
// half a minute more for the kubelet's last word (a pod stuck on a lost node does not hold the
// checkout up for ever). Pure.
func (s *worktreeScope) resultMayFollow(now time.Time) bool {
	if s.hasRes {
		return false
	}
	for _, p := range s.sessionPods {
		if p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if now.Before(p.DeletionTimestamp.Add(resultGrace)) {
			return true
		}
	}
	return false
}

// resultGrace is how long after a deleted session pod's grace period the Worktree still waits
// for its last status.
const resultGrace = 30 * time.Second

// sessionWillPrepare reports whether a bound session is about to run an agent pod: it is new or
// holds a slot, and is neither stopped nor finished.
func (s *worktreeScope) sessionWillPrepare() bool {
	for i := range s.sessions {
		sess := &s.sessions[i]
		p := sess.Status.Phase
		if sess.Spec.State == agentsv1alpha1.SessionStopped || p.IsTerminal() || p == agentsv1alpha1.PhaseQueued {
			continue
		}
		if p == "" || sess.Status.AdmittedTime != nil {
			return true
		}
	}
	return false
}

// reconcileVolume ensures the claim that holds the checkout: the Worktree's own in clone mode;
// the Project's workspace volume (made by the Project controller) in worktree mode, and in clone
// mode too when the Project shares paths, since the pods mount it for their cache.
func (r *WorktreeReconciler) reconcileVolume(ctx context.Context, s *worktreeScope) error {
	if s.mode == agentsv1alpha1.WorkspaceWorktree {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.wt.Namespace, Name: s.vol.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			return Waiting(minRequeue, agentsv1alpha1.ReasonCheckoutPending, "waiting for the Project's workspace volume %s", s.vol.ClaimName)
		}
		if err != nil {
			return fmt.Errorf("get workspace volume: %w", err)
		}
		s.volumeFound = true
		return nil
	}
	if _, claim := sharedCache(s.project, s.mode); claim != "" {
		// The pods mount the Project's workspace volume for the shared paths' cache.
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.wt.Namespace, Name: claim}, &corev1.PersistentVolumeClaim{})
		if apierrors.IsNotFound(err) {
			return Waiting(minRequeue, agentsv1alpha1.ReasonCheckoutPending, "waiting for the Project's workspace volume %s, which holds the cache of spec.workspace.sharedPaths", claim)
		}
		if err != nil {
			return fmt.Errorf("get workspace volume: %w", err)
		}
	}
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.wt.Namespace, Name: s.vol.ClaimName}, pvc)
	switch {
	case err == nil:
		s.volumeFound = true
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get checkout volume: %w", err)
	}
	pvc = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: s.vol.ClaimName, Namespace: s.wt.Namespace,
		Labels: mergeLabels(managedLabels(s.project.Name), map[string]string{
			agentsv1alpha1.LabelWorktree: s.wt.Name, componentLabel: componentVolume,
		}),
	}}
	pvc.Spec = claimSpec(s.project.Spec.Workspace.Storage, s.wt.Spec.Storage)
	if err := controllerutil.SetControllerReference(s.wt, pvc, r.Scheme); err != nil {
		return fmt.Errorf("own checkout volume: %w", err)
	}
	if err := r.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create checkout volume: %w", err)
	}
	s.volumeFound = true
	if s.wt.Status.Phase == agentsv1alpha1.WorktreeReady || s.wt.Status.Phase == agentsv1alpha1.WorktreeMissing {
		s.volumeRecreated = true
	}
	return nil
}

// reconcilePresent makes sure a checkout exists. A session pod prepares it when one runs;
// otherwise the Worktree's own pod does, once per generation.
func (r *WorktreeReconciler) reconcilePresent(ctx context.Context, s *worktreeScope) error {
	// A remove pod left from an earlier Absent: clear it before preparing again.
	if s.wtPod != nil && s.wtPod.Annotations[annotationOperation] != operationPrepare {
		return r.deletePod(ctx, s.wtPod, "the Worktree is Present again")
	}
	if s.activeSessionPods() {
		// The session's pod prepares the checkout; its result lands in its checkout step's
		// container status.
		return nil
	}
	if s.resultMayFollow(r.now()) {
		// A session's pod is going away: its last status may still bring the checkout step's
		// result (its runner can report, and the session be stopped, before the kubelet said the
		// step ended). A pod of our own now would only make the checkout again.
		s.requeue = minRequeue
		return nil
	}
	if phase, _ := worktreePhase(s.wt, s); phase == agentsv1alpha1.WorktreeReady || phase == agentsv1alpha1.WorktreeFailed {
		return nil // Ready (the checkout stays on its volume), or Failed until the spec changes.
	}
	if s.wtPod == nil && s.sessionWillPrepare() {
		// A session's agent pod is on its way and prepares the checkout in its init container;
		// a pod of our own would only race it. Look again soon in case the session stalls.
		s.requeue = minRequeue
		return nil
	}
	if s.wtPod != nil {
		if done := s.wtPod.Status.Phase == corev1.PodSucceeded || s.wtPod.Status.Phase == corev1.PodFailed; done {
			// Finished for another generation or volume: run it again.
			return r.deletePod(ctx, s.wtPod, "a new prepare is needed")
		}
		s.requeue = minRequeue
		return nil
	}
	pod, err := r.worktreePod(s.project, s.wt, s.vol, operationPrepare)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(s.wt, pod, r.Scheme); err != nil {
		return fmt.Errorf("own worktree pod: %w", err)
	}
	if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create worktree pod: %w", err)
	}
	return nil
}

// removalGuard refuses to remove a checkout that a session uses or that holds unpushed commits,
// unless the force-delete annotation is set.
func (s *worktreeScope) removalGuard(deleting bool) {
	if s.wt.Annotations[agentsv1alpha1.ForceDeleteAnnotation] == "true" {
		return
	}
	if len(s.bound) > 0 && (deleting || s.activeSessionPods()) {
		s.blockedReason = agentsv1alpha1.ReasonSessionBound
		s.blocked = fmt.Sprintf("sessions %v use this Worktree: delete or stop them first, or annotate %s=true to force", s.bound, agentsv1alpha1.ForceDeleteAnnotation)
		return
	}
	if n := s.unpushed(); n > 0 {
		s.blockedReason = agentsv1alpha1.ReasonUnpushedCommits
		s.blocked = fmt.Sprintf("the checkout holds %d unpushed commit(s): push them, or annotate %s=true to remove it anyway (they will be lost)", n, agentsv1alpha1.ForceDeleteAnnotation)
		return
	}
	if s.dirty() && s.wt.Annotations[agentsv1alpha1.ReleasedAfterMergeAnnotation] != strconv.FormatInt(s.wt.Generation, 10) {
		s.blockedReason = agentsv1alpha1.ReasonUncommittedChanges
		s.blocked = fmt.Sprintf("the checkout has uncommitted changes: commit and push them, or annotate %s=true to remove it anyway (they will be lost)", agentsv1alpha1.ForceDeleteAnnotation)
	}
}

// dirty is the freshest word on uncommitted changes (tracked or untracked files): a live report
// newer than the last prepare, the prepare's facts, or the status.
func (s *worktreeScope) dirty() bool {
	if s.live != nil && (!s.hasRes || s.liveAt.After(s.result.Finished)) {
		return s.live.Dirty
	}
	if s.hasRes && s.result.OK {
		return s.result.Result.Facts.Dirty
	}
	return s.wt.Status.Dirty
}

// unpushed is the freshest count of unpushed commits.
func (s *worktreeScope) unpushed() int32 {
	if s.live != nil && (!s.hasRes || s.liveAt.After(s.result.Finished)) {
		return s.live.UnpushedCommits
	}
	if s.hasRes && s.result.OK {
		return int32(s.result.Result.Facts.Unpushed)
	}
	return s.wt.Status.UnpushedCommits
}

// reconcileAbsent removes the checkout and keeps the record and the branch.
func (r *WorktreeReconciler) reconcileAbsent(ctx context.Context, s *worktreeScope) error {
	if s.wt.Status.Phase == agentsv1alpha1.WorktreeRemoved {
		s.removed = true
		return nil
	}
	s.removalGuard(false)
	if s.blocked != "" {
		return Stalling(s.blockedReason, "cannot remove the checkout: %s", s.blocked)
	}
	done, err := r.removeCheckout(ctx, s)
	s.removed = done
	return err
}

// reconcileDelete removes the checkout, then releases the finalizer.
func (r *WorktreeReconciler) reconcileDelete(ctx context.Context, s *worktreeScope) error {
	if !controllerutil.ContainsFinalizer(s.wt, agentsv1alpha1.WorktreeFinalizer) {
		return nil
	}
	s.removalGuard(true)
	why, err := r.abandoned(ctx, s)
	if err != nil {
		return err
	}
	if why != "" && (s.blocked != "" || s.mode != agentsv1alpha1.WorkspaceClone) {
		// Nothing can remove or save the checkout now (a guard would wait for commits that go
		// with the volume; a remove pod could not mount it): waiting would block the namespace's
		// deletion forever (docs/worktree.md, deletion).
		if r.Recorder != nil {
			r.Recorder.Eventf(s.wt, nil, corev1.EventTypeWarning, agentsv1alpha1.ReasonCheckoutAbandoned, "Delete",
				"the checkout cannot be removed: %s; the Worktree is released, and what the checkout held goes with its volume", why)
		}
		return r.releaseFinalizer(ctx, s)
	}
	if s.blocked != "" {
		return Stalling(s.blockedReason, "deletion waits: %s", s.blocked)
	}
	if s.project != nil {
		done, err := r.removeCheckout(ctx, s)
		if err != nil || !done {
			return err
		}
	}
	return r.releaseFinalizer(ctx, s)
}

func (r *WorktreeReconciler) releaseFinalizer(ctx context.Context, s *worktreeScope) error {
	patch := client.MergeFrom(s.wt.DeepCopy())
	controllerutil.RemoveFinalizer(s.wt, agentsv1alpha1.WorktreeFinalizer)
	if err := r.Client.Patch(ctx, s.wt, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	return nil
}

// abandoned says why a Worktree being deleted can no longer have its checkout removed (or
// saved) through a pod: its Project is gone or being deleted (its volume goes with it), or the
// checkout's volume claim is gone or being deleted. Empty when the removal can go on.
func (r *WorktreeReconciler) abandoned(ctx context.Context, s *worktreeScope) (string, error) {
	switch {
	case s.project == nil:
		return "its Project is gone", nil
	case !s.project.DeletionTimestamp.IsZero():
		return "its Project is being deleted", nil
	case s.vol.ClaimName == "":
		return "", nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.wt.Namespace, Name: s.vol.ClaimName}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its volume claim %s is gone", s.vol.ClaimName), nil
	case err != nil:
		return "", fmt.Errorf("get checkout volume: %w", err)
	case !pvc.DeletionTimestamp.IsZero() && s.mode != agentsv1alpha1.WorkspaceClone:
		// In clone mode the claim is the Worktree's own, and its deletion is the removal itself.
		return fmt.Sprintf("its volume claim %s is being deleted", s.vol.ClaimName), nil
	}
	return "", nil
}

// removeCheckout deletes the clone's volume, or runs the runner's remove in worktree mode (so the
// mirror forgets the worktree). It reports true once the checkout is gone.
func (r *WorktreeReconciler) removeCheckout(ctx context.Context, s *worktreeScope) (bool, error) {
	if s.activeSessionPods() {
		for i := range s.sessionPods {
			if err := r.deletePod(ctx, &s.sessionPods[i], "the Worktree is being removed"); err != nil {
				return false, err
			}
		}
		s.requeue = minRequeue
		return false, nil
	}
	if s.mode == agentsv1alpha1.WorkspaceClone {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: s.vol.ClaimName, Namespace: s.wt.Namespace}}
		err := r.Client.Delete(ctx, pvc)
		if apierrors.IsNotFound(err) {
			if s.wtPod != nil {
				return false, r.deletePod(ctx, s.wtPod, "the checkout is removed")
			}
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("delete checkout volume: %w", err)
		}
		s.requeue = minRequeue
		return false, nil
	}
	if s.wtPod != nil && s.wtPod.Annotations[annotationOperation] != operationRemove {
		return false, r.deletePod(ctx, s.wtPod, "the checkout is being removed")
	}
	if s.wtPod == nil {
		pod, err := r.worktreePod(s.project, s.wt, s.vol, operationRemove)
		if err != nil {
			return false, err
		}
		if err := controllerutil.SetControllerReference(s.wt, pod, r.Scheme); err != nil {
			return false, fmt.Errorf("own worktree pod: %w", err)
		}
		if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create remove pod: %w", err)
		}
		s.requeue = minRequeue
		return false, nil
	}
	switch s.wtPod.Status.Phase {
	case corev1.PodSucceeded:
		return true, nil
	case corev1.PodFailed:
		msg := "the remove pod failed"
		if r, ok := prepareResult(s.wtPod, operationRemove, s.wtPod.Status.ContainerStatuses); ok && r.Error != "" {
			msg = r.Error
		}
		return false, Stalling(agentsv1alpha1.ReasonCheckoutFailed, "remove the checkout: %s (see kubectl logs %s)", msg, s.wtPod.Name)
	}
	s.requeue = minRequeue
	return false, nil
}

func (r *WorktreeReconciler) deletePod(ctx context.Context, pod *corev1.Pod, why string) error {
	if !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting pod", "pod", client.ObjectKeyFromObject(pod), "reason", why)
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// SetupWithManager watches Worktrees, their pods and volumes, the sessions that bind them, and
// their Projects.
func (r *WorktreeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Events != nil {
		b = b.WatchesRawSource(source.Channel(r.Events, &handler.EnqueueRequestForObject{}))
	}
	return b.
		For(&agentsv1alpha1.Worktree{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if wt := o.GetLabels()[agentsv1alpha1.LabelWorktree]; wt != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: wt}}}
			}
			return nil
		})).
		Watches(&agentsv1alpha1.AgentSession{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: sessionWorktree(o.(*agentsv1alpha1.AgentSession))}}}
		}), builder.WithPredicates(createOrDelete())).
		// The Project's status changes with every session it counts; its Worktrees follow its spec
		// only (and its creation and deletion).
		Watches(&agentsv1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return namingProject(ctx, r.Client, &agentsv1alpha1.WorktreeList{}, o)
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("worktree").
		Complete(r)
}

// routineWorktreePhase reports whether a change of phase from before to after is routine, its
// event left out where the Project says spec.events.routine: Omit. Failed and Missing are news,
// and so is the way out of them (the pair tells what happened). Pure.
func routineWorktreePhase(before, after agentsv1alpha1.WorktreePhase) bool {
	news := func(p agentsv1alpha1.WorktreePhase) bool {
		return p == agentsv1alpha1.WorktreeFailed || p == agentsv1alpha1.WorktreeMissing
	}
	return !news(before) && !news(after)
}

// routineReady says a session's own Worktree became Ready for the first time: routine (the
// session's events tell its start; a fan-out would write one more event per session for it).
// A shared Worktree's, and a restore's (Missing → Ready), are still said.
func routineReady(wt *agentsv1alpha1.Worktree, before agentsv1alpha1.WorktreePhase) bool {
	if wt.Status.Phase != agentsv1alpha1.WorktreeReady || before != "" && before != agentsv1alpha1.WorktreePending {
		return false
	}
	ref := metav1.GetControllerOf(wt)
	return ref != nil && ref.Kind == "AgentSession"
}
