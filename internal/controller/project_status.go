package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// countSessions counts sessions by phase. Pure, table-tested.
func countSessions(sessions []agentsv1alpha1.AgentSession) agentsv1alpha1.SessionCounts {
	c := agentsv1alpha1.SessionCounts{ByPhase: map[string]int32{}}
	for i := range sessions {
		s := &sessions[i]
		c.Total++
		phase := s.Status.Phase
		if phase == "" {
			phase = agentsv1alpha1.PhaseQueued
		}
		c.ByPhase[string(phase)]++
		switch {
		case phase == agentsv1alpha1.PhaseQueued:
			c.Queued++
		case !phase.IsTerminal():
			c.Active++
		}
	}
	if len(c.ByPhase) == 0 {
		c.ByPhase = nil
	}
	return c
}

// setProjectStatus computes the Project's status from what the reconcile observed: one function
// per condition (project_status_test.go), then the kstatus summary. Pure.
func setProjectStatus(p *agentsv1alpha1.Project, s *projectScope, err error) {
	gen := p.Generation
	conds := &p.Status.Conditions
	p.Status.Sessions = s.counts
	setCredentialsValidCondition(conds, gen, s, err)
	setRepositoryReachableCondition(conds, gen, s, err)
	setMirrorReadyCondition(p, s)
	if s.checked && s.accErr == nil {
		p.Status.DefaultBranch = s.access.DefaultBranch
	}
	// Where the forge delivers this Project's webhooks, under the receiver's external URL.
	p.Status.Webhook = nil
	if p.Spec.SCM.WebhookSecretRef != nil {
		p.Status.Webhook = &agentsv1alpha1.WebhookStatus{Path: webhook.ProjectPath(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})}
	}
	setBacklogStatus(p, s)
	p.Status.Notifications = s.routes
	setNotificationsDeliveringCondition(p, s.routes)
	if s.sessionsRead {
		prev := p.Status.Spend
		p.Status.Spend = projectSpend(s.sessions, s.now, spendZone(p, s.policies))
		s.budgetNotice = budgetNotice(p.Spec.Budget, prev, p.Status.Spend)
	}
	setBudgetCondition(p, s.policies, s.now)
	setKstatus(conds, gen, err, err == nil, agentsv1alpha1.ReasonSucceeded, "credentials valid, repository reachable, shared children in place")
	if observedBy(err) {
		p.Status.ObservedGeneration = gen
	}
}

// setCredentialsValidCondition: False when the credentials cannot be read or the forge rejects
// them, True once the forge accepted them; left as it was when not checked this time.
func setCredentialsValidCondition(conds *[]metav1.Condition, gen int64, s *projectScope, err error) {
	var stalling *StallingError
	credReasons := map[string]bool{
		agentsv1alpha1.ReasonSecretNotFound: true, agentsv1alpha1.ReasonSecretKeyNotFound: true,
		agentsv1alpha1.ReasonTokenRejected: true,
	}
	switch {
	case s.credErr != nil && errors.As(s.credErr, &stalling) && credReasons[stalling.Reason]:
		setCondition(conds, gen, agentsv1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, stalling.Reason, s.credErr.Error())
	case s.checked && errors.As(err, &stalling) && stalling.Reason == agentsv1alpha1.ReasonTokenRejected:
		setCondition(conds, gen, agentsv1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, stalling.Reason, err.Error())
	case s.checked && s.accErr == nil:
		setCondition(conds, gen, agentsv1alpha1.ConditionCredentialsValid, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded, "the forge accepts the credentials")
	}
}

// setRepositoryReachableCondition: True with the default branch once the forge answered, False
// with the reason of its refusal (a rejected token is CredentialsValid's to say), Unknown when
// the credentials could not be read to ask.
func setRepositoryReachableCondition(conds *[]metav1.Condition, gen int64, s *projectScope, err error) {
	switch {
	case !s.checked:
		// Not checked this time (credentials unreadable): the old value is stale.
		if s.credErr != nil {
			setCondition(conds, gen, agentsv1alpha1.ConditionRepositoryReachable, metav1.ConditionUnknown, agentsv1alpha1.ReasonProgressing, "not checked: the credentials could not be read")
		}
	case s.accErr == nil:
		msg := "repository reachable"
		if s.access.DefaultBranch != "" {
			msg = fmt.Sprintf("repository reachable; its default branch is %s", s.access.DefaultBranch)
		}
		setCondition(conds, gen, agentsv1alpha1.ConditionRepositoryReachable, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded, msg)
	default:
		reason := agentsv1alpha1.ReasonReconcileError
		var stalling *StallingError
		var waiting *WaitingError
		switch {
		case errors.As(err, &stalling):
			reason = stalling.Reason
		case errors.As(err, &waiting):
			reason = waiting.Reason
		}
		if reason != agentsv1alpha1.ReasonTokenRejected {
			setCondition(conds, gen, agentsv1alpha1.ConditionRepositoryReachable, metav1.ConditionFalse, reason, err.Error())
		}
	}
}

// setMirrorReadyCondition says whether the mirror was fetched and is usable, from what the
// prepares of the Project's worktree-mode Worktrees found (mirrorFetches): True once one
// prepared a checkout from it and none failed to fetch it since; False with the fetch's error
// when the newest word is a failed fetch; Unknown before any prepare. Clone mode needs none.
func setMirrorReadyCondition(p *agentsv1alpha1.Project, s *projectScope) {
	conds, gen := &p.Status.Conditions, p.Generation
	if p.Spec.Workspace.Mode == agentsv1alpha1.WorkspaceClone {
		p.Status.Mirror = nil
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorNotNeeded, "clone mode: every Worktree clones on its own volume")
		return
	}
	if s.volume == nil {
		return // the volume's own step says what is wrong
	}
	if p.Status.Mirror == nil {
		p.Status.Mirror = &agentsv1alpha1.MirrorStatus{}
	}
	p.Status.Mirror.ClaimName, p.Status.Mirror.Path = s.volume.Name, mirrorPath
	ok, failed := mirrorFetches(s.worktrees)
	if ok != nil {
		p.Status.Mirror.LastFetchTime = ok.at.DeepCopy()
	}
	switch {
	case failed != nil && (ok == nil || failed.at.After(ok.at.Time)):
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionFalse, agentsv1alpha1.ReasonMirrorFetchFailed,
			fmt.Sprintf("the prepare of Worktree %s could not fetch the mirror on volume claim %s: %s", failed.worktree, s.volume.Name, failed.message))
	case ok != nil:
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorFetched,
			fmt.Sprintf("the prepare of Worktree %s fetched the mirror on volume claim %s at %s; each session fetches it again before it adds its worktree",
				ok.worktree, s.volume.Name, ok.at.UTC().Format(time.RFC3339)))
	default:
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionUnknown, agentsv1alpha1.ReasonMirrorPending,
			fmt.Sprintf("the mirror on volume claim %s is made and fetched by the first session's prepare; none has run yet", s.volume.Name))
	}
}

// mirrorFetch is one prepare's word on the mirror.
type mirrorFetch struct {
	worktree string
	at       metav1.Time
	message  string
}

// mirrorFetches finds the newest prepare that fetched the mirror and made a checkout (a
// worktree-mode Worktree's Ready) and the newest that failed to fetch it (a Failed Worktree
// whose message is the mirror's fetch). Pure.
func mirrorFetches(worktrees []agentsv1alpha1.Worktree) (ok, failed *mirrorFetch) {
	for i := range worktrees {
		wt := &worktrees[i]
		if wt.Status.Mode != agentsv1alpha1.WorkspaceWorktree {
			continue
		}
		c := findCondition(wt.Status.Conditions, agentsv1alpha1.ConditionReady)
		if c == nil {
			continue
		}
		switch {
		case wt.Status.Phase == agentsv1alpha1.WorktreeReady && c.Status == metav1.ConditionTrue:
			if ok == nil || c.LastTransitionTime.After(ok.at.Time) {
				ok = &mirrorFetch{worktree: wt.Name, at: c.LastTransitionTime}
			}
		case wt.Status.Phase == agentsv1alpha1.WorktreeFailed && strings.Contains(c.Message, workspace.MirrorFetchError):
			if failed == nil || c.LastTransitionTime.After(failed.at.Time) {
				failed = &mirrorFetch{worktree: wt.Name, at: c.LastTransitionTime, message: c.Message}
			}
		}
	}
	return ok, failed
}

// setNotificationsDeliveringCondition: False naming the routes given up on, True when every route
// delivers, absent without routes.
func setNotificationsDeliveringCondition(p *agentsv1alpha1.Project, routes []agentsv1alpha1.NotificationRouteStatus) {
	conds, gen := &p.Status.Conditions, p.Generation
	failing := ""
	for _, r := range routes {
		if r.LastError != "" {
			failing += fmt.Sprintf("route %s: %s; ", r.Name, r.LastError)
		}
	}
	switch {
	case p.Spec.Notifications == nil || len(p.Spec.Notifications.Routes) == 0:
		meta.RemoveStatusCondition(conds, agentsv1alpha1.ConditionNotificationsDelivering)
	case failing != "":
		setCondition(conds, gen, agentsv1alpha1.ConditionNotificationsDelivering, metav1.ConditionFalse, agentsv1alpha1.ReasonNotifierFailing,
			"notifications were given up on after retries: "+strings.TrimSuffix(failing, "; "))
	default:
		setCondition(conds, gen, agentsv1alpha1.ConditionNotificationsDelivering, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded, "every route delivers")
	}
}
