package controller

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

func TestProjectConditions(t *testing.T) {
	rejected := Stalling(agentsv1alpha1.ReasonTokenRejected, "the forge rejected the credentials")
	missing := Stalling(agentsv1alpha1.ReasonSecretNotFound, "secret github not found")
	unavailable := Waiting(forgeRetry, agentsv1alpha1.ReasonForgeUnavailable, "forge unavailable")
	type want struct {
		status metav1.ConditionStatus
		reason string
	}
	none := want{}
	for _, tc := range []struct {
		name        string
		scope       *projectScope
		err         error
		creds, repo want
	}{
		{"checked and reachable", &projectScope{checked: true, access: scm.RepoInfo{DefaultBranch: "main"}}, nil,
			want{metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded}, want{metav1.ConditionTrue, agentsv1alpha1.ReasonSucceeded}},
		{"the Secret is missing: nothing was asked", &projectScope{credErr: missing}, missing,
			want{metav1.ConditionFalse, agentsv1alpha1.ReasonSecretNotFound}, want{metav1.ConditionUnknown, agentsv1alpha1.ReasonProgressing}},
		{"the token is rejected: the credentials say it, not the repository", &projectScope{checked: true, accErr: rejected}, rejected,
			want{metav1.ConditionFalse, agentsv1alpha1.ReasonTokenRejected}, none},
		{"the forge is down", &projectScope{checked: true, accErr: errors.New("502")}, unavailable,
			none, want{metav1.ConditionFalse, agentsv1alpha1.ReasonForgeUnavailable}},
		{"not checked this time, credentials fine: both stay", &projectScope{}, nil, none, none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var conds []metav1.Condition
			setCredentialsValidCondition(&conds, 1, tc.scope, tc.err)
			setRepositoryReachableCondition(&conds, 1, tc.scope, tc.err)
			for typ, w := range map[string]want{agentsv1alpha1.ConditionCredentialsValid: tc.creds, agentsv1alpha1.ConditionRepositoryReachable: tc.repo} {
				c := meta.FindStatusCondition(conds, typ)
				if w == none {
					g.Expect(c).To(BeNil(), typ)
					continue
				}
				g.Expect(c).NotTo(BeNil(), typ)
				g.Expect(c.Status).To(Equal(w.status), typ)
				g.Expect(c.Reason).To(Equal(w.reason), typ)
			}
		})
	}
}

func TestNotificationsDeliveringCondition(t *testing.T) {
	g := NewWithT(t)
	p := &agentsv1alpha1.Project{}
	setNotificationsDeliveringCondition(p, nil)
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionNotificationsDelivering)).To(BeNil(), "no routes, no condition")

	p.Spec.Notifications = &agentsv1alpha1.NotificationsSpec{Routes: []agentsv1alpha1.NotificationRoute{{Name: "ops"}}}
	setNotificationsDeliveringCondition(p, []agentsv1alpha1.NotificationRouteStatus{{Name: "ops", Delivered: 3}})
	g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, agentsv1alpha1.ConditionNotificationsDelivering)).To(BeTrue())

	setNotificationsDeliveringCondition(p, []agentsv1alpha1.NotificationRouteStatus{{Name: "ops", LastError: "HTTP 500"}})
	c := meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionNotificationsDelivering)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(agentsv1alpha1.ReasonNotifierFailing))
	g.Expect(c.Message).To(ContainSubstring("route ops: HTTP 500"))
}

// A reconcile that stalled judged its generation (kstatus and Flux then know the failure is about
// this spec); a transient error judged nothing and keeps the last generation observed.
func TestObservedGenerationOfAStall(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		err  error
		want int64
	}{
		{nil, 3},
		{Stalling(agentsv1alpha1.ReasonSecretNotFound, "secret github not found"), 3},
		{Waiting(forgeRetry, agentsv1alpha1.ReasonForgeUnavailable, "forge unavailable"), 2},
		{errors.New("etcd timeout"), 2},
	} {
		p := &agentsv1alpha1.Project{}
		p.Generation, p.Status.ObservedGeneration = 3, 2
		setProjectStatus(p, &projectScope{}, tc.err)
		g.Expect(p.Status.ObservedGeneration).To(Equal(tc.want), "%v", tc.err)
	}
}

// MirrorReady says what the prepares found: fetched (the newest Ready of a worktree-mode
// Worktree), a fetch that failed since, or nothing yet; never that a volume merely exists.
func TestMirrorReadyCondition(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	wt := func(name string, mode agentsv1alpha1.WorkspaceMode, phase agentsv1alpha1.WorktreePhase, status metav1.ConditionStatus, at time.Time, msg string) agentsv1alpha1.Worktree {
		w := agentsv1alpha1.Worktree{ObjectMeta: metav1.ObjectMeta{Name: name}}
		w.Status.Mode, w.Status.Phase = mode, phase
		w.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: status, LastTransitionTime: metav1.NewTime(at), Message: msg}}
		return w
	}
	ready := func(name string, at time.Time) agentsv1alpha1.Worktree {
		return wt(name, agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorktreeReady, metav1.ConditionTrue, at, "")
	}
	fetchFailed := func(name string, at time.Time) agentsv1alpha1.Worktree {
		return wt(name, agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorktreeFailed, metav1.ConditionFalse, at,
			"prepare the volume: "+workspace.MirrorFetchError+": git fetch: could not read from remote")
	}
	for _, tc := range []struct {
		name      string
		worktrees []agentsv1alpha1.Worktree
		status    metav1.ConditionStatus
		reason    string
		message   string
		last      *time.Time
	}{
		{"no prepare yet", nil, metav1.ConditionUnknown, agentsv1alpha1.ReasonMirrorPending, "none has run yet", nil},
		{"a prepare fetched it", []agentsv1alpha1.Worktree{ready("a", t0), ready("b", t0.Add(time.Minute))},
			metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorFetched, "Worktree b fetched the mirror", ptrTo(t0.Add(time.Minute))},
		{"a fetch failed after the last good one", []agentsv1alpha1.Worktree{ready("a", t0), fetchFailed("c", t0.Add(time.Minute))},
			metav1.ConditionFalse, agentsv1alpha1.ReasonMirrorFetchFailed, "could not read from remote", ptrTo(t0)},
		{"a good fetch after the failure", []agentsv1alpha1.Worktree{fetchFailed("c", t0), ready("a", t0.Add(time.Minute))},
			metav1.ConditionTrue, agentsv1alpha1.ReasonMirrorFetched, "Worktree a", ptrTo(t0.Add(time.Minute))},
		{"a failure that is not the mirror's, and a clone, say nothing of it", []agentsv1alpha1.Worktree{
			wt("x", agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorktreeFailed, metav1.ConditionFalse, t0, "branch already exists"),
			wt("y", agentsv1alpha1.WorkspaceClone, agentsv1alpha1.WorktreeReady, metav1.ConditionTrue, t0, ""),
		}, metav1.ConditionUnknown, agentsv1alpha1.ReasonMirrorPending, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := &agentsv1alpha1.Project{}
			p.Spec.Workspace.Mode = agentsv1alpha1.WorkspaceWorktree
			s := &projectScope{volume: &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "widgets-workspace"}}, worktrees: tc.worktrees}
			setMirrorReadyCondition(p, s)
			c := meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionMirrorReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(ContainSubstring(tc.message))
			if tc.last == nil {
				g.Expect(p.Status.Mirror.LastFetchTime).To(BeNil())
			} else {
				g.Expect(p.Status.Mirror.LastFetchTime.Time).To(BeTemporally("==", *tc.last))
			}
		})
	}
	g := NewWithT(t)
	p := &agentsv1alpha1.Project{}
	p.Spec.Workspace.Mode = agentsv1alpha1.WorkspaceClone
	setMirrorReadyCondition(p, &projectScope{})
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionMirrorReady).Reason).To(Equal(agentsv1alpha1.ReasonMirrorNotNeeded))
}
