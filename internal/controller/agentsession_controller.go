package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/gitref"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=agentsessions/finalizers,verbs=update
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=worktrees,verbs=create;delete
// +kubebuilder:rbac:groups=core,resources=nodes,verbs=get;list;watch

// AgentSessionReconciler drives one session from spawn to merge: admission, its Worktree, the
// agent pod, the runner's reports, the forge's view of the pull request, the lifecycle engine's
// decision, and the reactions it asks for.
type AgentSessionReconciler struct {
	*Deps
	// Wake tells the runner channel that a session has new messages (long polls return at once).
	Wake func(types.NamespacedName)
	// Events receives reconcile requests from outside the cluster (runner reports, the forge).
	Events chan event.GenericEvent

	// ActionHook, when set, is called around every action (tests stop the manager there).
	ActionHook ActionHook

	// merges is the merge runner's record per session, evidence for the next decision: what
	// became of the last merge it ran.
	merges perSession[lifecycle.MergeEvidence]
	// actionErrs is the last failed level action per session, said in the next status.
	actionErrs perSession[error]
	// podsCreated are the agent pods this manager created and its cache has not shown yet, by
	// session: when (the expectations of the ReplicaSet controller). A reconcile that runs before
	// the pod's watch event (its Worktree's event comes first) would otherwise ask the API server
	// to create it again and be refused: about half a request per session in a fan-out.
	podsCreated perSession[podCreation]
	// statusWrites is, by session, the version its last status write replaced, until a reconcile
	// reads a newer one from the cache (cacheBehind).
	statusWrites perSession[statusWrite]
	// worktreesCreated are the session Worktrees this manager created and its cache has not shown
	// yet, by session: when. The pod made right after its Worktree can show first (two
	// informers): a decision from that view would take the Worktree for gone and delete the new pod
	// (seen in the fan-out benchmark with 64 workers).
	worktreesCreated perSession[time.Time]
}

// podCreation is one pod this manager created: its UID and when.
type podCreation struct {
	uid string
	at  time.Time
}

// podExpectation is how long a created pod the cache does not show is taken as being on its
// way; after it, the create is asked again (and refused if the pod is there after all).
const podExpectation = 30 * time.Second

// sessionScope is what one session reconcile observed and decided.
type sessionScope struct {
	sess    *agentsv1alpha1.AgentSession
	key     types.NamespacedName
	project *agentsv1alpha1.Project
	// policies are the BudgetPolicies that cover the Project (the cache's own objects).
	policies []*agentsv1alpha1.BudgetPolicy
	agent    agentsv1alpha1.AgentSpec
	settings lifecycle.Settings
	forge    *forge
	forgeErr error
	admitted bool
	branch   string
	worktree *agentsv1alpha1.Worktree
	wtFound  bool
	pod      *corev1.Pod
	nodeLost bool
	// volumeHeld says what holds the pod's ReadWriteOnce volume on another node (volumeHeld).
	volumeHeld string
	// heldBy is the session that holds the shared Worktree this one waits for ("" when free).
	heldBy   string
	decision *lifecycle.Decision
	requeue  time.Duration

	// Read once at the start, for the decision and the status: the clock, the runner's last
	// report, and the notification deliveries that finished.
	now       time.Time
	report    SessionReport
	hasReport bool
	delivered map[string]bool
	// actionErr is the error of the last reconcile's level action (a pod that could not be
	// created), said in this status until an action succeeds.
	actionErr error
}

// Reconcile follows the fixed shape. The lifecycle decision is computed in the steps; the defer
// applies it to the status, writes it once, and only then records events and runs actions.
func (r *AgentSessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	sess := &agentsv1alpha1.AgentSession{}
	if err := r.Client.Get(ctx, req.NamespacedName, sess); err != nil {
		if apierrors.IsNotFound(err) {
			r.Hub.Forget(req.NamespacedName)
			r.Reports.Forget(req.NamespacedName)
			r.merges.forget(req.NamespacedName)
			r.actionErrs.forget(req.NamespacedName)
			r.podsCreated.forget(req.NamespacedName)
			r.statusWrites.forget(req.NamespacedName)
			r.worktreesCreated.forget(req.NamespacedName)
			if r.Deliveries != nil {
				r.Deliveries.forget(req.NamespacedName)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if behind, err := r.cacheBehindWrites(ctx, req.NamespacedName, sess); behind || err != nil {
		// The cache has not shown this manager's own last writes yet: a decision from it would
		// be one from before them (its status write a conflict, or a new pod without its new
		// Worktree taken for a pod whose Worktree went away).
		return ctrl.Result{RequeueAfter: conflictRequeue}, err
	}
	if !sess.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(sess, agentsv1alpha1.ClosePullRequestFinalizer) {
		// spec.onDelete ClosePullRequest: the lifecycle decides the close (an action), and the
		// finalizer goes once nothing is left to close (reconcileDeleting).
		return r.reconcileDeleting(ctx, req, sess)
	}
	if !sess.DeletionTimestamp.IsZero() {
		// Deletion cleanup is the garbage collector's, on purpose: the agent pod and the
		// session's own Worktree carry a controller owner reference with blockOwnerDeletion, so
		// the collector removes them with the session (foreground or background), and the
		// Worktree's finalizer still refuses to drop unpushed commits. A Worktree named by
		// spec.worktreeRef is not owned and stays. The session carries no finalizer of its own,
		// so deleting it never waits on a manager that is down; what it held in memory (the
		// forge watch, the runner's report, notification results) is dropped here or when the
		// session is gone, and the sessions queued behind it are woken by the session watch.
		// (envtest runs no garbage collector: the suite checks the owner references and plays
		// the collector.)
		r.Hub.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err := r.ensureDeleteFinalizer(ctx, sess); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := sess.DeepCopy()
	s := r.newScope(sess, req.NamespacedName)
	var recErr error
	defer func() { res, retErr = r.finishSession(ctx, s, orig, recErr) }()

	for _, step := range r.steps() {
		if recErr = step(ctx, s); recErr != nil {
			break
		}
	}
	return res, retErr
}

// cacheBehindWrites reports whether the cache still lacks one of this manager's own last writes
// for the session: its status write (cacheBehind), or the Worktree it created (for at most
// podExpectation). Once the cache shows them, they are forgotten.
func (r *AgentSessionReconciler) cacheBehindWrites(ctx context.Context, key types.NamespacedName, sess *agentsv1alpha1.AgentSession) (bool, error) {
	now := r.now()
	if w := r.statusWrites.get(key); w.replaced != "" {
		if cacheBehind(w, sess.ResourceVersion, now) {
			return true, nil
		}
		r.statusWrites.forget(key)
	}
	if at := r.worktreesCreated.get(key); !at.IsZero() {
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: sess.Namespace, Name: sessionWorktree(sess)}, &agentsv1alpha1.Worktree{})
		switch {
		case apierrors.IsNotFound(err) && now.Sub(at) < podExpectation:
			return true, nil
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("get Worktree: %w", err)
		}
		r.worktreesCreated.forget(key)
	}
	return false, nil
}

// steps are the ordered sub-reconcilers; the first error stops them.
func (r *AgentSessionReconciler) steps() []func(context.Context, *sessionScope) error {
	return []func(context.Context, *sessionScope) error{
		r.resolveProject,
		r.admit,
		r.connect,
		r.resolveBranch,
		r.reconcileWorktree,
		r.observePod,
		r.observeTurn,
		r.decide,
	}
}

// observeTurn finds, for a session without a pod that shares a Worktree (spec.worktreeRef),
// whether another session of that Worktree holds it (worktreeHolder).
func (r *AgentSessionReconciler) observeTurn(ctx context.Context, s *sessionScope) error {
	if s.sess.Spec.WorktreeRef == nil || s.pod != nil {
		return nil
	}
	var list agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.sess.Namespace), client.MatchingFields{indexWorktree: s.sess.Spec.WorktreeRef.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list the sessions of Worktree %s: %w", s.sess.Spec.WorktreeRef.Name, err)
	}
	if len(list.Items) < 2 {
		return nil
	}
	s.heldBy = worktreeHolder(s.sess, list.Items, func(name string) bool {
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.sess.Namespace, Name: agentPodName(name)}, &corev1.Pod{})
		return err == nil || !apierrors.IsNotFound(err) // unsure: held
	})
	return nil
}

// newScope starts a reconcile's scope with what is read once for the decision and the status:
// the clock, the runner's last report, the last level action's error, the finished deliveries.
func (r *AgentSessionReconciler) newScope(sess *agentsv1alpha1.AgentSession, key types.NamespacedName) *sessionScope {
	s := &sessionScope{sess: sess, key: key, now: r.now()}
	s.report, s.hasReport = r.Reports.Get(s.key)
	s.actionErr = r.actionErrs.get(s.key)
	if r.Deliveries != nil {
		// Results the status no longer lists are forgotten after a while (memory, not status).
		r.Deliveries.settle(s.key, sess.Status.Notifications, s.now)
		s.delivered = r.Deliveries.finished(s.key)
	}
	return s
}

// finishSession is the deferred end of every reconcile: the status from what was observed and
// decided, written once; then the events and actions of the decision; then the result.
func (r *AgentSessionReconciler) finishSession(ctx context.Context, s *sessionScope, orig *agentsv1alpha1.AgentSession, recErr error) (ctrl.Result, error) {
	sess := s.sess
	r.setStatus(ctx, s, recErr)
	if wait, quiet := quietSpawn(orig, sess, s, recErr); quiet {
		if s.decision.RequeueAfter > 0 {
			wait = min(wait, s.decision.RequeueAfter)
		}
		if s.requeue > 0 {
			wait = min(wait, s.requeue)
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := patchStatus(ctx, r.Client, orig, sess); err != nil {
		return statusWriteFailed(recErr, err)
	}
	if sess.ResourceVersion != orig.ResourceVersion {
		r.statusWrites.set(s.key, statusWrite{replaced: orig.ResourceVersion, at: s.now})
	}
	if sess.Status.Phase == agentsv1alpha1.PhaseMerged {
		// Merged is final: nothing the forge says changes the session any more, so its pull
		// request stops costing polls (the status keeps what was last read).
		r.Hub.Forget(s.key)
	}
	r.observe(s, orig)
	ran, actionErr := r.afterWrite(ctx, s, orig)
	if !ran {
		return ctrl.Result{}, nil // stopped at an action point, as a crash would
	}
	if actionErr != nil {
		// Said on the session by the next reconcile (actionErrs); retried with back-off.
		return ctrl.Result{}, errors.Join(recErr, actionErr)
	}
	requeue := s.requeue
	if s.decision != nil && s.decision.RequeueAfter > 0 && (requeue == 0 || s.decision.RequeueAfter < requeue) {
		requeue = s.decision.RequeueAfter
	}
	return finish(ctx, r.Recorder, sess, orig.Status.Conditions, sess.Status.Conditions, recErr, requeue)
}

func (r *AgentSessionReconciler) resolveProject(ctx context.Context, s *sessionScope) error {
	p := &agentsv1alpha1.Project{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.sess.Namespace, Name: s.sess.Spec.ProjectRef.Name}, p)
	if apierrors.IsNotFound(err) {
		return Stalling(agentsv1alpha1.ReasonProjectNotFound, "Project %q not found in namespace %s: create it, or point spec.projectRef at an existing Project", s.sess.Spec.ProjectRef.Name, s.sess.Namespace)
	}
	if err != nil {
		return fmt.Errorf("get Project: %w", err)
	}
	s.project = p
	var pols agentsv1alpha1.BudgetPolicyList
	if err := r.Client.List(ctx, &pols, client.InNamespace(p.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list BudgetPolicies: %w", err)
	}
	s.policies = coveringPolicies(p, pols.Items)
	s.agent = mergeAgent(p.Spec.Agent, s.sess.Spec.Agent)
	if r.agentImage(s.agent) == "" {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "no image for agent type %q: set spec.agent.image on the session or the Project", s.agent.Type)
	}
	if s.agent.Type == agentsv1alpha1.AgentCustom && (s.agent.Custom == nil || len(s.agent.Custom.Command) == 0) {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "agent type custom needs spec.agent.custom.command (on the session or the Project): the program its image runs; see docs/agents.md")
	}
	settings, err := lifecycle.ResolveSettings(p.Spec.Reactions, p.Spec.Activity)
	if err != nil {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "Project %s: %v", p.Name, err)
	}
	s.settings = settings
	return nil
}

// admit decides whether the session may run now. Admission is sticky (status.admittedTime); a
// queued session waits until fewer than maxConcurrentSessions admitted sessions are live, oldest
// first (by creation time, then name, so every replica computes the same order).
func (r *AgentSessionReconciler) admit(ctx context.Context, s *sessionScope) error {
	st := s.sess.Status
	if holdsSlot(s.sess) || st.AdmittedTime != nil && s.sess.Spec.State == agentsv1alpha1.SessionStopped {
		s.admitted = true
		return nil
	}
	lim := s.project.Spec.Limits
	if lim == nil || lim.MaxConcurrentSessions == nil {
		s.admitted = true
		return nil
	}
	var list agentsv1alpha1.AgentSessionList
	// Read-only: admitted only reads and sorts pointers.
	if err := r.Client.List(ctx, &list, client.InNamespace(s.sess.Namespace), client.MatchingFields{indexProject: s.project.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	s.admitted = admitted(s.sess, list.Items, int(*lim.MaxConcurrentSessions))
	if !s.admitted {
		// The queue moves when another session ends; the Project's session watch and this
		// requeue bound the wait.
		s.requeue = time.Minute
	}
	return nil
}

// admitted is the queue rule. Pure. A session holds a slot from its admission until it stops or
// ends; the others wait in one queue, oldest first: new sessions, and stopped sessions set
// Running again (they were admitted once, and queue again like anyone else).
func admitted(me *agentsv1alpha1.AgentSession, all []agentsv1alpha1.AgentSession, limit int) bool {
	live := 0
	var queued []*agentsv1alpha1.AgentSession
	for i := range all {
		o := &all[i]
		if o.UID == me.UID || !o.DeletionTimestamp.IsZero() {
			continue
		}
		switch {
		case holdsSlot(o):
			live++
		case waitsForSlot(o):
			queued = append(queued, o)
		}
	}
	queued = append(queued, me)
	sort.Slice(queued, func(i, j int) bool {
		a, b := queued[i].CreationTimestamp, queued[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return queued[i].Name < queued[j].Name
	})
	for i, q := range queued {
		if q.UID == me.UID {
			return live+i < limit
		}
	}
	return false
}

// holdsSlot: the session was admitted and has neither stopped, ended, nor gone back to the queue.
func holdsSlot(s *agentsv1alpha1.AgentSession) bool {
	p := s.Status.Phase
	return s.Status.AdmittedTime != nil && s.Spec.State != agentsv1alpha1.SessionStopped &&
		p != agentsv1alpha1.PhaseQueued && !p.IsTerminal()
}

// waitsForSlot: the session wants to run and holds no slot: new, queued, or being restored.
func waitsForSlot(s *agentsv1alpha1.AgentSession) bool {
	if s.Spec.State == agentsv1alpha1.SessionStopped || holdsSlot(s) {
		return false
	}
	switch p := s.Status.Phase; p {
	case agentsv1alpha1.PhaseQueued, "":
		return true
	case agentsv1alpha1.PhaseStopped:
		// Set Running again: it is restored through the queue.
		return true
	default:
		return s.Status.AdmittedTime == nil && !p.IsTerminal()
	}
}

// connect reaches the forge. Its failure does not stop the session: the agent can work while the
// forge is down; the lifecycle then sees no fresh pull request evidence.
func (r *AgentSessionReconciler) connect(ctx context.Context, s *sessionScope) error {
	f, err := r.connectForge(ctx, s.project)
	if err != nil {
		s.forgeErr = err
		return nil
	}
	s.forge = f
	return nil
}

// resolveBranch fixes the session's branch once: the one its Worktree names, the template's, or
// one made from the issue (stable: kept in status.branch even if the issue's title changes).
func (r *AgentSessionReconciler) resolveBranch(ctx context.Context, s *sessionScope) error {
	spec := s.sess.Spec
	switch {
	case s.sess.Status.Branch != "":
		s.branch = s.sess.Status.Branch
	case spec.WorktreeRef != nil:
		// Known once the Worktree is read.
	case spec.Worktree != nil && spec.Worktree.Branch != "":
		s.branch = string(spec.Worktree.Branch)
	case spec.Issue != "":
		if s.forge == nil {
			return forgeUnavailable(s.forgeErr, "read the issue to name the branch")
		}
		tr, err := r.connectTracker(ctx, s.project, s.forge)
		if err != nil {
			return err
		}
		if tr == nil {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.issue is set but Project %s has no tracker: set spec.tracker on the Project, or give the session a prompt", s.project.Name)
		}
		cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
		issue, err := tr.GetIssue(cctx, strings.TrimPrefix(spec.Issue, "#"))
		cancel()
		if errors.Is(err, tracker.ErrNotFound) {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "issue %s not found in the Project's tracker: check spec.issue", spec.Issue)
		}
		if err != nil {
			return forgeError(err, "read issue "+spec.Issue)
		}
		name, err := tracker.BranchName(branchPrefix(s.project), issue)
		if err != nil {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "make a branch name for issue %s: %v", spec.Issue, err)
		}
		s.branch = name
	default:
		s.branch = branchPrefix(s.project) + s.sess.Name
	}
	if s.branch != "" {
		if err := gitref.ValidateBranch(s.branch); err != nil {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "branch %q: %v", s.branch, err)
		}
	}
	return nil
}

func branchPrefix(p *agentsv1alpha1.Project) string {
	if p.Spec.Tracker != nil && p.Spec.Tracker.BranchPrefix != "" {
		return p.Spec.Tracker.BranchPrefix
	}
	return "shepherd/"
}

func forgeUnavailable(err error, what string) error {
	if err == nil {
		return Waiting(forgeRetry, agentsv1alpha1.ReasonForgeUnavailable, "%s: the forge is not connected", what)
	}
	return err
}

// reconcileWorktree reads the session's Worktree: the one it names, or its own (created by the
// CreateWorktree action once the session is admitted).
func (r *AgentSessionReconciler) reconcileWorktree(ctx context.Context, s *sessionScope) error {
	name := sessionWorktree(s.sess)
	wt := &agentsv1alpha1.Worktree{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.sess.Namespace, Name: name}, wt)
	switch {
	case apierrors.IsNotFound(err):
		return nil // evidence: the lifecycle creates the session's own, or holds for a named one
	case err != nil:
		return fmt.Errorf("get Worktree: %w", err)
	}
	s.worktree, s.wtFound = wt, true
	if s.sess.Spec.WorktreeRef != nil {
		if wt.Spec.ProjectRef.Name != s.project.Name {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "Worktree %s belongs to Project %s, not %s: name a Worktree of the session's Project", name, wt.Spec.ProjectRef.Name, s.project.Name)
		}
		s.branch = string(wt.Spec.Branch)
	}
	return nil
}

func (r *AgentSessionReconciler) observePod(ctx context.Context, s *sessionScope) error {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.sess.Namespace, Name: agentPodName(s.sess.Name)}, pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get agent pod: %w", err)
	}
	r.podsCreated.forget(s.key) // seen: no expectation left
	if !metav1.IsControlledBy(pod, s.sess) {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "pod %s exists and is not this session's: delete or rename it", pod.Name)
	}
	s.pod = pod
	if pod.Spec.NodeName != "" {
		node := &corev1.Node{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("get node: %w", err)
		}
		s.nodeLost = nodeLost(node, err == nil, r.now(), s.settings.GracePeriod)
		s.volumeHeld = r.volumeHeld(ctx, pod)
	}
	return nil
}

// decide gathers the evidence and asks the lifecycle engine.
func (r *AgentSessionReconciler) decide(_ context.Context, s *sessionScope) error {
	in := lifecycle.Input{
		Now:        s.now,
		Generation: s.sess.Generation,
		Spec: lifecycle.SpecEvidence{State: s.sess.Spec.State, Admitted: s.admitted, Messages: s.sess.Spec.Messages,
			ApprovedHead: s.sess.Annotations[agentsv1alpha1.ApprovedHeadAnnotation]},
		Settings: s.settings,
		Pod:      podEvidence(s.pod, s.nodeLost, s.volumeHeld),
		Previous: s.sess.Status,
	}
	in.Spec.MaxDuration, in.Spec.MaxTurns, in.Spec.MaxCostUSD, in.Spec.MaxRepeatedFailures, in.Spec.MaxUnchangedTurns = sessionLimits(s.project, s.sess)
	in.Spec.Deleting = !s.sess.DeletionTimestamp.IsZero()
	in.Spec.ClosePullRequestOnDelete = s.sess.Spec.OnDelete == agentsv1alpha1.DeleteClosePullRequest
	if pr := s.sess.Spec.PullRequest; pr != nil {
		in.Spec.Draft = pr.Draft
	}
	if by := s.sess.Spec.SupersededBy; by != nil {
		in.Spec.SupersededBy, in.Spec.SupersededURL = by.Session, by.PullRequestURL
	}
	if stopsOnIssueClosed(s.project) && s.sess.Spec.Issue != "" {
		in.Issue = r.Issues.evidence(client.ObjectKeyFromObject(s.sess))
	}
	in.Workspace.Own = s.sess.Spec.WorktreeRef == nil
	in.Workspace.HeldBy = s.heldBy
	in.Workspace.RemoveAfterMerge = s.project.Spec.Cleanup != nil && s.project.Spec.Cleanup.WorktreeAfterMerge == agentsv1alpha1.WorktreeRemove
	if s.sess.Spec.WorktreeRef != nil && !s.wtFound {
		in.Workspace.NotFound = true
	} else if s.worktree != nil {
		in.Workspace.Exists = s.wtFound
		in.Workspace.Absent = s.worktree.Spec.State == agentsv1alpha1.WorktreeAbsent
		in.Workspace.Phase = s.worktree.Status.Phase
		if c := findCondition(s.worktree.Status.Conditions, agentsv1alpha1.ConditionReady); c != nil && c.Message != checkoutPendingMessage {
			in.Workspace.Message = c.Message
		}
	}
	in.Runner = runnerEvidence(s.report, s.hasReport, r.Prices)
	in.Spec.Budget = budgetEvidence(s.project, s.policies, r.now())
	in.Merge = r.merges.get(s.key)
	// A merged session is not followed any more (the lifecycle holds Merged on its own).
	if s.forge != nil && s.branch != "" && s.sess.Status.Phase != agentsv1alpha1.PhaseMerged {
		w := scm.Watch{Repo: s.forge.Repo, Head: scm.Head{Branch: s.branch}, MaxAge: pollInterval(s.project), WebhookMaxAge: webhookPollInterval(s.project)}
		if pr := s.sess.Status.PullRequest; pr != nil {
			w.Number = int(pr.Number)
		} else if in.Runner.PullRequestNumber > 0 {
			w.Number = int(in.Runner.PullRequestNumber)
		}
		r.Hub.Watch(s.key, s.forge.Conn, w)
		obs, found := r.Hub.Get(s.key)
		obs.PullRequest = trustedAuthors(s.project).pullRequest(obs.PullRequest)
		in.PullRequest = pullRequestEvidence(obs, found)
		feedbackOf(s.project).shape(&in.PullRequest, obs.PullRequest)
	}
	d := lifecycle.Decide(in)
	s.decision = &d
	return nil
}

func pollInterval(p *agentsv1alpha1.Project) time.Duration {
	if p.Spec.SCM.PollInterval != nil {
		return p.Spec.SCM.PollInterval.Duration
	}
	return time.Minute
}

// webhookPollInterval is the Project's safety-net poll while its webhooks flow: its
// webhookPollInterval, else 10 times its poll interval, at most an hour, never below it.
func webhookPollInterval(p *agentsv1alpha1.Project) time.Duration {
	poll := pollInterval(p)
	if p.Spec.SCM.WebhookPollInterval != nil {
		return max(p.Spec.SCM.WebhookPollInterval.Duration, poll)
	}
	return max(min(10*poll, time.Hour), poll)
}

// worktreeMode is the workspace mode in effect for a Worktree: its spec's, the one its status
// recorded (a Project's default that changed later does not move an existing checkout), the
// Project's, or Worktree.
func worktreeMode(wt *agentsv1alpha1.Worktree, p *agentsv1alpha1.Project) agentsv1alpha1.WorkspaceMode {
	switch {
	case wt.Spec.Mode != "":
		return wt.Spec.Mode
	case wt.Status.Mode != "":
		return wt.Status.Mode
	case p.Spec.Workspace.Mode != "":
		return p.Spec.Workspace.Mode
	}
	return agentsv1alpha1.WorkspaceWorktree
}

// SetupWithManager watches sessions, their pods and Worktrees, the Projects they name, and the
// events from outside the cluster (runner reports, forge changes).
func (r *AgentSessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// Our own status writes are not news: only spec, annotation and deletion changes are.
		For(&agentsv1alpha1.AgentSession{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// The session's pod, its Worktree and its runner's reports move it along: they go before
		// the first reconciles of newer sessions (progressPriority).
		Watches(&corev1.Pod{}, prioritized(handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &agentsv1alpha1.AgentSession{},
			handler.OnlyControllerOwner()))).
		// A session that stops, ends, is admitted or goes away may free a slot: its Project's
		// queued sessions look again.
		Watches(&agentsv1alpha1.AgentSession{}, handler.EnqueueRequestsFromMapFunc(r.queuedSessions), builder.WithPredicates(sessionPhaseChanged())).
		Watches(&agentsv1alpha1.Worktree{}, prioritized(handler.EnqueueRequestsFromMapFunc(r.sessionsForWorktree)),
			builder.WithPredicates(worktreePhaseChanged())).
		// A Project's status changes with every session it counts; only its spec matters here, and
		// its budget running out or coming back (its sessions wait, or resume).
		Watches(&agentsv1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.sessionsForProject),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, budgetChanged()))).
		WatchesRawSource(source.Channel(r.Events, prioritized(&handler.EnqueueRequestForObject{}))).
		Named("agentsession").
		Complete(r)
}

// queuedSessions maps a session to the other sessions of its Project that wait for a slot.
func (r *AgentSessionReconciler) queuedSessions(ctx context.Context, o client.Object) []reconcile.Request {
	sess, ok := o.(*agentsv1alpha1.AgentSession)
	if !ok {
		return nil
	}
	// Without a limit nobody waits for a slot: skip listing the Project's sessions (thousands, in
	// a fan-out) on every phase change.
	var p agentsv1alpha1.Project
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sess.Namespace, Name: sess.Spec.ProjectRef.Name}, &p); err != nil ||
		p.Spec.Limits == nil || p.Spec.Limits.MaxConcurrentSessions == nil {
		return nil
	}
	var list agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(sess.Namespace), client.MatchingFields{indexProject: sess.Spec.ProjectRef.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	waiting := list.Items[:0]
	for i := range list.Items {
		if list.Items[i].Name != sess.Name && waitsForSlot(&list.Items[i]) {
			waiting = append(waiting, list.Items[i])
		}
	}
	return requestsFor(waiting)
}

func (r *AgentSessionReconciler) sessionsForWorktree(ctx context.Context, o client.Object) []reconcile.Request {
	var list agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexWorktree: o.GetName()},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return requestsFor(list.Items)
}

func (r *AgentSessionReconciler) sessionsForProject(ctx context.Context, o client.Object) []reconcile.Request {
	var list agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexProject: o.GetName()},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return requestsFor(list.Items)
}

func requestsFor(items []agentsv1alpha1.AgentSession) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(items))
	for i := range items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&items[i])})
	}
	return out
}

// sessionLimits are the session's maxDuration and maxTurns: its spec.limits over its Project's
// spec.limits (zero: none).
func sessionLimits(p *agentsv1alpha1.Project, sess *agentsv1alpha1.AgentSession) (d time.Duration, n int32, cost float64, fails, unchanged int32) {
	layers := []*agentsv1alpha1.SessionLimits{nil, sess.Spec.Limits}
	if p.Spec.Limits != nil {
		layers[0] = &p.Spec.Limits.SessionLimits
	}
	for _, l := range layers {
		if l != nil && l.MaxDuration != nil {
			d = l.MaxDuration.Duration
		}
		if l != nil && l.MaxTurns != nil {
			n = *l.MaxTurns
		}
		if l != nil && l.MaxCostUSD != "" {
			cost = pricing.ParseUSD(l.MaxCostUSD)
		}
		if l != nil && l.MaxRepeatedFailures != nil {
			fails = *l.MaxRepeatedFailures
		}
		if l != nil && l.MaxUnchangedTurns != nil {
			unchanged = *l.MaxUnchangedTurns
		}
	}
	return d, n, cost, fails, unchanged
}
