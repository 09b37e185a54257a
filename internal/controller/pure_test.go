package controller

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// These are table tests of the controllers' pure functions: no API server, no clock.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sess is a session created at minute m of t0, in a phase, admitted or not.
func sess(name string, m int, phase agentsv1alpha1.SessionPhase, admitted bool, state agentsv1alpha1.SessionState) agentsv1alpha1.AgentSession {
	s := MakeSession(name, "ns", "widgets").Prompt("p").State(state).Created(t0.Add(time.Duration(m) * time.Minute)).Obj()
	s.UID = types.UID(name)
	s.Status.Phase = phase
	if admitted {
		at := metav1.NewTime(t0)
		s.Status.AdmittedTime = &at
	}
	return *s
}

func TestAdmitted(t *testing.T) {
	const running, stopped = agentsv1alpha1.SessionRunning, agentsv1alpha1.SessionStopped
	deleting := sess("gone", 0, agentsv1alpha1.PhaseWorking, true, running)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	cases := []struct {
		name   string
		me     agentsv1alpha1.AgentSession
		others []agentsv1alpha1.AgentSession
		limit  int
		want   bool
	}{
		{"alone under the limit", sess("me", 5, "", false, running), nil, 1, true},
		{"a live session holds the only slot", sess("me", 5, "", false, running),
			[]agentsv1alpha1.AgentSession{sess("a", 0, agentsv1alpha1.PhaseWorking, true, running)}, 1, false},
		{"a second slot is free", sess("me", 5, "", false, running),
			[]agentsv1alpha1.AgentSession{sess("a", 0, agentsv1alpha1.PhaseWorking, true, running)}, 2, true},
		{"finished sessions hold no slot", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{
				sess("merged", 0, agentsv1alpha1.PhaseMerged, true, running), sess("done", 1, agentsv1alpha1.PhaseDone, true, running),
				sess("errored", 2, agentsv1alpha1.PhaseErrored, true, running),
			}, 1, true},
		{"a stopped session holds no slot", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("a", 0, agentsv1alpha1.PhaseStopped, true, stopped)}, 1, true},
		{"a session being stopped holds no slot", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("a", 0, agentsv1alpha1.PhaseWorking, true, stopped)}, 1, true},
		{"a deleted session holds no slot", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{deleting}, 1, true},
		{"an older queued session goes first", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("older", 1, agentsv1alpha1.PhaseQueued, false, running)}, 1, false},
		{"a newer queued session goes after", sess("me", 1, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("newer", 5, agentsv1alpha1.PhaseQueued, false, running)}, 1, true},
		{"same second: the name decides", sess("b", 1, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("a", 1, agentsv1alpha1.PhaseQueued, false, running)}, 1, false},
		{"a new session not yet reconciled queues too", sess("me", 5, "", false, running),
			[]agentsv1alpha1.AgentSession{sess("older", 1, "", false, running)}, 1, false},
		{"a restored session queues again, by its age", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("restored", 1, agentsv1alpha1.PhaseStopped, true, running)}, 1, false},
		{"a session sent back to the queue holds no slot", sess("me", 1, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("requeued", 5, agentsv1alpha1.PhaseQueued, true, running)}, 1, true},
		{"a stopped session never queued does not wait", sess("me", 5, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{sess("idle", 1, agentsv1alpha1.PhaseStopped, false, stopped)}, 1, true},
		{"live and queued add up", sess("me", 9, agentsv1alpha1.PhaseQueued, false, running),
			[]agentsv1alpha1.AgentSession{
				sess("a", 0, agentsv1alpha1.PhaseCIFailed, true, running), sess("b", 1, agentsv1alpha1.PhaseQueued, false, running),
				sess("c", 10, agentsv1alpha1.PhaseQueued, false, running),
			}, 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			all := append([]agentsv1alpha1.AgentSession{c.me}, c.others...)
			g.Expect(admitted(&c.me, all, c.limit)).To(Equal(c.want))
		})
	}
}

func TestCountSessions(t *testing.T) {
	g := NewWithT(t)
	g.Expect(countSessions(nil)).To(Equal(agentsv1alpha1.SessionCounts{}))
	list := []agentsv1alpha1.AgentSession{
		sess("new", 0, "", false, ""), sess("q", 0, agentsv1alpha1.PhaseQueued, false, ""),
		sess("w", 0, agentsv1alpha1.PhaseWorking, true, ""), sess("ci", 0, agentsv1alpha1.PhaseCIFailed, true, ""),
		sess("m", 0, agentsv1alpha1.PhaseMerged, true, ""), sess("s", 0, agentsv1alpha1.PhaseStopped, true, agentsv1alpha1.SessionStopped),
	}
	g.Expect(countSessions(list)).To(Equal(agentsv1alpha1.SessionCounts{
		Total: 6, Active: 2, Queued: 2,
		ByPhase: map[string]int32{"Queued": 2, "Working": 1, "CIFailed": 1, "Merged": 1, "Stopped": 1},
	}))
}

// agentPodWith is an agent pod whose status mutate sets.
func agentPodWith(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-agent", UID: "uid-1"}}
	mutate(p)
	return p
}

// sideBySide is an agent pod whose checkout step runs beside the agent's container.
func sideBySide(mutate func(*corev1.Pod)) *corev1.Pod {
	return agentPodWith(func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "prepare"}, {Name: "agent"}}
		mutate(p)
	})
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func waiting(name, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func terminated(name string, code int32, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
}

func TestPodEvidence(t *testing.T) {
	cases := []struct {
		name     string
		pod      *corev1.Pod
		nodeLost bool
		want     lifecycle.PodEvidence
	}{
		{"no pod", nil, false, lifecycle.PodEvidence{}},
		{"created, no status yet: pending", agentPodWith(func(*corev1.Pod) {}), false,
			lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending}},
		{"running agent", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminated("prepare", 0, "Completed")}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("agent")}
			p.Status.ContainerStatuses[0].RestartCount = 2
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodRunning, ContainerRunning: true, Restarts: 2}},
		{"image pull failure", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("agent", "ImagePullBackOff", "back-off pulling")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending, WaitingReason: "ImagePullBackOff", WaitingMessage: "back-off pulling"}},
		{"an init container crash-looping is the agent's failure to start", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("prepare", "CrashLoopBackOff", "restarting")}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("agent", "PodInitializing", "")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending, WaitingReason: "CrashLoopBackOff", WaitingMessage: "prepare: restarting"}},
		{"an init container waiting alone", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("prepare", "ErrImagePull", "not found")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending, WaitingReason: "ErrImagePull", WaitingMessage: "prepare: not found"}},
		{"PodInitializing is not a failure", agentPodWith(func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("prepare", "PodInitializing", "")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending}},
		{"a failed prepare ends the pod", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminated("prepare", 1, "Error")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodFailed, Terminated: &lifecycle.ContainerExit{ExitCode: 1, Reason: "prepare Error"}}},
		{"the checkout step beside the agent, still at work: the agent is not running yet", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("agent"), running("prepare")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodRunning}},
		{"the checkout step has no status yet", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("agent")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodRunning}},
		{"the checkout step ended well: the agent runs from its end", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			done := terminated("prepare", 0, "Completed")
			done.State.Terminated.FinishedAt = metav1.NewTime(t0.Add(time.Second))
			agent := running("agent")
			agent.State.Running.StartedAt = metav1.NewTime(t0)
			p.Status.ContainerStatuses = []corev1.ContainerStatus{agent, done}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodRunning, ContainerRunning: true, Started: t0.Add(time.Second)}},
		{"the checkout step failed: the pod failed, whatever the host still does", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("agent"), terminated("prepare", 128, "Error")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodFailed, Terminated: &lifecycle.ContainerExit{ExitCode: 128, Reason: "prepare Error"}}},
		{"the checkout step failed and the host followed: the step's exit is the news", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("agent", 1, "Error"), terminated("prepare", 2, "Error")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodFailed, Terminated: &lifecycle.ContainerExit{ExitCode: 2, Reason: "prepare Error"}}},
		{"the checkout step cannot pull its image", sideBySide(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("agent", "ErrImagePull", "agent: not found"), waiting("prepare", "ErrImagePull", "not found")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending, WaitingReason: "ErrImagePull", WaitingMessage: "prepare: not found"}},
		{"the agent container ended", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("agent", 137, "OOMKilled")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodFailed, Terminated: &lifecycle.ContainerExit{ExitCode: 137, Reason: "OOMKilled"}}},
		{"evicted, on a lost node, being deleted", agentPodWith(func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: t0}
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "Evicted"
		}), true, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodFailed, Reason: "Evicted", Deleting: true, NodeLost: true}},
		{"unschedulable: the scheduler's message, and the creation time the spawn deadline counts from", agentPodWith(func(p *corev1.Pod) {
			p.CreationTimestamp = metav1.Time{Time: t0}
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 Insufficient memory."}}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending, Created: t0, Unschedulable: "0/3 nodes are available: 3 Insufficient memory."}},
		{"scheduled: no longer unschedulable", agentPodWith(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodPending}},
		{"other containers are not the agent", agentPodWith(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{running("sidecar")}
		}), false, lifecycle.PodEvidence{Exists: true, UID: "uid-1", Phase: lifecycle.PodRunning}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(podEvidence(c.pod, c.nodeLost, "")).To(Equal(c.want))
		})
	}
}

func TestPullRequestEvidence(t *testing.T) {
	checked := t0
	full := &scm.PullRequest{
		Number: 7, URL: "https://github.com/acme/widgets/pull/7", Title: "Fix", State: scm.StateOpen,
		Head: scm.Head{Branch: "shepherd/fix"}, HeadSHA: "abc", BaseRef: "main", Mergeable: scm.MergeableTrue,
		MergeState: scm.MergeStateBlocked, ReviewDecision: scm.ReviewChangesRequested,
		Checks: scm.Checks{State: scm.ChecksFailing, Passed: 3, Failed: 1, Pending: 1,
			FailedChecks: []scm.Check{{Name: "test", URL: "https://ci/1", LogExcerpt: "FAIL"}}},
		Threads: []scm.ReviewThread{
			{ID: "t1", Author: "rev", Path: "a.go", Line: 3, Body: "why?", URL: "u1"},
			{ID: "t2", Author: "rev", Path: "b.go", Line: 9, Body: "stale", Outdated: true},
		},
		Reviews: []scm.Review{{ID: "r1", Author: "rev", State: scm.ReviewStateChangesRequested, SubmittedAt: t0}},
	}
	downErr := &scm.APIError{Kind: scm.ErrUnavailable, Status: 502}
	limitErr := &scm.RateLimitError{Resource: "graphql"}
	cases := []struct {
		name  string
		obs   scm.Observation
		found bool
		want  lifecycle.PullRequestEvidence
	}{
		{"not watched yet", scm.Observation{}, false, lifecycle.PullRequestEvidence{}},
		{"never answered", scm.Observation{}, true, lifecycle.PullRequestEvidence{}},
		{"the forge is down: not observed, and said", scm.Observation{CheckedAt: checked, Err: downErr}, true,
			lifecycle.PullRequestEvidence{ForgeError: downErr.Error(), ForgeErrorReason: agentsv1alpha1.ReasonForgeUnavailable}},
		{"the forge was down from the first read", scm.Observation{Err: downErr}, true,
			lifecycle.PullRequestEvidence{ForgeError: downErr.Error(), ForgeErrorReason: agentsv1alpha1.ReasonForgeUnavailable}},
		{"rate limited: not observed, and said", scm.Observation{CheckedAt: checked, Err: limitErr}, true,
			lifecycle.PullRequestEvidence{ForgeError: limitErr.Error(), ForgeErrorReason: agentsv1alpha1.ReasonRateLimited}},
		{"the token was revoked", scm.Observation{CheckedAt: checked, Err: scm.ErrTokenRejected}, true,
			lifecycle.PullRequestEvidence{ForgeError: scm.ErrTokenRejected.Error(), ForgeErrorReason: agentsv1alpha1.ReasonTokenRejected}},
		{"the forge says there is none", scm.Observation{CheckedAt: checked, Err: scm.ErrNotFound}, true,
			lifecycle.PullRequestEvidence{Observed: true}},
		{"no pull request for the branch yet", scm.Observation{CheckedAt: checked}, true, lifecycle.PullRequestEvidence{Observed: true}},
		{"a pull request, outdated threads left out", scm.Observation{CheckedAt: checked, PullRequest: full}, true, lifecycle.PullRequestEvidence{
			Observed: true, Exists: true, Number: 7, URL: "https://github.com/acme/widgets/pull/7", Title: "Fix",
			State: agentsv1alpha1.PullRequestOpen, HeadSHA: "abc", HeadBranch: "shepherd/fix", BaseBranch: "main",
			MergeState: agentsv1alpha1.MergeStateBlocked, ReviewDecision: agentsv1alpha1.ReviewChangesRequested,
			Threads:        []lifecycle.ReviewThread{{ID: "t1", Author: "rev", Path: "a.go", Line: 3, Body: "why?", URL: "u1"}},
			ChangeRequests: []lifecycle.Review{{ID: "r1", Author: "rev"}},
			Checks: lifecycle.ChecksEvidence{State: agentsv1alpha1.ChecksFailing, Passed: 3, Failed: 1, Pending: 1,
				FailedChecks: []lifecycle.FailedCheck{{Name: "test", URL: "https://ci/1", LogExcerpt: "FAIL"}}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(pullRequestEvidence(c.obs, c.found)).To(Equal(c.want))
		})
	}

	t.Run("mapping of merge state, review decision and checks", func(t *testing.T) {
		g := NewWithT(t)
		ev := func(mutate func(*scm.PullRequest)) lifecycle.PullRequestEvidence {
			pr := &scm.PullRequest{Number: 1, State: scm.StateOpen}
			mutate(pr)
			return pullRequestEvidence(scm.Observation{CheckedAt: checked, PullRequest: pr}, true)
		}
		g.Expect(ev(func(*scm.PullRequest) {})).To(And(
			HaveField("MergeState", agentsv1alpha1.MergeStateUnknown), HaveField("ReviewDecision", agentsv1alpha1.ReviewNone),
			HaveField("Checks.State", agentsv1alpha1.ChecksNone)))
		g.Expect(ev(func(p *scm.PullRequest) { p.Draft, p.MergeState = true, scm.MergeStateClean })).To(HaveField("MergeState", agentsv1alpha1.MergeStateDraft))
		g.Expect(ev(func(p *scm.PullRequest) { p.Mergeable, p.MergeState = scm.MergeableFalse, scm.MergeStateBlocked })).
			To(HaveField("MergeState", agentsv1alpha1.MergeStateDirty))
		g.Expect(ev(func(p *scm.PullRequest) { p.State, p.MergeCommitSHA = scm.StateMerged, "m1" })).
			To(And(HaveField("State", agentsv1alpha1.PullRequestMerged), HaveField("MergeCommitSHA", "m1")))
	})
}

func TestChangeRequests(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		name    string
		reviews []scm.Review
		want    []lifecycle.Review
	}{
		{"none", nil, nil},
		{"one request", []scm.Review{{ID: "1", Author: "ann", State: scm.ReviewStateChangesRequested, SubmittedAt: at(1)}},
			[]lifecycle.Review{{ID: "1", Author: "ann"}}},
		{"a later approval by the same reviewer replaces it", []scm.Review{
			{ID: "1", Author: "ann", State: scm.ReviewStateChangesRequested, SubmittedAt: at(1)},
			{ID: "2", Author: "ann", State: scm.ReviewStateApproved, SubmittedAt: at(2)},
		}, nil},
		{"a later comment does not", []scm.Review{
			{ID: "1", Author: "ann", State: scm.ReviewStateChangesRequested, SubmittedAt: at(1)},
			{ID: "2", Author: "ann", State: scm.ReviewStateCommented, SubmittedAt: at(2)},
			{ID: "3", Author: "ann", State: scm.ReviewStatePending, SubmittedAt: at(3)},
		}, []lifecycle.Review{{ID: "1", Author: "ann"}}},
		{"a dismissed request does not count", []scm.Review{
			{ID: "1", Author: "ann", State: scm.ReviewStateChangesRequested, Dismissed: true, SubmittedAt: at(1)},
		}, nil},
		{"several reviewers, sorted by id", []scm.Review{
			{ID: "9", Author: "bob", State: scm.ReviewStateChangesRequested, SubmittedAt: at(1)},
			{ID: "4", Author: "ann", State: scm.ReviewStateChangesRequested, SubmittedAt: at(2)},
			{ID: "5", Author: "cid", State: scm.ReviewStateApproved, SubmittedAt: at(3)},
		}, []lifecycle.Review{{ID: "4", Author: "ann"}, {ID: "9", Author: "bob"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(changeRequests(c.reviews)).To(Equal(c.want))
		})
	}
}

// wtScope builds a Worktree scope for worktreePhase.
func wtScope(mutate func(*worktreeScope)) *worktreeScope {
	s := &worktreeScope{project: MakeProject("widgets", "ns").Obj()}
	mutate(s)
	return s
}

// TestResultMayFollow: a session's pod being deleted before the kubelet said its checkout step
// ended (its runner reported, the session was stopped at once) may still bring the result; the
// Worktree waits for it rather than making the checkout again, but not past the pod's grace
// period and half a minute.
func TestResultMayFollow(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	deleting := func(at time.Time, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: at}}, Status: corev1.PodStatus{Phase: phase}}
	}
	cases := []struct {
		name  string
		scope func(*worktreeScope)
		want  bool
	}{
		{"no pod", func(*worktreeScope) {}, false},
		{"a running pod: it prepares (activeSessionPods)", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{{Status: corev1.PodStatus{Phase: corev1.PodRunning}}}
		}, false},
		{"a pod going away, in its grace period", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{deleting(now.Add(20*time.Second), corev1.PodRunning)}
		}, true},
		{"a pod going away, just after its grace period", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{deleting(now.Add(-20*time.Second), corev1.PodRunning)}
		}, true},
		{"a pod stuck going away", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{deleting(now.Add(-time.Minute), corev1.PodRunning)}
		}, false},
		{"a pod that ended says no more", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{deleting(now.Add(20*time.Second), corev1.PodFailed)}
		}, false},
		{"the result is there", func(s *worktreeScope) {
			s.sessionPods = []corev1.Pod{deleting(now.Add(20*time.Second), corev1.PodRunning)}
			s.result, s.hasRes = checkoutResult{OK: true, fromAgent: true}, true
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(wtScope(c.scope).resultMayFollow(now)).To(Equal(c.want))
		})
	}
}

func TestWorktreePhase(t *testing.T) {
	ok := checkoutResult{OK: true, Result: workspace.Result{Facts: workspace.Facts{Head: "0123456789abcdef"}}, Generation: 1}
	failed := checkoutResult{Error: "branch exists", Generation: 1}
	stale := checkoutResult{Error: "branch exists", Generation: 0}
	activePod := corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	cases := []struct {
		name   string
		wt     func(*agentsv1alpha1.Worktree)
		scope  func(*worktreeScope)
		want   agentsv1alpha1.WorktreePhase
		reason string
	}{
		{"nothing yet", nil, func(*worktreeScope) {}, agentsv1alpha1.WorktreePending, "preparing"},
		{"a successful prepare", nil, func(s *worktreeScope) { s.result, s.hasRes = ok, true }, agentsv1alpha1.WorktreeReady, "0123456789ab"},
		{"a failed prepare of this spec", nil, func(s *worktreeScope) { s.result, s.hasRes = failed, true }, agentsv1alpha1.WorktreeFailed, "branch exists"},
		{"a failed prepare of an older spec is retried", nil, func(s *worktreeScope) { s.result, s.hasRes = stale, true }, agentsv1alpha1.WorktreePending, ""},
		{"the failure of a session's prepare counts whatever the spec", nil,
			func(s *worktreeScope) { s.result, s.hasRes = checkoutResult{Error: "disk full", fromAgent: true}, true }, agentsv1alpha1.WorktreeFailed, "disk full"},
		{"Ready stays Ready once the pods that prepared it are gone",
			func(w *agentsv1alpha1.Worktree) {
				w.Status.Phase, w.Status.Head = agentsv1alpha1.WorktreeReady, "fedcba9876543210"
			},
			func(*worktreeScope) {}, agentsv1alpha1.WorktreeReady, "fedcba987654"},
		{"Ready while a restored session prepares again",
			func(w *agentsv1alpha1.Worktree) { w.Status.Phase = agentsv1alpha1.WorktreeReady },
			func(s *worktreeScope) { s.sessionPods = []corev1.Pod{activePod} }, agentsv1alpha1.WorktreeReady, ""},
		{"the volume vanished", func(w *agentsv1alpha1.Worktree) { w.Status.Phase = agentsv1alpha1.WorktreeReady },
			func(s *worktreeScope) { s.volumeRecreated, s.result, s.hasRes = true, ok, true }, agentsv1alpha1.WorktreeMissing, "vanished"},
		{"a runner says the checkout is gone", func(w *agentsv1alpha1.Worktree) { w.Status.Phase = agentsv1alpha1.WorktreeReady },
			func(s *worktreeScope) {
				s.result, s.hasRes = ok, true
				s.live, s.liveAt = &runnerapi.WorkspaceReport{Path: "/shepherd/workspace/worktrees/x", Missing: true}, t0.Add(time.Minute)
			}, agentsv1alpha1.WorktreeMissing, "/shepherd/workspace/worktrees/x is gone"},
		{"a prepare after the runner's word makes it again", func(w *agentsv1alpha1.Worktree) { w.Status.Phase = agentsv1alpha1.WorktreeMissing },
			func(s *worktreeScope) {
				s.result, s.hasRes = ok, true
				s.result.Finished = t0.Add(2 * time.Minute)
				s.live, s.liveAt = &runnerapi.WorkspaceReport{Missing: true}, t0.Add(time.Minute)
			}, agentsv1alpha1.WorktreeReady, "0123456789ab"},
		{"Absent, being removed", func(w *agentsv1alpha1.Worktree) { w.Spec.State = agentsv1alpha1.WorktreeAbsent },
			func(s *worktreeScope) { s.result, s.hasRes = ok, true }, agentsv1alpha1.WorktreeRemoving, ""},
		{"Absent, removed: the branch is kept", func(w *agentsv1alpha1.Worktree) { w.Spec.State = agentsv1alpha1.WorktreeAbsent },
			func(s *worktreeScope) { s.removed = true }, agentsv1alpha1.WorktreeRemoved, "feature/x is kept"},
		{"deleted", func(w *agentsv1alpha1.Worktree) { w.DeletionTimestamp = &metav1.Time{Time: t0} },
			func(*worktreeScope) {}, agentsv1alpha1.WorktreeRemoving, ""},
		{"the Project is gone: the phase is kept", func(w *agentsv1alpha1.Worktree) { w.Status.Phase = agentsv1alpha1.WorktreeFailed },
			func(s *worktreeScope) { s.project = nil }, agentsv1alpha1.WorktreeFailed, "Project is missing"},
		{"the Project is not there yet", nil, func(s *worktreeScope) { s.project = nil }, agentsv1alpha1.WorktreePending, "waiting for the Project"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			wt := MakeWorktree("wt", "ns", "widgets", "feature/x").Obj()
			wt.Generation = 1
			if c.wt != nil {
				c.wt(wt)
			}
			phase, msg := worktreePhase(wt, wtScope(c.scope))
			g.Expect(phase).To(Equal(c.want))
			g.Expect(msg).To(ContainSubstring(c.reason))
		})
	}
}

func TestCheckoutLost(t *testing.T) {
	observed := metav1.NewTime(t0)
	ready := func(mut ...func(*agentsv1alpha1.WorktreeStatus)) *agentsv1alpha1.Worktree {
		wt := MakeWorktree("wt", "ns", "widgets", "feature/x").Obj()
		wt.Status = agentsv1alpha1.WorktreeStatus{Phase: agentsv1alpha1.WorktreeReady, Head: "0123456789abcdef", LastObservedTime: &observed}
		for _, m := range mut {
			m(&wt.Status)
		}
		return wt
	}
	made := checkoutResult{OK: true, Finished: t0.Add(time.Minute)}
	restored := made
	restored.Result.Restored = true
	old := made
	old.Finished = t0
	for _, c := range []struct {
		name string
		wt   *agentsv1alpha1.Worktree
		res  checkoutResult
		has  bool
		want bool
	}{
		{"a Ready checkout made anew", ready(), made, true, true},
		{"a Missing one made anew", ready(func(s *agentsv1alpha1.WorktreeStatus) { s.Phase = agentsv1alpha1.WorktreeMissing }), made, true, true},
		{"restored: it was there", ready(), restored, true, false},
		{"the result the status already observed", ready(), old, true, false},
		{"a first prepare", ready(func(s *agentsv1alpha1.WorktreeStatus) { s.Phase = agentsv1alpha1.WorktreePending }), made, true, false},
		{"no head was ever known", ready(func(s *agentsv1alpha1.WorktreeStatus) { s.Head = "" }), made, true, false},
		{"a failed prepare", ready(), checkoutResult{Finished: t0.Add(time.Minute)}, true, false},
		{"no result", ready(), checkoutResult{}, false, false},
	} {
		if got := checkoutLost(c.wt, c.res, c.has); got != c.want {
			t.Errorf("%s: checkoutLost = %v, want %v", c.name, got, c.want)
		}
	}
	orig := ready(func(s *agentsv1alpha1.WorktreeStatus) { s.UnpushedCommits, s.Dirty, s.Path = 2, true, "/w/x" })
	msg := lostCheckoutMessage(orig, ready())
	for _, want := range []string{"/w/x had vanished", "feature/x", "2 unpushed commit(s) and uncommitted changes are lost"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestAckMessage(t *testing.T) {
	spec := []agentsv1alpha1.Message{{ID: "tone", Text: "short"}}
	pending := func(ids ...string) []agentsv1alpha1.OutboxMessage {
		var out []agentsv1alpha1.OutboxMessage
		for _, id := range ids {
			out = append(out, agentsv1alpha1.OutboxMessage{ID: id})
		}
		return out
	}
	t.Run("moves the message from pending to delivered", func(t *testing.T) {
		g := NewWithT(t)
		m := agentsv1alpha1.MessagesStatus{Pending: pending("tone", "ciFailed.abc.1")}
		g.Expect(ackMessage(&m, spec, "tone")).To(Succeed())
		g.Expect(m).To(Equal(agentsv1alpha1.MessagesStatus{Pending: pending("ciFailed.abc.1"), Delivered: []string{"tone"}}))
		g.Expect(ackMessage(&m, spec, "ciFailed.abc.1")).To(Succeed())
		g.Expect(m).To(Equal(agentsv1alpha1.MessagesStatus{Delivered: []string{"tone", "ciFailed.abc.1"}}))
	})
	t.Run("a second ack is a conflict", func(t *testing.T) {
		m := agentsv1alpha1.MessagesStatus{Delivered: []string{"tone"}}
		NewWithT(t).Expect(errors.Is(ackMessage(&m, spec, "tone"), runnerapi.ErrConflict)).To(BeTrue())
	})
	t.Run("an unknown id is not found", func(t *testing.T) {
		m := agentsv1alpha1.MessagesStatus{Pending: pending("tone")}
		NewWithT(t).Expect(errors.Is(ackMessage(&m, spec, "other"), runnerapi.ErrNotFound)).To(BeTrue())
	})
	t.Run("a full list drops reaction ids first, never spec ids", func(t *testing.T) {
		g := NewWithT(t)
		m := agentsv1alpha1.MessagesStatus{Pending: pending("tone"), Delivered: []string{"ciFailed.old.1"}}
		for i := range maxDelivered - 1 {
			m.Delivered = append(m.Delivered, fmt.Sprintf("stuck.x.%d", i))
		}
		g.Expect(ackMessage(&m, spec, "tone")).To(Succeed())
		g.Expect(m.Delivered).To(HaveLen(maxDelivered))
		g.Expect(m.Delivered).To(ContainElement("tone"))
		g.Expect(m.Delivered).NotTo(ContainElement("ciFailed.old.1"))
	})
}

func TestPendingMessages(t *testing.T) {
	s := MakeSession("s", "ns", "widgets").Prompt("p").Message("tone", "Keep it short.").Message("late", "Later.").Obj()
	s.Status.Messages = agentsv1alpha1.MessagesStatus{
		Pending: []agentsv1alpha1.OutboxMessage{
			{ID: "done", Source: agentsv1alpha1.MessageFromUser},
			{ID: "ciFailed.abc.1", Source: agentsv1alpha1.MessageFromReaction, Trigger: agentsv1alpha1.TriggerCIFailed, Text: "CI failed"},
			{ID: "tone", Source: agentsv1alpha1.MessageFromUser},
			{ID: "removed-from-spec", Source: agentsv1alpha1.MessageFromUser},
		},
		Delivered: []string{"done"},
	}
	NewWithT(t).Expect(pendingMessages(s)).To(Equal([]runnerapi.Message{
		{ID: "ciFailed.abc.1", Text: "CI failed", Source: agentsv1alpha1.MessageFromReaction},
		{ID: "tone", Text: "Keep it short.", Source: agentsv1alpha1.MessageFromUser},
	}))
	NewWithT(t).Expect(pendingMessages(MakeSession("e", "ns", "widgets").Obj())).To(BeEmpty())
}

func TestMergeAgent(t *testing.T) {
	cpu := resource.MustParse("2")
	base := agentsv1alpha1.AgentSpec{
		Type: agentsv1alpha1.AgentClaudeCode, Image: "claude:1", Model: "sonnet", PermissionMode: agentsv1alpha1.PermissionBypass,
		Credentials: []agentsv1alpha1.AgentCredential{{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "llm", Key: "key"}}},
		Env:         []agentsv1alpha1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		ExtraArgs:   []string{"--verbose"}, ExtraInstructions: "Be careful.",
	}
	cases := []struct {
		name     string
		override *agentsv1alpha1.AgentSpec
		want     agentsv1alpha1.AgentSpec
	}{
		{"no override", nil, base},
		{"another agent type drops the Project's image and model",
			&agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCodex},
			func() agentsv1alpha1.AgentSpec {
				w := *base.DeepCopy()
				w.Type, w.Image, w.Model = agentsv1alpha1.AgentCodex, "", ""
				return w
			}()},
		{"a model API of its own, whole (another agent, another API)",
			&agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCodex, ModelAPI: &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIOpenAI,
				KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "key"}}},
			func() agentsv1alpha1.AgentSpec {
				w := *base.DeepCopy()
				w.Type, w.Image, w.Model = agentsv1alpha1.AgentCodex, "", ""
				w.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIOpenAI, KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "key"}}
				return w
			}()},
		{"field by field",
			&agentsv1alpha1.AgentSpec{
				Type: agentsv1alpha1.AgentClaudeCode, Model: "opus", PermissionMode: agentsv1alpha1.PermissionReadOnly,
				Credentials: []agentsv1alpha1.AgentCredential{
					{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "mine", Key: "k"}},
					{EnvName: "GH", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "gh", Key: "t"}},
				},
				Env:       []agentsv1alpha1.EnvVar{{Name: "B", Value: "20"}, {Name: "C", Value: "3"}},
				ExtraArgs: []string{"--quiet"}, ExtraInstructions: "Be quick.",
				Resources: &agentsv1alpha1.ResourceRequirements{Limits: agentsv1alpha1.ResourceList{CPU: &cpu}},
			},
			agentsv1alpha1.AgentSpec{
				Type: agentsv1alpha1.AgentClaudeCode, Image: "claude:1", Model: "opus", PermissionMode: agentsv1alpha1.PermissionReadOnly,
				Credentials: []agentsv1alpha1.AgentCredential{
					{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "mine", Key: "k"}},
					{EnvName: "GH", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "gh", Key: "t"}},
				},
				Env:       []agentsv1alpha1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "20"}, {Name: "C", Value: "3"}},
				ExtraArgs: []string{"--quiet"}, ExtraInstructions: "Be quick.",
				Resources: &agentsv1alpha1.ResourceRequirements{Limits: agentsv1alpha1.ResourceList{CPU: &cpu}},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			before := base.DeepCopy()
			g.Expect(mergeAgent(base, c.override)).To(Equal(c.want))
			g.Expect(base).To(Equal(*before), "the Project's spec is not changed")
		})
	}
}

func TestAgentEnv(t *testing.T) {
	g := NewWithT(t)
	env := agentEnv(agentsv1alpha1.AgentSpec{
		Env: []agentsv1alpha1.EnvVar{{Name: "MODEL_URL", Value: "http://llm"}},
		Credentials: []agentsv1alpha1.AgentCredential{
			{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "llm", Key: "key"}},
		},
	})
	g.Expect(env).To(Equal([]corev1.EnvVar{
		{Name: "ANTHROPIC_API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "key"}}},
		{Name: "MODEL_URL", Value: "http://llm"},
	}))
	g.Expect(agentEnv(agentsv1alpha1.AgentSpec{})).To(BeEmpty())
}

func TestPrepareArgs(t *testing.T) {
	p := MakeProject("widgets", "ns").URL("https://github.com/acme/widgets.git").Obj()
	wt := MakeWorktree("wt", "ns", "widgets", "feature/x").Obj()
	vol := worktreeVolume("widgets", wt, agentsv1alpha1.WorkspaceWorktree)
	cases := []struct {
		name    string
		project func(*agentsv1alpha1.Project)
		wt      func(*agentsv1alpha1.Worktree)
		mode    agentsv1alpha1.WorkspaceMode
		want    []string
	}{
		{"worktree mode: base main, from the mirror", nil, nil, agentsv1alpha1.WorkspaceWorktree, []string{
			"prepare", "--mode=Worktree", "--path=/shepherd/workspace/worktrees/wt", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git",
			"--branch=feature/x", "--base=main", "--adopt=false", "--runner-addr=127.0.0.1:8737", "--result-file=/dev/termination-log", "--mirror=/shepherd/workspace/mirror.git",
		}},
		{"clone mode: no mirror; the Project's default branch as base; adopt", func(p *agentsv1alpha1.Project) {
			p.Spec.Repository.DefaultBranch = "trunk"
		}, func(w *agentsv1alpha1.Worktree) { w.Spec.Adopt = true }, agentsv1alpha1.WorkspaceClone, []string{
			"prepare", "--mode=Clone", "--path=/shepherd/workspace/checkout", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git",
			"--branch=feature/x", "--base=trunk", "--adopt=true", "--runner-addr=127.0.0.1:8737", "--result-file=/dev/termination-log",
		}},
		{"the Worktree's base wins; setup commands as JSON", func(p *agentsv1alpha1.Project) {
			p.Spec.Workspace.Setup = []agentsv1alpha1.SetupCommand{{Name: "deps", Command: []string{"go", "mod", "download"}}}
		}, func(w *agentsv1alpha1.Worktree) { w.Spec.Base = "release-1" }, agentsv1alpha1.WorkspaceWorktree, []string{
			"prepare", "--mode=Worktree", "--path=/shepherd/workspace/worktrees/wt", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git",
			"--branch=feature/x", "--base=release-1", "--adopt=false", "--runner-addr=127.0.0.1:8737", "--result-file=/dev/termination-log", "--mirror=/shepherd/workspace/mirror.git",
			`--setup=[{"name":"deps","command":["go","mod","download"]}]`,
		}},
		{"worktree mode: shared paths link to the cache on the Project's volume", func(p *agentsv1alpha1.Project) {
			p.Spec.Workspace.SharedPaths = []string{"node_modules", "web/node_modules"}
		}, nil, agentsv1alpha1.WorkspaceWorktree, []string{
			"prepare", "--mode=Worktree", "--path=/shepherd/workspace/worktrees/wt", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git",
			"--branch=feature/x", "--base=main", "--adopt=false", "--runner-addr=127.0.0.1:8737", "--result-file=/dev/termination-log", "--mirror=/shepherd/workspace/mirror.git",
			"--shared-paths=node_modules,web/node_modules", "--shared-dir=/shepherd/workspace/shared",
		}},
		{"clone mode: shared paths link to the cache on the Project's volume, mounted apart", func(p *agentsv1alpha1.Project) {
			p.Spec.Workspace.SharedPaths = []string{".venv"}
		}, nil, agentsv1alpha1.WorkspaceClone, []string{
			"prepare", "--mode=Clone", "--path=/shepherd/workspace/checkout", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git",
			"--branch=feature/x", "--base=main", "--adopt=false", "--runner-addr=127.0.0.1:8737", "--result-file=/dev/termination-log",
			"--shared-paths=.venv", "--shared-dir=/shepherd/project/shared",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			p, w := p.DeepCopy(), wt.DeepCopy()
			if c.project != nil {
				c.project(p)
			}
			if c.wt != nil {
				c.wt(w)
			}
			v := vol
			if c.mode != v.Mode {
				v = worktreeVolume("widgets", w, c.mode)
			}
			args, err := prepareArgs(p, w, v)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(args).To(Equal(c.want))
		})
	}
}

// testDeps are Deps with the options that shape pods.
func testDeps() *Deps {
	return &Deps{Options: Options{
		RunnerImage: "runner:1", RunnerURL: "https://shepherd-runner.shepherd-system.svc:8090",
		AgentImages:    map[agentsv1alpha1.AgentType]string{agentsv1alpha1.AgentClaudeCode: "claude:default"},
		EgressProxyURL: "http://10.96.0.50:3128",
	}}
}

// runnerSide names the containers of the runner's trust domain.
var runnerSide = map[string]bool{containerRunner: true}

// expectRestricted checks a pod against the restricted Pod Security Standard and Shepherd's own
// rules: no API token; read-only root file systems; the runner's token, CA and model key in the
// runner's container only; the agent's containers mounting only their own directories, the
// mirror read-only, and no Shepherd setting in their environment.
func expectRestricted(g Gomega, pod *corev1.Pod) {
	spec := pod.Spec
	g.Expect(spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()), "no service account token is mounted")
	g.Expect(spec.HostNetwork || spec.HostPID || spec.HostIPC).To(BeFalse())
	g.Expect(spec.ShareProcessNamespace).To(Or(BeNil(), HaveValue(BeFalse())), "the agent must not see the runner's processes")
	g.Expect(spec.SecurityContext).NotTo(BeNil())
	g.Expect(spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
	g.Expect(spec.SecurityContext.RunAsUser).To(HaveValue(Not(BeZero())))
	g.Expect(spec.SecurityContext.SeccompProfile).To(HaveField("Type", corev1.SeccompProfileTypeRuntimeDefault))
	for _, v := range spec.Volumes {
		g.Expect(v.HostPath).To(BeNil(), "volume %s", v.Name)
		g.Expect(v.Name).NotTo(HavePrefix("kube-api-access"))
		if v.Secret != nil {
			g.Expect(v.Name).To(Equal(volModelKey), "the only Secret volume is the model key")
		}
		if v.Projected != nil {
			g.Expect(v.Name).To(Equal(volToken))
			g.Expect(v.Projected.Sources).To(ConsistOf(
				HaveField("ServiceAccountToken", And(Not(BeNil()), HaveField("Audience", runnerapi.Audience), HaveField("ExpirationSeconds", HaveValue(BeNumerically("<=", 3600))))),
				HaveField("ConfigMap.Name", RunnerCAConfigMap)))
		}
		if v.EmptyDir != nil {
			g.Expect(v.EmptyDir.SizeLimit).NotTo(BeNil(), "volume %s is bounded", v.Name)
		}
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		g.Expect(sc).NotTo(BeNil(), "container %s", c.Name)
		g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), "container %s", c.Name)
		g.Expect(sc.Privileged).To(Or(BeNil(), HaveValue(BeFalse())), "container %s", c.Name)
		g.Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()), "container %s", c.Name)
		g.Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), "container %s", c.Name)
		g.Expect(sc.Capabilities).To(HaveField("Drop", ConsistOf(corev1.Capability("ALL"))), "container %s", c.Name)
		g.Expect(sc.Capabilities.Add).To(BeEmpty(), "container %s", c.Name)
		g.Expect(sc.SeccompProfile).To(HaveField("Type", corev1.SeccompProfileTypeRuntimeDefault), "container %s", c.Name)
		g.Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory), "container %s has a memory limit", c.Name)
		g.Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceEphemeralStorage), "container %s has a disk limit", c.Name)
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				g.Expect(e.ValueFrom.SecretKeyRef).NotTo(BeNil(), "env %s of %s: only Secret references", e.Name, c.Name)
			}
			g.Expect(strings.ToLower(e.Value)).NotTo(ContainSubstring("secret-value"), "env %s of %s", e.Name, c.Name)
		}
		g.Expect(c.EnvFrom).To(BeEmpty(), "container %s", c.Name)
		if runnerSide[c.Name] {
			g.Expect(sc.RunAsUser).To(HaveValue(Equal(runnerUser)), "container %s", c.Name)
			continue
		}
		// The agent's trust domain.
		g.Expect(sc.RunAsUser).To(HaveValue(Equal(podUser)), "container %s", c.Name)
		for _, e := range c.Env {
			g.Expect(e.Name).NotTo(HavePrefix("SHEPHERD_"), "container %s holds no channel setting", c.Name)
		}
		for _, m := range c.VolumeMounts {
			g.Expect(m.Name).NotTo(BeElementOf(volToken, volModelKey, volRunnerTmp), "container %s mounts %s", c.Name, m.Name)
			if m.Name == volWorkspace || m.Name == projectVolume {
				g.Expect(m.SubPath).NotTo(BeEmpty(), "container %s mounts only its own part of %s, not %s whole", c.Name, m.Name, m.MountPath)
				g.Expect(m.SubPath).NotTo(Or(HavePrefix("runner"), HavePrefix("worktrees/.spares")), "container %s", c.Name)
				if m.SubPath == "mirror.git" {
					g.Expect(m.ReadOnly).To(BeTrue(), "the mirror is read-only to the agent")
				}
			}
		}
	}
}

func TestRunnerArgs(t *testing.T) {
	wt := MakeWorktree("fix", "ns", "widgets", "shepherd/fix").Obj()
	wt.Spec.Base = "release-1.2" // the session's own base; spares follow the Project's default
	agent := agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentClaudeCode}
	maxReq := int64(50)
	withModel := agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentClaudeCode, ModelAPI: &agentsv1alpha1.ModelAPISpec{
		API: agentsv1alpha1.ModelAPIAnthropic, URL: "https://llm.example.com", KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "llm", Key: "key"},
		Limits: &agentsv1alpha1.ModelLimits{MaxRequests: &maxReq}}}
	for _, tc := range []struct {
		name    string
		mode    agentsv1alpha1.WorkspaceMode
		spares  int32
		branch  agentsv1alpha1.BranchName
		session string
		agent   *agentsv1alpha1.AgentSpec
		want    []string
	}{
		{"clone mode has no mirror and no spares", agentsv1alpha1.WorkspaceClone, 0, "", "fix", &agent, []string{"run", "--listen=127.0.0.1:8737",
			"--volume-mode=Clone", "--checkout-dir=/shepherd/workspace/checkout", "--agent-dirs=/shepherd/workspace/homes/fix",
			"--workdir=/shepherd/workspace/checkout", "--agent-home=/shepherd/workspace/homes/fix", "--host-addr=127.0.0.1:8738", "--state-dir=/shepherd/workspace/runner/fix"}},
		{"worktree mode, spares asked for", agentsv1alpha1.WorkspaceWorktree, 3, "develop", "fix", &agent, []string{"run", "--listen=127.0.0.1:8737",
			"--volume-mode=Worktree", "--checkout-dir=/shepherd/workspace/worktrees/fix", "--agent-dirs=/shepherd/workspace/homes/fix",
			"--mirror=/shepherd/workspace/mirror.git", "--workdir=/shepherd/workspace/worktrees/fix", "--agent-home=/shepherd/workspace/homes/fix", "--host-addr=127.0.0.1:8738",
			"--state-dir=/shepherd/workspace/runner/fix", "--spare-worktrees=3", "--base=develop"}},
		{"a checkout pod's runner serves git only", agentsv1alpha1.WorkspaceWorktree, 3, "", "", nil, []string{"run", "--listen=127.0.0.1:8737",
			"--volume-mode=Worktree", "--checkout-dir=/shepherd/workspace/worktrees/fix", "--mirror=/shepherd/workspace/mirror.git", "--serve-only"}},
		{"the model proxy", agentsv1alpha1.WorkspaceClone, 0, "", "fix", &withModel, []string{"run", "--listen=127.0.0.1:8737",
			"--volume-mode=Clone", "--checkout-dir=/shepherd/workspace/checkout", "--agent-dirs=/shepherd/workspace/homes/fix",
			"--workdir=/shepherd/workspace/checkout", "--agent-home=/shepherd/workspace/homes/fix", "--host-addr=127.0.0.1:8738", "--state-dir=/shepherd/workspace/runner/fix",
			"--model-api=Anthropic", "--model-url=https://llm.example.com", "--model-key-file=/var/run/secrets/shepherd-model/key",
			"--model-max-requests=50", "--egress-proxy=http://10.96.0.50:3128"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := MakeProject("widgets", "ns").URL("https://github.com/acme/widgets.git").Obj()
			p.Spec.Workspace.Mode, p.Spec.Workspace.SpareWorktrees, p.Spec.Repository.DefaultBranch = tc.mode, tc.spares, tc.branch
			home := ""
			if tc.session != "" {
				home = homePath(tc.session)
			}
			NewWithT(t).Expect(testDeps().runnerArgs(p, worktreeVolume("widgets", wt, tc.mode), home, tc.session, tc.agent)).To(Equal(tc.want))
		})
	}
}

func TestAgentPod(t *testing.T) {
	g := NewWithT(t)
	mem := resource.MustParse("4Gi")
	p := MakeProject("widgets", "ns").URL("https://github.com/acme/widgets.git").Obj()
	p.Spec.Agent.Credentials = []agentsv1alpha1.AgentCredential{{EnvName: "NPM_TOKEN", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "npm", Key: "token"}}}
	p.Spec.Agent.Env = []agentsv1alpha1.EnvVar{{Name: "MODEL_URL", Value: "http://llm"}}
	p.Spec.Agent.Resources = &agentsv1alpha1.ResourceRequirements{Limits: agentsv1alpha1.ResourceList{Memory: &mem}}
	p.Spec.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic, KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "llm", Key: "key"}}
	s := MakeSession("fix", "ns", "widgets").Prompt("p").Obj()
	wt := MakeWorktree("fix", "ns", "widgets", "shepherd/fix").Obj()
	vol := worktreeVolume("widgets", wt, agentsv1alpha1.WorkspaceWorktree)
	d := testDeps()

	pod, err := d.agentPod(s, p, wt, vol, mergeAgent(p.Spec.Agent, s.Spec.Agent))
	g.Expect(err).NotTo(HaveOccurred())
	expectRestricted(g, pod)
	g.Expect(pod.Name).To(Equal("fix-agent"))
	g.Expect(pod.Labels).To(And(
		HaveKeyWithValue(agentsv1alpha1.LabelSession, "fix"), HaveKeyWithValue(agentsv1alpha1.LabelWorktree, "fix"),
		HaveKeyWithValue(agentsv1alpha1.LabelProject, "widgets"), HaveKeyWithValue(agentsv1alpha1.LabelComponent, "agent"),
		HaveKeyWithValue(agentsv1alpha1.LabelManagedBy, agentsv1alpha1.ManagedByValue)))
	g.Expect(pod.Spec.ServiceAccountName).To(Equal("widgets-agent"))
	g.Expect(pod.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	g.Expect(pod.Spec.InitContainers).To(HaveExactElements(
		And(HaveField("Name", "runner"), HaveField("Image", "runner:1"), HaveField("RestartPolicy", HaveValue(Equal(corev1.ContainerRestartPolicyAlways))),
			HaveField("StartupProbe", BeNil()),
			HaveField("Lifecycle.PostStart.Exec.Command", ContainElements("/usr/local/bin/shepherd-runner", "probe", "--wait=60s")),
			HaveField("Args", ContainElements("run", "--copy-to=/shepherd/bin/runner", "--git-config=/shepherd/bin/gitconfig", "--prepared-file=/tmp/prepared.json"))),
	))
	runner := pod.Spec.InitContainers[0]
	g.Expect(runner.Env).To(ContainElements(
		corev1.EnvVar{Name: "SHEPHERD_MANAGER_URL", Value: "https://shepherd-runner.shepherd-system.svc:8090"},
		corev1.EnvVar{Name: "SHEPHERD_TOKEN_FILE", Value: "/var/run/secrets/shepherd/token"},
		corev1.EnvVar{Name: "SHEPHERD_CA_FILE", Value: "/var/run/secrets/shepherd/ca.crt"},
	))
	g.Expect(runner.VolumeMounts).To(ContainElements(
		corev1.VolumeMount{Name: "runner-token", MountPath: "/var/run/secrets/shepherd", ReadOnly: true},
		corev1.VolumeMount{Name: "model-key", MountPath: "/var/run/secrets/shepherd-model", ReadOnly: true},
		corev1.VolumeMount{Name: "workspace", MountPath: "/shepherd/workspace"},
	))
	g.Expect(pod.Spec.Volumes).To(ContainElement(And(HaveField("Name", "model-key"), HaveField("Secret.SecretName", "llm"),
		HaveField("Secret.Items", ConsistOf(corev1.KeyToPath{Key: "key", Path: "key"})))))

	// The checkout step first, beside the agent's container (started together, in this order).
	g.Expect(pod.Spec.Containers).To(HaveLen(2))
	prep := pod.Spec.Containers[0]
	g.Expect(prep).To(And(HaveField("Name", "prepare"), HaveField("Image", "claude:default"), HaveField("Command", []string{"/shepherd/bin/runner"}),
		HaveField("Args", ContainElements("prepare", "--branch=shepherd/fix", "--remote-url=http://127.0.0.1:8737/git/acme/widgets.git"))))
	g.Expect(prep.Resources.Limits).To(Equal(pod.Spec.Containers[1].Resources.Limits), "the agent's limits")
	g.Expect(prep.Resources.Requests).To(Equal(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}),
		"small requests: the pod's requests are its containers' sum")
	agent := pod.Spec.Containers[1]
	g.Expect(agent.Name).To(Equal("agent"))
	g.Expect(agent.Command).To(Equal([]string{"/shepherd/bin/runner"}))
	g.Expect(agent.Args).To(Equal([]string{"host", "--listen=127.0.0.1:8738"}))
	g.Expect(agent.Resources.Limits).To(HaveKeyWithValue(corev1.ResourceMemory, mem))
	g.Expect(agent.Resources.Limits).To(HaveKeyWithValue(corev1.ResourceEphemeralStorage, resource.MustParse("8Gi")), "a default disk limit")
	g.Expect(agent.Env).To(ContainElements(
		corev1.EnvVar{Name: "HOME", Value: "/shepherd/workspace/homes/fix"},
		corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://10.96.0.50:3128"},
		corev1.EnvVar{Name: "NO_PROXY", Value: "127.0.0.1,localhost"},
		corev1.EnvVar{Name: "MODEL_URL", Value: "http://llm"},
		HaveField("ValueFrom.SecretKeyRef.Key", "token"),
	))
	g.Expect(agent.VolumeMounts).To(ConsistOf(
		corev1.VolumeMount{Name: "shepherd-bin", MountPath: "/shepherd/bin", ReadOnly: true},
		corev1.VolumeMount{Name: "agent-tmp", MountPath: "/tmp"},
		corev1.VolumeMount{Name: "workspace", MountPath: "/shepherd/workspace/worktrees/fix", SubPath: "worktrees/fix"},
		corev1.VolumeMount{Name: "workspace", MountPath: "/shepherd/workspace/homes/fix", SubPath: "homes/fix"},
		corev1.VolumeMount{Name: "workspace", MountPath: "/shepherd/workspace/mirror.git", SubPath: "mirror.git", ReadOnly: true},
	))
	g.Expect(pod.Spec.Volumes).To(ContainElement(And(HaveField("Name", "workspace"),
		HaveField("PersistentVolumeClaim.ClaimName", "widgets-workspace"))))

	again, err := d.agentPod(s, p, wt, vol, mergeAgent(p.Spec.Agent, s.Spec.Agent))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(pod), "the builder is deterministic")
	g.Expect(pod.Spec.NodeSelector).To(BeEmpty())
	g.Expect(pod.Spec.Tolerations).To(BeEmpty())
	g.Expect(pod.Spec.RuntimeClassName).To(BeNil())
}

func TestPodsMountTheSharedPathsCache(t *testing.T) {
	p := MakeProject("widgets", "ns").URL("https://github.com/acme/widgets.git").Obj()
	p.Spec.Workspace.SharedPaths = []string{"node_modules"}
	s := MakeSession("fix", "ns", "widgets").Prompt("p").Obj()
	wt := MakeWorktree("fix", "ns", "widgets", "shepherd/fix").Obj()
	d := testDeps()
	projectVolume := And(HaveField("Name", "project-workspace"), HaveField("PersistentVolumeClaim.ClaimName", "widgets-workspace"))

	// pods returns the agent pod and the worktree pod of a mode, and their prepare and agent
	// containers (prepare, agent; prepare).
	pods := func(g Gomega, mode agentsv1alpha1.WorkspaceMode) ([]*corev1.Pod, []corev1.Container) {
		vol := worktreeVolume("widgets", wt, mode)
		agentPod, err := d.agentPod(s, p, wt, vol, mergeAgent(p.Spec.Agent, s.Spec.Agent))
		g.Expect(err).NotTo(HaveOccurred())
		checkoutPod, err := d.worktreePod(p, wt, vol, operationPrepare)
		g.Expect(err).NotTo(HaveOccurred())
		for _, pod := range []*corev1.Pod{agentPod, checkoutPod} {
			expectRestricted(g, pod)
		}
		return []*corev1.Pod{agentPod, checkoutPod}, []corev1.Container{agentPod.Spec.Containers[0], agentPod.Spec.Containers[1], checkoutPod.Spec.Containers[0]}
	}
	cacheMount := func(name, path, sub string, ro bool) corev1.VolumeMount {
		return corev1.VolumeMount{Name: name, MountPath: path, SubPath: sub, ReadOnly: ro}
	}

	t.Run("worktree mode: a directory of the volume every pod already mounts", func(t *testing.T) {
		g := NewWithT(t)
		ps, cs := pods(g, agentsv1alpha1.WorkspaceWorktree)
		for _, pod := range ps {
			g.Expect(pod.Spec.Volumes).NotTo(ContainElement(projectVolume), "no second volume")
			g.Expect(pod.Spec.InitContainers[0].Args).To(ContainElement(ContainSubstring("/shepherd/workspace/shared")), "the runner makes the cache's directory")
		}
		g.Expect(cs[0].VolumeMounts).To(ContainElement(cacheMount("workspace", "/shepherd/workspace/shared", "shared", false)), "prepare fills the cache")
		g.Expect(cs[1].VolumeMounts).To(ContainElement(cacheMount("workspace", "/shepherd/workspace/shared", "shared", true)), "the agent only reads it")
		for _, c := range []corev1.Container{cs[0], cs[2]} {
			g.Expect(c.Args).To(ContainElements("--shared-paths=node_modules", "--shared-dir=/shepherd/workspace/shared"), c.Name)
		}
	})

	t.Run("clone mode: the Project's workspace volume, mounted beside the checkout's", func(t *testing.T) {
		g := NewWithT(t)
		ps, cs := pods(g, agentsv1alpha1.WorkspaceClone)
		for _, pod := range ps {
			g.Expect(pod.Spec.Volumes).To(ContainElements(projectVolume,
				And(HaveField("Name", "workspace"), HaveField("PersistentVolumeClaim.ClaimName", "fix-checkout"))), pod.Name)
			g.Expect(pod.Spec.InitContainers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "project-workspace", MountPath: "/shepherd/project"}))
		}
		// The links are absolute: prepare makes them, and the agent follows them, at one path.
		g.Expect(cs[0].VolumeMounts).To(ContainElement(cacheMount("project-workspace", "/shepherd/project/shared", "shared", false)))
		g.Expect(cs[1].VolumeMounts).To(ContainElement(cacheMount("project-workspace", "/shepherd/project/shared", "shared", true)))
		for _, c := range []corev1.Container{cs[0], cs[2]} {
			g.Expect(c.Args).To(ContainElements("--shared-paths=node_modules", "--shared-dir=/shepherd/project/shared"), c.Name)
		}
	})

	t.Run("no shared paths: no flag, no second volume", func(t *testing.T) {
		g := NewWithT(t)
		p := p.DeepCopy()
		p.Spec.Workspace.SharedPaths = nil
		for _, mode := range []agentsv1alpha1.WorkspaceMode{agentsv1alpha1.WorkspaceWorktree, agentsv1alpha1.WorkspaceClone} {
			pod, err := d.agentPod(s, p, wt, worktreeVolume("widgets", wt, mode), mergeAgent(p.Spec.Agent, s.Spec.Agent))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Spec.Volumes).NotTo(ContainElement(projectVolume))
			g.Expect(pod.Spec.Containers[0].Args).NotTo(ContainElement(HavePrefix("--shared")))
		}
	})
}

func TestPodsFollowTheProjectsScheduling(t *testing.T) {
	g := NewWithT(t)
	p := MakeProject("widgets", "ns").Obj()
	tol := corev1.Toleration{Key: "pool", Operator: corev1.TolerationOpEqual, Value: "agents", Effect: corev1.TaintEffectNoSchedule}
	p.Spec.Scheduling = &agentsv1alpha1.SchedulingSpec{
		NodeSelector: map[string]string{"pool": "agents"}, Tolerations: []corev1.Toleration{tol}, PriorityClassName: "agents-low",
		RuntimeClassName: "gvisor",
	}
	s := MakeSession("fix", "ns", "widgets").Prompt("p").Obj()
	wt := MakeWorktree("fix", "ns", "widgets", "shepherd/fix").Obj()
	vol := worktreeVolume("widgets", wt, agentsv1alpha1.WorkspaceWorktree)
	d := testDeps()

	agentPod, err := d.agentPod(s, p, wt, vol, mergeAgent(p.Spec.Agent, s.Spec.Agent))
	g.Expect(err).NotTo(HaveOccurred())
	checkoutPod, err := d.worktreePod(p, wt, vol, operationPrepare)
	g.Expect(err).NotTo(HaveOccurred())
	for _, pod := range []*corev1.Pod{agentPod, checkoutPod} {
		g.Expect(pod.Spec.NodeSelector).To(Equal(map[string]string{"pool": "agents"}), pod.Name)
		g.Expect(pod.Spec.Tolerations).To(Equal([]corev1.Toleration{tol}), pod.Name)
		g.Expect(pod.Spec.PriorityClassName).To(Equal("agents-low"), pod.Name)
		g.Expect(pod.Spec.RuntimeClassName).To(HaveValue(Equal("gvisor")), pod.Name)
	}
	agentPod.Spec.NodeSelector["pool"] = "changed"
	g.Expect(p.Spec.Scheduling.NodeSelector).To(HaveKeyWithValue("pool", "agents"), "the pod holds a copy")
}

// TestPodsShareAReadWriteOnceClaimOnOneNode: the pods that mount one ReadWriteOnce claim carry
// its label and a required pod affinity to it on the same host; ReadWriteMany and
// ReadWriteOncePod claims get none.
func TestPodsShareAReadWriteOnceClaimOnOneNode(t *testing.T) {
	hostTerm := func(key, claim string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: claim}}, TopologyKey: "kubernetes.io/hostname"}
	}
	long := strings.Repeat("w", 60)
	for _, tc := range []struct {
		name    string
		mode    agentsv1alpha1.WorkspaceMode
		access  string
		wtMode  string // the Worktree's own storage override
		shared  bool
		project string
		want    []corev1.PodAffinityTerm
	}{
		{name: "worktree mode, the default ReadWriteOnce workspace", mode: agentsv1alpha1.WorkspaceWorktree,
			want: []corev1.PodAffinityTerm{hostTerm(agentsv1alpha1.LabelClaim, "widgets-workspace")}},
		{name: "worktree mode, ReadWriteMany", mode: agentsv1alpha1.WorkspaceWorktree, access: "ReadWriteMany"},
		{name: "worktree mode, ReadWriteOncePod", mode: agentsv1alpha1.WorkspaceWorktree, access: "ReadWriteOncePod"},
		{name: "clone mode: the Worktree's checkout", mode: agentsv1alpha1.WorkspaceClone,
			want: []corev1.PodAffinityTerm{hostTerm(agentsv1alpha1.LabelClaim, "fix-checkout")}},
		{name: "clone mode, the Worktree's checkout ReadWriteMany", mode: agentsv1alpha1.WorkspaceClone, wtMode: "ReadWriteMany"},
		{name: "clone mode with shared paths: the checkout and the Project's workspace", mode: agentsv1alpha1.WorkspaceClone, shared: true,
			want: []corev1.PodAffinityTerm{hostTerm(agentsv1alpha1.LabelClaim, "fix-checkout"), hostTerm(agentsv1alpha1.LabelProjectClaim, "widgets-workspace")}},
		{name: "a claim name past 63 characters is hashed", mode: agentsv1alpha1.WorkspaceWorktree, project: long,
			want: []corev1.PodAffinityTerm{hostTerm(agentsv1alpha1.LabelClaim, labelValue(long+"-workspace"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "widgets"
			if tc.project != "" {
				name = tc.project
			}
			p := MakeProject(name, "ns").Obj()
			if tc.access != "" {
				p.Spec.Workspace.Storage = &agentsv1alpha1.StorageSpec{AccessMode: tc.access}
			}
			if tc.shared {
				p.Spec.Workspace.SharedPaths = []string{"node_modules"}
			}
			s := MakeSession("fix", "ns", name).Prompt("p").Obj()
			wt := MakeWorktree("fix", "ns", name, "shepherd/fix").Obj()
			if tc.wtMode != "" {
				wt.Spec.Storage = &agentsv1alpha1.StorageSpec{AccessMode: tc.wtMode}
			}
			vol := worktreeVolume(name, wt, tc.mode)
			d := testDeps()
			agentPod, err := d.agentPod(s, p, wt, vol, mergeAgent(p.Spec.Agent, s.Spec.Agent))
			g.Expect(err).NotTo(HaveOccurred())
			checkoutPod, err := d.worktreePod(p, wt, vol, operationPrepare)
			g.Expect(err).NotTo(HaveOccurred())
			for _, pod := range []*corev1.Pod{agentPod, checkoutPod} {
				if tc.want == nil {
					g.Expect(pod.Spec.Affinity).To(BeNil(), pod.Name)
					g.Expect(pod.Labels).NotTo(HaveKey(agentsv1alpha1.LabelClaim), pod.Name)
					continue
				}
				g.Expect(pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution).To(Equal(tc.want), pod.Name)
				for _, term := range tc.want {
					for k, v := range term.LabelSelector.MatchLabels {
						g.Expect(pod.Labels).To(HaveKeyWithValue(k, v), "%s matches its own term: the first pod can go anywhere", pod.Name)
						g.Expect(len(v)).To(BeNumerically("<=", 63))
					}
				}
			}
		})
	}
}

func TestWorktreePod(t *testing.T) {
	g := NewWithT(t)
	p := MakeProject("widgets", "ns").Obj()
	wt := MakeWorktree("feature", "ns", "widgets", "feature/x").Obj()
	wt.Generation = 3
	wt.Annotations = map[string]string{agentsv1alpha1.ReconcileRequestAnnotation: "now"}
	d := testDeps()

	prep, err := d.worktreePod(p, wt, worktreeVolume("widgets", wt, agentsv1alpha1.WorkspaceClone), operationPrepare)
	g.Expect(err).NotTo(HaveOccurred())
	expectRestricted(g, prep)
	g.Expect(prep.Name).To(Equal("feature-worktree"))
	g.Expect(prep.Labels).To(And(HaveKeyWithValue(agentsv1alpha1.LabelWorktree, "feature"), HaveKeyWithValue(agentsv1alpha1.LabelComponent, "worktree"),
		Not(HaveKey(agentsv1alpha1.LabelSession))), "a worktree pod is no session's: the runner channel serves it git only")
	g.Expect(prep.Annotations).To(Equal(map[string]string{
		annotationOperation: operationPrepare, annotationGeneration: "3", agentsv1alpha1.ReconcileRequestAnnotation: "now"}))
	g.Expect(prep.Spec.InitContainers[0].Args).To(ContainElement("--serve-only"))
	g.Expect(prep.Spec.Containers).To(ConsistOf(And(HaveField("Name", "prepare"), HaveField("Image", "claude:default"),
		HaveField("Args", ContainElements("prepare", "--mode=Clone")))))
	g.Expect(prep.Spec.Volumes).To(ContainElement(And(HaveField("Name", "workspace"),
		HaveField("PersistentVolumeClaim.ClaimName", "feature-checkout"))))

	rm, err := d.worktreePod(p, wt, worktreeVolume("widgets", wt, agentsv1alpha1.WorkspaceWorktree), operationRemove)
	g.Expect(err).NotTo(HaveOccurred())
	expectRestricted(g, rm)
	g.Expect(rm.Spec.Containers).To(ConsistOf(And(HaveField("Name", "remove"), HaveField("Args", Equal([]string{
		"remove", "--mode=Worktree", "--path=/shepherd/workspace/worktrees/feature"})))))
}

func TestNodeLost(t *testing.T) {
	now := t0
	node := func(status corev1.ConditionStatus, since time.Duration) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-since)),
		}}}}
	}
	cases := []struct {
		name  string
		node  *corev1.Node
		found bool
		want  bool
	}{
		{"the node is gone", nil, false, true},
		{"ready", node(corev1.ConditionTrue, time.Hour), true, false},
		{"not ready, within the grace", node(corev1.ConditionFalse, 30*time.Second), true, false},
		{"not ready past the grace", node(corev1.ConditionUnknown, 3*time.Minute), true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(nodeLost(c.node, c.found, now, 2*time.Minute)).To(Equal(c.want))
		})
	}
}

func TestRunnerEvidence(t *testing.T) {
	g := NewWithT(t)
	g.Expect(runnerEvidence(SessionReport{}, false, pricing.Defaults())).To(Equal(lifecycle.RunnerEvidence{}))
	g.Expect(runnerEvidence(SessionReport{PullRequest: &runnerapi.PullRequestResult{Number: 4}}, true, pricing.Defaults())).
		To(Equal(lifecycle.RunnerEvidence{PullRequestNumber: 4}), "a pull request opened before any report is evidence, not a report")
	code := int32(1)
	r := SessionReport{
		PodUID: "uid-2", Received: t0,
		Activity: &runnerapi.ActivityReport{State: agentsv1alpha1.ActivityExited, LastActivityTime: t0.Add(-time.Minute), ExitCode: &code, Message: "boom"},
		Agent:    runnerapi.AgentReport{SessionID: "conv"}, Summary: "did things",
		Usage: &runnerapi.Usage{CostUSD: "0.42", InputTokens: 10, OutputTokens: 20, Turns: 2},
	}
	g.Expect(runnerEvidence(r, true, pricing.Defaults())).To(Equal(lifecycle.RunnerEvidence{
		Reported: true, PodUID: "uid-2", ReportTime: t0, State: agentsv1alpha1.ActivityExited, LastActivityTime: t0.Add(-time.Minute),
		ExitCode: &code, Message: "boom", AgentSessionID: "conv", Summary: "did things",
		Usage: &agentsv1alpha1.UsageStatus{CostUSD: "0.42", InputTokens: 10, OutputTokens: 20, Turns: 2, Source: agentsv1alpha1.UsageFromAgent},
	}))
}

func TestWebhookPollInterval(t *testing.T) {
	d := func(s string) *metav1.Duration { v, _ := time.ParseDuration(s); return &metav1.Duration{Duration: v} }
	for _, tc := range []struct {
		name          string
		poll, webhook *metav1.Duration
		want          time.Duration
	}{
		{"defaults: 10 times the default minute", nil, nil, 10 * time.Minute},
		{"10 times the Project's poll interval", d("10s"), nil, 100 * time.Second},
		{"at most an hour", d("30m"), nil, time.Hour},
		{"the Project's own", d("1m"), d("3m"), 3 * time.Minute},
		{"strict: equal to the poll interval", d("1m"), d("1m"), time.Minute},
		{"never below the poll interval", d("5m"), d("1m"), 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := MakeProject("widgets", "ns").Obj()
			p.Spec.SCM.PollInterval, p.Spec.SCM.WebhookPollInterval = tc.poll, tc.webhook
			NewWithT(t).Expect(webhookPollInterval(p)).To(Equal(tc.want))
		})
	}
}

// TestQuietSpawn: only the routine step from the workspace's (or the pod's) wait to the
// runner's, within spawnQuiet of the Worktree's readiness, with nothing else to write or do,
// keeps the last status.
func TestQuietSpawn(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	cond := func(t, reason string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: reason}
	}
	session := func(phase agentsv1alpha1.SessionPhase, reason string) *agentsv1alpha1.AgentSession {
		return &agentsv1alpha1.AgentSession{Status: agentsv1alpha1.AgentSessionStatus{Phase: phase, PodName: "s-agent", Conditions: []metav1.Condition{
			cond(agentsv1alpha1.ConditionReady, reason), cond(agentsv1alpha1.ConditionWorkspaceReady, reason), cond(agentsv1alpha1.ConditionPullRequestOpen, "NoPullRequest"),
		}}}
	}
	worktree := func(readyAt time.Time) *agentsv1alpha1.Worktree {
		return &agentsv1alpha1.Worktree{Status: agentsv1alpha1.WorktreeStatus{Phase: agentsv1alpha1.WorktreeReady, Conditions: []metav1.Condition{{
			Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ReasonSucceeded, LastTransitionTime: metav1.NewTime(readyAt),
		}}}}
	}
	waiting, runner := session(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorkspacePending), session(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSpawning)
	cases := []struct {
		name      string
		orig, now *agentsv1alpha1.AgentSession
		scope     func(*sessionScope)
		err       error
		want      bool
		wait      time.Duration
	}{
		{"the workspace ready, the runner's report due", waiting, runner, nil, nil, true, 7 * time.Second},
		{"from the pod's wait", session(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending), runner, nil, nil, true, 7 * time.Second},
		{"the report is late: the wait for it is written", waiting, runner, func(s *sessionScope) { s.worktree = worktree(now.Add(-spawnQuiet)) }, nil, false, 0},
		{"Working is written", waiting, session(agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive), nil, nil, false, 0},
		{"another wait is written", waiting, session(agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodUnschedulable), nil, nil, false, 0},
		{"a first status is written", &agentsv1alpha1.AgentSession{}, runner, nil, nil, false, 0},
		{"an action follows the write", waiting, runner, func(s *sessionScope) {
			s.decision.Actions = []lifecycle.Action{{Type: lifecycle.ActionCreatePod}}
		}, nil, false, 0},
		{"an event follows the write", waiting, runner, func(s *sessionScope) { s.decision.Events = []lifecycle.Event{{Reason: "X"}} }, nil, false, 0},
		{"an error is written", waiting, runner, nil, errors.New("boom"), false, 0},
		{"the last action's error is written", waiting, runner, func(s *sessionScope) { s.actionErr = errors.New("boom") }, nil, false, 0},
		{"something else changed", waiting, func() *agentsv1alpha1.AgentSession {
			s := runner.DeepCopy()
			s.Status.PodName = "other"
			return s
		}(), nil, nil, false, 0},
		{"another condition changed", waiting, func() *agentsv1alpha1.AgentSession {
			s := runner.DeepCopy()
			s.Status.Conditions[2].Reason = "Opened"
			return s
		}(), nil, nil, false, 0},
		{"the Worktree is not Ready", waiting, runner, func(s *sessionScope) { s.worktree.Status.Phase = agentsv1alpha1.WorktreePending }, nil, false, 0},
		{"no Worktree", waiting, runner, func(s *sessionScope) { s.worktree = nil }, nil, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &sessionScope{now: now, decision: &lifecycle.Decision{}, worktree: worktree(now.Add(-3 * time.Second))}
			if c.scope != nil {
				c.scope(s)
			}
			wait, quiet := quietSpawn(c.orig, c.now, s, c.err)
			g := NewWithT(t)
			g.Expect(quiet).To(Equal(c.want))
			g.Expect(wait).To(Equal(c.wait))
		})
	}
}

// TestCacheBehind: a reconcile waits for the cache only while it still shows the very version
// the last status write replaced, and not for ever.
func TestCacheBehind(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	w := statusWrite{replaced: "41", at: now.Add(-time.Second)}
	for _, c := range []struct {
		name   string
		w      statusWrite
		cached string
		at     time.Time
		want   bool
	}{
		{"the cache shows the replaced version", w, "41", now, true},
		{"the cache shows the write", w, "42", now, false},
		{"the cache shows a later write (another writer's)", w, "57", now, false},
		{"no write recorded", statusWrite{}, "41", now, false},
		{"the cache lags past the bound: go ahead", w, "41", w.at.Add(cacheBehindBound), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(cacheBehind(c.w, c.cached, c.at)).To(Equal(c.want))
		})
	}
}

func TestRoutineEvents(t *testing.T) {
	// Every event of the lifecycle's table: routine exactly when of priority info, and then a
	// Normal event (a Warning is never left out).
	for typ, prio := range lifecycle.EventPriorities {
		e := lifecycle.Event{Type: typ, Priority: prio}
		if got, want := routineEvent(e), prio == agentsv1alpha1.PriorityInfo; got != want {
			t.Errorf("%s (%s): routine %v, want %v", typ, prio, got, want)
		}
		if routineEvent(e) && e.IsWarning() {
			t.Errorf("%s: routine and a Warning", typ)
		}
	}
	// A failed exit and a lost pod are stated with a higher priority where they are emitted.
	for _, p := range []agentsv1alpha1.Priority{agentsv1alpha1.PriorityWarning, agentsv1alpha1.PriorityAction, agentsv1alpha1.PriorityUrgent} {
		if routineEvent(lifecycle.Event{Type: agentsv1alpha1.EventSessionExited, Priority: p}) {
			t.Errorf("session.exited at %s is routine", p)
		}
	}
	for _, tc := range []struct {
		before, after agentsv1alpha1.WorktreePhase
		want          bool
	}{
		{"", agentsv1alpha1.WorktreePending, true},
		{agentsv1alpha1.WorktreePending, agentsv1alpha1.WorktreeReady, true},
		{agentsv1alpha1.WorktreeReady, agentsv1alpha1.WorktreeRemoving, true},
		{agentsv1alpha1.WorktreeRemoving, agentsv1alpha1.WorktreeRemoved, true},
		{agentsv1alpha1.WorktreePending, agentsv1alpha1.WorktreeFailed, false},
		{agentsv1alpha1.WorktreeReady, agentsv1alpha1.WorktreeMissing, false},
		{agentsv1alpha1.WorktreeMissing, agentsv1alpha1.WorktreeReady, false},
		{agentsv1alpha1.WorktreeFailed, agentsv1alpha1.WorktreePending, false},
	} {
		if got := routineWorktreePhase(tc.before, tc.after); got != tc.want {
			t.Errorf("Worktree phase %q → %s: routine %v, want %v", tc.before, tc.after, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		p    *agentsv1alpha1.Project
		want bool
	}{
		{"no Project", nil, false},
		{"no spec.events", &agentsv1alpha1.Project{}, false},
		{"Record", &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Events: &agentsv1alpha1.EventsSpec{Routine: agentsv1alpha1.RoutineEventsRecord}}}, false},
		{"unset", &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Events: &agentsv1alpha1.EventsSpec{}}}, false},
		{"Omit", &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{Events: &agentsv1alpha1.EventsSpec{Routine: agentsv1alpha1.RoutineEventsOmit}}}, true},
	} {
		if got := tc.p.OmitsRoutineEvents(); got != tc.want {
			t.Errorf("%s: omits %v, want %v", tc.name, got, tc.want)
		}
	}
}
