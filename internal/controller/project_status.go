package controller

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
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

// setMirrorReadyCondition: where the mirror lives (worktree mode), or that none is needed.
func setMirrorReadyCondition(p *agentsv1alpha1.Project, s *projectScope) {
	conds, gen := &p.Status.Conditions, p.Generation
	switch {
	case p.Spec.Workspace.Mode == agentsv1alpha1.WorkspaceClone:
		p.Status.Mirror = nil
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorNotNeeded, "clone mode: every Worktree clones on its own volume")
	case s.volume != nil:
		if p.Status.Mirror == nil {
			p.Status.Mirror = &agentsv1alpha1.MirrorStatus{}
		}
		p.Status.Mirror.ClaimName, p.Status.Mirror.Path = s.volume.Name, mirrorPath
		setCondition(conds, gen, agentsv1alpha1.ConditionMirrorReady, metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded,
			fmt.Sprintf("the mirror lives on volume claim %s and is fetched by each session before it adds its worktree", s.volume.Name))
	}
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
