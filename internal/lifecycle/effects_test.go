package lifecycle

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestPodAndWorktreeActions(t *testing.T) {
	noPod := func(in *Input) { in.Pod = PodEvidence{}; in.Runner = RunnerEvidence{} }
	finished := func(phase PodPhase) func(*Input) {
		return func(in *Input) { in.Pod.Phase, in.Pod.ContainerRunning = phase, false }
	}
	merged := func(in *Input) {
		in.PullRequest = PullRequestEvidence{Observed: true, Exists: true, Number: 12, State: agentsv1alpha1.PullRequestMerged, HeadSHA: shaA}
		in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
		in.Workspace.RemoveAfterMerge = true
	}
	for _, tc := range []struct {
		name  string
		from  agentsv1alpha1.SessionPhase
		setup func(*Input)
		want  []ActionType
	}{
		{"a new admitted session gets its pod", "", func(in *Input) { noPod(in) }, []ActionType{ActionCreatePod}},
		{"a new session whose branch already has a pull request gets its pod", "", func(in *Input) {
			noPod(in)
			in.PullRequest = openPR()
		}, []ActionType{ActionCreatePod}},
		{"not admitted: no pod", "", func(in *Input) { noPod(in); in.Spec.Admitted = false }, nil},
		{"no Worktree yet: it is created, and the pod with it (one status write for both)", "", func(in *Input) { noPod(in); in.Workspace = WorkspaceEvidence{Own: true} },
			[]ActionType{ActionCreateWorktree, ActionCreatePod}},
		{"the own Worktree vanished under a pod: the pod goes, the Worktree is made again", "", func(in *Input) { in.Workspace = WorkspaceEvidence{Own: true} },
			[]ActionType{ActionDeletePod, ActionCreateWorktree}},
		{"not admitted: no Worktree", "", func(in *Input) { noPod(in); in.Workspace = WorkspaceEvidence{Own: true}; in.Spec.Admitted = false }, nil},
		{"stopped: no Worktree", "", func(in *Input) {
			noPod(in)
			in.Workspace = WorkspaceEvidence{Own: true}
			in.Spec.State = agentsv1alpha1.SessionStopped
		}, nil},
		{"a worktreeRef that does not exist is not created", "", func(in *Input) { noPod(in); in.Workspace = WorkspaceEvidence{NotFound: true} }, nil},
		{"merged, the Worktree gone: not created again", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			merged(in)
			noPod(in)
			in.Workspace = WorkspaceEvidence{Own: true, RemoveAfterMerge: true}
		}, nil},
		{"a failed Worktree: no pod", "", func(in *Input) { noPod(in); in.Workspace.Phase = agentsv1alpha1.WorktreeFailed }, nil},
		{"a running session keeps its pod", agentsv1alpha1.PhaseWorking, nil, nil},
		{"a stop deletes the pod", agentsv1alpha1.PhaseWorking, func(in *Input) { in.Spec.State = agentsv1alpha1.SessionStopped }, []ActionType{ActionDeletePod}},
		{"a pod already going is not deleted again", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Spec.State, in.Pod.Deleting = agentsv1alpha1.SessionStopped, true
		}, nil},
		{"a message for an agent that exited replaces its finished pod", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			finished(PodSucceeded)(in)
			in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
			in.PullRequest = openPR()
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
			in.Previous.Messages.Pending = []agentsv1alpha1.OutboxMessage{{ID: "m1", Source: agentsv1alpha1.MessageFromUser, Text: "Also fix the docs"}}
		}, []ActionType{ActionDeletePod}},
		{"an Errored session keeps its finished pod for kubectl logs", agentsv1alpha1.PhaseErrored, func(in *Input) {
			finished(PodFailed)(in)
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(1))
		}, nil},
		{"merged: the pod goes; the Worktree waits for it", agentsv1alpha1.PhaseReviewPending, merged, []ActionType{ActionDeletePod}},
		{"merged, the pod gone: the Worktree is released", agentsv1alpha1.PhaseReviewPending, func(in *Input) { merged(in); noPod(in) },
			[]ActionType{ActionReleaseWorktree}},
		{"merged, a Worktree named by worktreeRef stays", agentsv1alpha1.PhaseReviewPending, func(in *Input) { merged(in); noPod(in); in.Workspace.Own = false }, nil},
		{"merged, the policy keeps the Worktree", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			merged(in)
			noPod(in)
			in.Workspace.RemoveAfterMerge = false
		}, nil},
		{"merged, already released", agentsv1alpha1.PhaseReviewPending, func(in *Input) { merged(in); noPod(in); in.Workspace.Absent = true }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(tc.from)
			if tc.setup != nil {
				tc.setup(&in)
			}
			in.Generation = in.Previous.ObservedGeneration + 1
			d := Decide(in)
			g.Expect(levelActions(d)).To(Equal(tc.want), "phase %s (%s: %s)", d.Phase, d.Reason, d.Message)
			undoes := slices.ContainsFunc(tc.want, func(t ActionType) bool { return t != ActionCreatePod && t != ActionCreateWorktree })
			if undoes {
				g.Expect(d.ObservedGeneration).To(Equal(in.Previous.ObservedGeneration), "not observed while what it undoes is still there")
			} else {
				// Nothing to undo, or creations by fixed names right after the write: observed.
				g.Expect(d.ObservedGeneration).To(Equal(in.Generation))
			}
			for _, a := range d.Actions {
				if a.Type == ActionDeletePod {
					g.Expect(a.PodUID).To(Equal(in.Pod.UID), "the delete names the pod it judged")
				}
			}
		})
	}
}

func TestMessagesWaiting(t *testing.T) {
	g := NewWithT(t)
	waiting := func(m agentsv1alpha1.MessagesStatus, outbox []agentsv1alpha1.OutboxMessage) bool {
		return (&eval{prev: &agentsv1alpha1.AgentSessionStatus{Messages: m}, outbox: outbox}).messagesWaiting()
	}
	g.Expect(waiting(agentsv1alpha1.MessagesStatus{}, nil)).To(BeFalse())
	g.Expect(waiting(agentsv1alpha1.MessagesStatus{}, []agentsv1alpha1.OutboxMessage{{ID: "a"}})).To(BeTrue())
	g.Expect(waiting(agentsv1alpha1.MessagesStatus{Pending: []agentsv1alpha1.OutboxMessage{{ID: "a"}}}, nil)).To(BeTrue())
	g.Expect(waiting(agentsv1alpha1.MessagesStatus{Pending: []agentsv1alpha1.OutboxMessage{{ID: "a"}}, Delivered: []string{"a"}}, nil)).To(BeFalse())
}

func TestOpenPullRequestAction(t *testing.T) {
	opened := func(d Decision) []Action {
		var out []Action
		for _, a := range d.Actions {
			if a.Type == ActionOpenPullRequest {
				out = append(out, a)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		from  agentsv1alpha1.SessionPhase
		setup func(*Input)
		want  []string
	}{
		{"a working agent's request is run", agentsv1alpha1.PhaseWorking, func(in *Input) { in.Runner.PullRequestAsk = "7" }, []string{"pr.open.7"}},
		{"an update while the pull request is open", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
			in.PullRequest = openPR()
			in.Runner.PullRequestAsk = "8"
		}, []string{"pr.open.8"}},
		{"no request, no action", agentsv1alpha1.PhaseWorking, nil, nil},
		{"a stopped session opens nothing", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.PullRequestAsk = "7"
			in.Spec.State = agentsv1alpha1.SessionStopped
		}, nil},
		{"a merged session opens nothing", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			in.PullRequest = PullRequestEvidence{Observed: true, Exists: true, Number: 12, State: agentsv1alpha1.PullRequestMerged, HeadSHA: shaA}
			in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
			in.Runner.PullRequestAsk = "7"
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(tc.from)
			if tc.setup != nil {
				tc.setup(&in)
			}
			d := Decide(in)
			var ids []string
			for _, a := range opened(d) {
				ids = append(ids, a.ID)
			}
			g.Expect(ids).To(Equal(tc.want), "phase %s (%s: %s)", d.Phase, d.Reason, d.Message)
		})
	}
}
