package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// setStatus writes the decision and the controller's own bookkeeping onto the status. It is a
// function of what the reconcile observed (the scope, gathered in its steps and at its start:
// the clock, the runner's report, the finished notification deliveries) and changes nothing but
// the object.
func (r *AgentSessionReconciler) setStatus(_ context.Context, s *sessionScope, err error) {
	if err == nil {
		err = s.actionErr
	}
	st := &s.sess.Status
	observed := st.ObservedGeneration
	if s.decision != nil {
		lifecycle.Apply(st, *s.decision)
		queueNotifications(st, s.project, notificationsOf(s.decision, s.now))
	}
	pruneDelivered(st, s.delivered)
	if s.branch != "" {
		st.Branch = s.branch
	}
	if s.worktree != nil {
		st.WorktreeName = s.worktree.Name
	} else if s.decision != nil && slices.ContainsFunc(s.decision.Actions, func(a lifecycle.Action) bool { return a.Type == lifecycle.ActionCreateWorktree }) {
		st.WorktreeName = sessionWorktree(s.sess) // the action creates it right after this write
	}
	if s.pod != nil && s.pod.DeletionTimestamp.IsZero() {
		st.PodName = s.pod.Name
	} else if s.decision != nil && slices.ContainsFunc(s.decision.Actions, func(a lifecycle.Action) bool { return a.Type == lifecycle.ActionCreatePod }) {
		st.PodName = agentPodName(s.sess.Name) // the action creates it right after this write
	} else if s.decision != nil && (s.decision.Phase.IsTerminal()) {
		st.PodName = ""
	}
	if s.project != nil {
		st.Agent.Type = s.agent.Type
		st.Agent.Image = r.agentImage(s.agent)
		if st.Agent.Model == "" || s.agent.Model != "" {
			st.Agent.Model = s.agent.Model
		}
		if s.hasReport && s.report.Agent.Model != "" {
			st.Agent.Model = s.report.Agent.Model
		}
	}
	if err != nil {
		// A failure around the decision (a pod that could not be created, a missing Project)
		// overrides the kstatus summary; the specific conditions keep what the engine said. The
		// generation was not fully acted on: observedGeneration stays where it was.
		st.ObservedGeneration = observed
		if s.actionErr != nil && st.ObservedGeneration >= s.sess.Generation {
			// The last write said this generation observed together with the creations it asked
			// for (lifecycle: observedGeneration), and one of them failed: not observed after all.
			st.ObservedGeneration = s.sess.Generation - 1
		}
		setKstatus(&st.Conditions, s.sess.Generation, err, false, "", "")
		if st.Phase == "" {
			st.Phase = agentsv1alpha1.PhaseQueued
		}
	}
}

// observe records in metrics what the status write changed: the phase transition, the first run
// (labelled by how its checkout was made), the pull request, the merge, the agent's new spend.
// It runs only after the write succeeded, and the write carried the resourceVersion its "before"
// was read at, so each change is counted once.
func (r *AgentSessionReconciler) observe(s *sessionScope, orig *agentsv1alpha1.AgentSession) {
	if r.Metrics == nil {
		return
	}
	r.Metrics.ObserveSessionWrite(metrics.SessionWrite{
		Created: s.sess.CreationTimestamp.Time, Before: &orig.Status, After: &s.sess.Status,
		Checkout: checkoutOf(s.pod, s.report.Workspace), Now: r.now(), ConfiguredModel: s.agent.Model,
	})
}

// checkoutOf says how the checkout the agent pod runs in was made, from what its checkout step
// reported: cold when it fetched the repository whole (it created the Project's mirror, or cloned
// with no mirror to borrow from), warm when it restored a checkout or added one from a present
// mirror. The step's container status says it; until the kubelet has written that (the runner,
// told by the step, reports first), the runner's report of the step's result does. Pure.
func checkoutOf(pod *corev1.Pod, ws *runnerapi.WorkspaceReport) metrics.Checkout {
	if pod == nil {
		return metrics.CheckoutUnknown
	}
	res, ok := agentPrepareResult(pod)
	switch {
	case ok && res.OK && res.Result.Path != "":
		if res.Result.FullFetch {
			return metrics.CheckoutCold
		}
		return metrics.CheckoutWarm
	case ok:
		return metrics.CheckoutUnknown // failed, or no readable result
	case ws != nil && ws.Path != "" && !ws.Missing:
		if ws.FullFetch {
			return metrics.CheckoutCold
		}
		return metrics.CheckoutWarm
	}
	return metrics.CheckoutUnknown
}

// afterWrite runs once the status is written: the log line and events of the decision, then its
// actions (actions.go). It returns false when the action hook stopped it, and the level
// actions' error.
func (r *AgentSessionReconciler) afterWrite(ctx context.Context, s *sessionScope, orig *agentsv1alpha1.AgentSession) (bool, error) {
	if d := s.decision; d != nil {
		if orig.Status.Phase != d.Phase {
			ctrl.LoggerFrom(ctx).Info("Phase changed", "from", orig.Status.Phase, "to", d.Phase, "reason", d.Reason)
		}
		for _, e := range d.Events {
			if s.project.OmitsRoutineEvents() && routineEvent(e) {
				continue
			}
			kind := corev1.EventTypeNormal
			if e.IsWarning() {
				kind = corev1.EventTypeWarning
			}
			if r.Recorder != nil {
				r.Recorder.Eventf(s.sess, nil, kind, e.Reason, string(e.Type), "%s", e.Message)
			}
		}
	}
	return r.runActions(ctx, s)
}

// routineEvent reports whether a session's event is routine, left out where the Project says
// spec.events.routine: Omit: a Normal event of priority info. Pure.
func routineEvent(e lifecycle.Event) bool { return e.Priority == agentsv1alpha1.PriorityInfo }

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

// spawnQuiet is how long a session may keep saying "Waiting for the workspace" after its
// Worktree became Ready, while its runner's first report is due.
const spawnQuiet = 10 * time.Second

// quietConditions are the conditions whose change alone, from the workspace's wait to the
// runner's, is routine.
var quietConditions = []string{agentsv1alpha1.ConditionReady, agentsv1alpha1.ConditionReconciling,
	agentsv1alpha1.ConditionWorkspaceReady, agentsv1alpha1.ConditionAgentRunning}

// quietSpawn reports whether a status is not written yet, and when to look again. A session
// whose checkout just became ready has one routine step left before Working: its runner's first
// report, due within a second or two of the checkout (the runner starts the agent as soon as the
// checkout step ends). Writing "Waiting for the runner's first report" in between is one stored
// write per session that nobody reads in a fan-out (issue 23); so, for at most spawnQuiet after
// the Worktree's Ready transition, the session keeps its last status and its next write says
// Working (or, when the report is late, the wait for it). Only that step is quiet: the same phase
// (Spawning), from the workspace's or the pod's wait to the runner's, no action, event or error,
// and nothing else in the status changed. Pure.
func quietSpawn(orig, now *agentsv1alpha1.AgentSession, s *sessionScope, err error) (time.Duration, bool) {
	if err != nil || s.actionErr != nil || s.decision == nil || len(s.decision.Actions) > 0 || len(s.decision.Events) > 0 ||
		orig.Status.Phase != agentsv1alpha1.PhaseSpawning || now.Status.Phase != agentsv1alpha1.PhaseSpawning || s.worktree == nil {
		return 0, false
	}
	was, is := findCondition(orig.Status.Conditions, agentsv1alpha1.ConditionReady), findCondition(now.Status.Conditions, agentsv1alpha1.ConditionReady)
	if was == nil || is == nil || is.Reason != agentsv1alpha1.ReasonSpawning ||
		was.Reason != agentsv1alpha1.ReasonWorkspacePending && was.Reason != agentsv1alpha1.ReasonPodPending {
		return 0, false
	}
	ready := findCondition(s.worktree.Status.Conditions, agentsv1alpha1.ConditionReady)
	if s.worktree.Status.Phase != agentsv1alpha1.WorktreeReady || ready == nil || ready.Status != metav1.ConditionTrue {
		return 0, false
	}
	left := ready.LastTransitionTime.Add(spawnQuiet).Sub(s.now)
	if left <= 0 {
		return 0, false
	}
	a, b := orig.Status.DeepCopy(), now.Status.DeepCopy()
	for _, t := range quietConditions {
		meta.RemoveStatusCondition(&a.Conditions, t)
		meta.RemoveStatusCondition(&b.Conditions, t)
	}
	if !equality.Semantic.DeepEqual(a, b) {
		return 0, false
	}
	return left, true
}
