package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/clip"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/selection"
)

// AgentTaskReconciler runs an AgentTask's attempts and sends the chosen one's pull request
// forward (docs/best-of-n.md). Each attempt is an ordinary AgentSession it owns, named
// <task>-<n>: the session engine runs it (its own Worktree and branch, pod, pull request, cost);
// this controller only creates them, reads their status, chooses (internal/selection), and
// writes the choice onto them: the chosen one's spec.pullRequest.draft false (its session marks
// the draft ready, once), the others' spec.supersededBy (their sessions close their pull requests
// once and release their Worktrees). Every write to an attempt follows the task's status write
// that records the choice, so a restart repeats only idempotent patches.
//
// The dashboard's pick writes spec.selection.pick for a user it authorised to patch the task:
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=agenttasks,verbs=patch
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=agenttasks/finalizers,verbs=update
type AgentTaskReconciler struct {
	*Deps
}

// phaseDeleted is the phase the task shows for an attempt whose session is gone.
const phaseDeleted = "Deleted"

// Reconcile follows the fixed shape: get, compute the status from what is observed, write it
// once, then the writes to the attempts the status calls for.
func (r *AgentTaskReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	task := &agentsv1alpha1.AgentTask{}
	if err := r.Client.Get(ctx, req.NamespacedName, task); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !task.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the attempts go with it (owner references); their onDelete closes open pull requests
	}
	orig := task.DeepCopy()
	project := &agentsv1alpha1.Project{}
	recErr := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: task.Spec.ProjectRef.Name}, project)
	if apierrors.IsNotFound(recErr) {
		recErr = Stalling(agentsv1alpha1.ReasonProjectNotFound, "Project %q not found in namespace %s: create it, or point spec.projectRef at an existing Project", task.Spec.ProjectRef.Name, task.Namespace)
		project = nil
	} else if recErr != nil {
		return ctrl.Result{}, fmt.Errorf("get Project: %w", recErr)
	}
	var attempts agentsv1alpha1.AgentSessionList
	if err := r.Client.List(ctx, &attempts, client.InNamespace(task.Namespace), client.MatchingFields{indexTask: task.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list attempts: %w", err)
	}
	owned := map[string]*agentsv1alpha1.AgentSession{}
	for i := range attempts.Items {
		if s := &attempts.Items[i]; metav1.IsControlledBy(s, task) {
			owned[s.Name] = s
		}
	}
	out := taskStatus(task, project, owned)
	kerr := recErr
	if kerr == nil && task.Status.Phase == agentsv1alpha1.TaskFailed {
		// Nothing more happens without a person: kstatus Stalled (Argo CD Degraded, Flux Failed).
		kerr = Stalling(out.reason, "%s", out.message)
	}
	setKstatus(&task.Status.Conditions, task.Generation, kerr, out.ready, out.reason, out.message)
	if observedBy(kerr) {
		task.Status.ObservedGeneration = task.Generation
	}
	if err := patchStatus(ctx, r.Client, orig, task); err != nil {
		return statusWriteFailed(recErr, err)
	}
	if r.Recorder != nil && orig.Status.Chosen == "" && task.Status.Chosen != "" {
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, agentsv1alpha1.ReasonAttemptChosen, "Choose", "Chose %s: %s", task.Status.Chosen, task.Status.ChosenBy)
	}
	emitPhaseEvent(r.Recorder, task, string(orig.Status.Phase), string(task.Status.Phase))
	if recErr != nil {
		return finish(ctx, r.Recorder, task, orig.Status.Conditions, task.Status.Conditions, recErr, 0)
	}
	// After the write: create the attempts it lists, then apply the choice or the cap (a Failed
	// task may still have a cap's stops to write); then the outcome, said once.
	if err := r.apply(ctx, task, owned, out); err != nil {
		return ctrl.Result{}, err
	}
	return finish(ctx, r.Recorder, task, orig.Status.Conditions, task.Status.Conditions, kerr, 0)
}

// taskOutcome is what taskStatus decided, for the writes after the status.
type taskOutcome struct {
	ready           bool
	reason, message string
	// create are the attempts to create; stop those the cap stops; supersede those the choice
	// leaves out.
	create    []*agentsv1alpha1.AgentSession
	stop      []string
	supersede []string
}

// taskStatus computes the task's status from its spec, its Project and its attempts, and what
// is to be written to the attempts. Pure.
func taskStatus(task *agentsv1alpha1.AgentTask, project *agentsv1alpha1.Project, owned map[string]*agentsv1alpha1.AgentSession) taskOutcome {
	st := &task.Status
	var out taskOutcome
	n := attemptCount(task)
	var atts []selection.Attempt
	var total float64
	live := 0
	prev := map[string]agentsv1alpha1.AttemptStatus{}
	for _, a := range st.Attempts {
		prev[a.Name] = a
	}
	st.Attempts = st.Attempts[:0]
	for i := 1; i <= n; i++ {
		name := attemptName(task.Name, i)
		as := agentsv1alpha1.AttemptStatus{Name: name}
		sess, ok := owned[name]
		switch {
		case ok:
			as.Agent, as.Model, as.Phase = sess.Status.Agent.Type, sess.Status.Agent.Model, string(sess.Status.Phase)
			if as.Phase == "" {
				as.Phase = "Pending"
			}
			a := attemptFacts(sess, i)
			if sess.Status.Usage != nil {
				as.CostUSD = sess.Status.Usage.CostUSD
				total += a.Cost
			}
			if pr := sess.Status.PullRequest; pr != nil {
				as.PullRequest, as.Checks, as.ChangedLines = pr.Number, pr.Checks, pr.Additions+pr.Deletions
			}
			if !a.Ended {
				live++
			}
			atts = append(atts, a)
		case prev[name].Phase != "" && prev[name].Phase != "Creating":
			// Seen once and gone: deleted by someone. Not made again.
			p := prev[name]
			p.Phase = phaseDeleted
			as = p
			atts = append(atts, selection.Attempt{Name: name, Index: i, Ended: true})
		default:
			// About to be made: at work as far as the choice goes (not "every attempt ended").
			as.Phase = "Creating"
			live++
			atts = append(atts, selection.Attempt{Name: name, Index: i})
			if project != nil && st.Chosen == "" && !task.Status.Phase.IsTerminal() {
				out.create = append(out.create, attemptSession(task, project, i))
			}
		}
		st.Attempts = append(st.Attempts, as)
	}
	st.Progress = fmt.Sprintf("%d/%d", live, n)
	if project == nil && len(owned) == 0 && st.Chosen == "" {
		// Nothing made yet, and nothing to make it from: the phase stays (none, for a new task)
		// and the Stalled condition names the missing Project; its creation brings the task back.
		return out
	}
	st.CostUSD = pricing.Format(total)
	policy := selectionOf(task, project)
	choice := selection.Choose(policy, atts)
	for i := range st.Attempts {
		st.Attempts[i].Score = selection.FormatScore(choice.Scores, st.Attempts[i].Name)
	}
	st.Leader = choice.Leader
	capped := task.Spec.MaxCostUSD != "" && total >= pricing.ParseUSD(task.Spec.MaxCostUSD)
	switch {
	case st.Chosen != "":
		// Chosen once, for good: a restart or a later pick does not change it.
	case choice.Chosen != "":
		st.Chosen, st.ChosenBy = choice.Chosen, clip.Marked(choice.Why, 1024, "…")
	}
	if st.Chosen != "" {
		chosen := owned[st.Chosen]
		st.Leader = st.Chosen
		for _, a := range st.Attempts {
			if a.Name != st.Chosen && a.Phase != phaseDeleted {
				if s := owned[a.Name]; s != nil && s.Spec.SupersededBy == nil {
					out.supersede = append(out.supersede, a.Name)
				}
			}
		}
		st.Phase = agentsv1alpha1.TaskChosen
		out.reason, out.message = agentsv1alpha1.ReasonAttemptChosen, "Chose "+st.Chosen+": "+st.ChosenBy
		if chosen != nil && chosen.Status.PullRequest != nil {
			pr := chosen.Status.PullRequest
			st.PullRequest = &agentsv1alpha1.TaskPullRequest{Number: pr.Number, URL: pr.URL, State: pr.State}
		}
		switch {
		case chosen == nil:
			st.Phase, out.reason, out.message = agentsv1alpha1.TaskFailed, agentsv1alpha1.ReasonAttemptLost, "The chosen attempt "+st.Chosen+" was deleted"
		case chosen.Status.Phase == agentsv1alpha1.PhaseMerged:
			st.Phase, out.ready = agentsv1alpha1.TaskMerged, true
			out.reason, out.message = agentsv1alpha1.ReasonPullRequestMerged, "The chosen attempt "+st.Chosen+"'s pull request merged"
		case chosen.Status.Phase.IsTerminal() && chosen.Status.Phase != agentsv1alpha1.PhaseStopped:
			st.Phase, out.reason = agentsv1alpha1.TaskFailed, agentsv1alpha1.ReasonAttemptLost
			out.message = fmt.Sprintf("The chosen attempt %s ended %s without merging", st.Chosen, chosen.Status.Phase)
		}
		return out
	}
	st.PullRequest = nil
	switch {
	case capped:
		st.Phase, out.reason = agentsv1alpha1.TaskWaitingForPick, agentsv1alpha1.ReasonBudgetExhausted
		out.message = fmt.Sprintf("The attempts spent $%s of the task's maxCostUSD $%s: those still at work are stopped", st.CostUSD, task.Spec.MaxCostUSD)
		for _, a := range st.Attempts {
			if s := owned[a.Name]; s != nil && s.Spec.State != agentsv1alpha1.SessionStopped && !s.Status.Phase.IsTerminal() {
				out.stop = append(out.stop, a.Name)
			}
		}
		if !choice.WaitingForPick && !anyOpenPR(atts) {
			st.Phase, out.message = agentsv1alpha1.TaskFailed, out.message+"; no attempt has an open pull request to choose"
		} else {
			out.message += "; pick one with kubectl shepherd pick"
		}
	case choice.Failed:
		st.Phase, out.reason, out.message = agentsv1alpha1.TaskFailed, agentsv1alpha1.ReasonNoAttemptToChoose, "Every attempt ended without an open pull request"
	case choice.WaitingForPick:
		st.Phase, out.reason = agentsv1alpha1.TaskWaitingForPick, agentsv1alpha1.ReasonWaitingForPick
		out.message = "Waiting for a person to pick an attempt (kubectl shepherd pick " + task.Name + " <attempt>, or the dashboard)"
		if st.Leader != "" {
			out.message += "; the leader is " + st.Leader
		}
	default:
		st.Phase, out.reason = agentsv1alpha1.TaskRunning, agentsv1alpha1.ReasonAttemptsRunning
		out.message = fmt.Sprintf("%d attempts at work", live)
		if st.Leader != "" {
			out.message += "; the leader is " + st.Leader
		}
	}
	if choice.PickProblem != "" {
		out.message += "; " + choice.PickProblem
	}
	return out
}

func anyOpenPR(atts []selection.Attempt) bool {
	for _, a := range atts {
		if a.PROpen {
			return true
		}
	}
	return false
}

// attemptFacts reads what the choice needs of an attempt's session. Pure.
func attemptFacts(s *agentsv1alpha1.AgentSession, index int) selection.Attempt {
	a := selection.Attempt{Name: s.Name, Index: index, Ended: s.Status.Phase.IsTerminal() || !s.DeletionTimestamp.IsZero()}
	if u := s.Status.Usage; u != nil {
		a.Cost = pricing.ParseUSD(u.CostUSD)
	}
	if pr := s.Status.PullRequest; pr != nil {
		a.PR, a.PRURL, a.Checks, a.Review = pr.Number, pr.URL, pr.Checks, pr.ReviewDecision
		a.PROpen = pr.State == agentsv1alpha1.PullRequestOpen || pr.State == ""
		a.Changed = int64(pr.Additions) + int64(pr.Deletions)
		if c := meta.FindStatusCondition(s.Status.Conditions, agentsv1alpha1.ConditionChecksPassing); c != nil && c.Status == metav1.ConditionTrue && pr.Checks == agentsv1alpha1.ChecksPassing {
			a.GreenAt = c.LastTransitionTime.Time
		}
	}
	return a
}

// attemptCount is how many attempts the task runs.
func attemptCount(t *agentsv1alpha1.AgentTask) int {
	if t.Spec.Attempts != nil {
		return int(*t.Spec.Attempts)
	}
	return len(t.Spec.Variants)
}

// attemptName is the n-th attempt's AgentSession name (the task's name is at most 56 characters).
func attemptName(task string, n int) string { return task + "-" + strconv.Itoa(n) }

// selectionOf is the task's selection over its Project's, FirstGreen by default.
func selectionOf(t *agentsv1alpha1.AgentTask, p *agentsv1alpha1.Project) selection.Policy {
	var base, own agentsv1alpha1.SelectionSpec
	if p != nil && p.Spec.Selection != nil {
		base = *p.Spec.Selection
	}
	if t.Spec.Selection != nil {
		own = *t.Spec.Selection
	}
	pol := selection.Policy{Kind: agentsv1alpha1.SelectFirstGreen, Pick: own.Pick}
	switch {
	case own.Policy != "":
		pol.Kind = own.Policy
	case base.Policy != "":
		pol.Kind = base.Policy
	}
	w := base.Weights
	if own.Weights != nil {
		w = own.Weights
	}
	pol.Weights = selection.WeightsOf(w)
	return pol
}

// attemptSession is the n-th attempt: the task's work, its variant's agent, its own branch, a
// draft pull request, the task's limits (and its cost cap, which no attempt may pass alone).
func attemptSession(t *agentsv1alpha1.AgentTask, p *agentsv1alpha1.Project, n int) *agentsv1alpha1.AgentSession {
	s := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{
		Name: attemptName(t.Name, n), Namespace: t.Namespace,
		Labels: map[string]string{agentsv1alpha1.LabelTask: t.Name, agentsv1alpha1.LabelProject: t.Spec.ProjectRef.Name},
	}}
	s.Spec = agentsv1alpha1.AgentSessionSpec{
		ProjectRef: t.Spec.ProjectRef, Issue: t.Spec.Issue, Prompt: t.Spec.Prompt, Title: t.Spec.Title,
		// Each attempt on its own branch from the same base: the task's name and the attempt's.
		Worktree:    &agentsv1alpha1.WorktreeTemplate{Branch: agentsv1alpha1.BranchName(branchPrefix(p) + attemptName(t.Name, n))},
		OnDelete:    agentsv1alpha1.DeleteClosePullRequest,
		PullRequest: &agentsv1alpha1.SessionPullRequest{Draft: ptrTo(true)},
		State:       agentsv1alpha1.SessionRunning,
	}
	var agent *agentsv1alpha1.AgentSpec
	if t.Spec.Agent != nil {
		agent = t.Spec.Agent.DeepCopy()
	}
	if n <= len(t.Spec.Variants) {
		base := agentsv1alpha1.AgentSpec{}
		if agent != nil {
			base = *agent
		}
		merged := mergeAgent(base, &t.Spec.Variants[n-1].Agent)
		agent = &merged
	}
	s.Spec.Agent = agent
	if t.Spec.Limits != nil {
		s.Spec.Limits = t.Spec.Limits.DeepCopy()
	}
	if c := t.Spec.MaxCostUSD; c != "" {
		if s.Spec.Limits == nil {
			s.Spec.Limits = &agentsv1alpha1.SessionLimits{}
		}
		if s.Spec.Limits.MaxCostUSD == "" || pricing.ParseUSD(c) < pricing.ParseUSD(s.Spec.Limits.MaxCostUSD) {
			s.Spec.Limits.MaxCostUSD = c
		}
	}
	return s
}

// apply makes the writes the status calls for: the attempts to create, the choice, the cap.
// Each is idempotent (a create of a fixed name, a patch to a fixed value).
func (r *AgentTaskReconciler) apply(ctx context.Context, task *agentsv1alpha1.AgentTask, owned map[string]*agentsv1alpha1.AgentSession, out taskOutcome) error {
	log := ctrl.LoggerFrom(ctx)
	for _, s := range out.create {
		if err := controllerutil.SetControllerReference(task, s, r.Scheme); err != nil {
			return fmt.Errorf("own attempt: %w", err)
		}
		if err := r.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create attempt %s: %w", s.Name, err)
		}
		log.Info("Created attempt", "session", klog.KObj(s))
	}
	if chosen := task.Status.Chosen; chosen != "" {
		if s := owned[chosen]; s != nil && (s.Spec.PullRequest == nil || s.Spec.PullRequest.Draft == nil || *s.Spec.PullRequest.Draft) {
			patch := client.MergeFrom(s.DeepCopy())
			s.Spec.PullRequest = &agentsv1alpha1.SessionPullRequest{Draft: ptrTo(false)}
			if err := r.Client.Patch(ctx, s, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("mark the chosen attempt %s: %w", chosen, err)
			}
			log.Info("Chosen attempt's pull request goes forward", "session", klog.KObj(s))
		}
		url := ""
		if task.Status.PullRequest != nil {
			url = task.Status.PullRequest.URL
		}
		for _, name := range out.supersede {
			s := owned[name]
			patch := client.MergeFrom(s.DeepCopy())
			s.Spec.SupersededBy = &agentsv1alpha1.Supersession{Session: chosen, PullRequestURL: url}
			if err := r.Client.Patch(ctx, s, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("supersede attempt %s: %w", name, err)
			}
			log.Info("Attempt superseded", "session", klog.KObj(s), "chosen", chosen)
		}
	}
	for _, name := range out.stop {
		s := owned[name]
		patch := client.MergeFrom(s.DeepCopy())
		s.Spec.State = agentsv1alpha1.SessionStopped
		if err := r.Client.Patch(ctx, s, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("stop attempt %s at the cost cap: %w", name, err)
		}
		log.Info("Attempt stopped at the task's cost cap", "session", klog.KObj(s))
	}
	return nil
}

// SetupWithManager watches AgentTasks and the attempts they own.
func (r *AgentTaskReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1alpha1.AgentTask{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&agentsv1alpha1.AgentSession{}).
		// A task applied before its Project (one `kubectl apply -f dir/`, a GitOps sync) waits
		// for it; the Project's selection is the task's default. Its status writes are not news.
		Watches(&agentsv1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.tasksForProject),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("agenttask").Complete(r)
}

// tasksForProject maps a Project to the tasks of its namespace that name it.
func (r *AgentTaskReconciler) tasksForProject(ctx context.Context, o client.Object) []reconcile.Request {
	return namingProject(ctx, r.Client, &agentsv1alpha1.AgentTaskList{}, o)
}

// namingProject lists the objects of list's kind (indexed by indexProject) in the namespace of
// the Project o that name it, as requests.
func namingProject(ctx context.Context, c client.Reader, list client.ObjectList, o client.Object) []reconcile.Request {
	if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexProject: o.GetName()},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(item runtime.Object) error {
		if obj, ok := item.(client.Object); ok {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return out
}
