package lifecycle

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

type phaseCase struct {
	name   string
	from   agentsv1alpha1.SessionPhase
	setup  func(in *Input)
	want   agentsv1alpha1.SessionPhase
	reason string
}

// Evidence that drives a running session to a phase, applied on top of from(p).
func toWorking(in *Input) {}

func noPod(in *Input) { in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{} }

func exitWith(code int32) func(in *Input) {
	return func(in *Input) { in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(code) }
}

func toNeedsInput(in *Input) {
	in.Runner.State = agentsv1alpha1.ActivityWaitingForInput
	in.Runner.Question = "Should the login page keep the old URL?"
}

// toStuck: the agent silent past stuckAfter, and its pull request (if any) recorded as it is,
// unchanged for as long: no progress at all.
func toStuck(in *Input) {
	in.Runner.LastActivityTime = in.Now.Add(-11 * time.Minute)
	steady(in, in.Now.Add(-11*time.Minute))
}

func toRespawn(in *Input) {
	in.Pod = PodEvidence{}
	in.Previous.Grace = graceFull(signalPod, in.Now)
	in.Previous.PullRequest = nil
}

func toPR(p agentsv1alpha1.SessionPhase) func(in *Input) {
	return func(in *Input) { in.PullRequest = prFor(p) }
}

func toMerged(in *Input) {
	in.PullRequest = approvedGreen(shaA)
	in.PullRequest.State = agentsv1alpha1.PullRequestMerged
}

func toClosed(in *Input) {
	in.PullRequest = openPR()
	in.PullRequest.State = agentsv1alpha1.PullRequestClosed
}

func toStopped(in *Input) { in.Spec.State = agentsv1alpha1.SessionStopped }

func toWorkspaceGone(in *Input) {
	in.Workspace = WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeMissing, Message: "the volume was deleted"}
	in.Previous.Grace = graceFull(signalWorkspace, in.Now)
}

func phaseCases() []phaseCase {
	cases := []phaseCase{
		{"a new session that is not admitted is Queued", Start, func(in *Input) { in.Spec.Admitted = false }, agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonQueued},
		{"a new admitted session is Spawning until its pod exists", Start, noPod, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"a new session whose adopted PR already merged is Merged", Start, toMerged, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"a new session created Stopped is Stopped", Start, toStopped, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
		{"a queued session stays Queued until admitted", agentsv1alpha1.PhaseQueued, func(in *Input) { in.Spec.Admitted = false }, agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonQueued},
		{"an admitted queued session spawns", agentsv1alpha1.PhaseQueued, noPod, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"an admitted queued session whose agent already reports is Working (decisions are fixed points)", agentsv1alpha1.PhaseQueued, toWorking, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive},
		{"spawning waits for the workspace", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Workspace = WorkspaceEvidence{Phase: agentsv1alpha1.WorktreePending}
			in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{}
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorkspacePending},
		{"spawning with a missing worktreeRef says so", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Workspace = WorkspaceEvidence{NotFound: true}
			in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{}
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonWorktreeNotFound},
		{"spawning waits for the pod", agentsv1alpha1.PhaseSpawning, func(in *Input) { in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{} }, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"spawning waits for the runner's first report within the grace", agentsv1alpha1.PhaseSpawning, func(in *Input) { in.Runner = RunnerEvidence{} }, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSignalGrace},
		{"spawning ignores a report from another pod", agentsv1alpha1.PhaseSpawning, func(in *Input) { in.Runner.PodUID = "old-pod" }, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSignalGrace},
		{"spawning to Working when the runner reports", agentsv1alpha1.PhaseSpawning, toWorking, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive},
		{"spawning to NeedsInput", agentsv1alpha1.PhaseSpawning, toNeedsInput, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput},
		{"spawning to Stuck when the runner stays silent past the grace", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Runner = RunnerEvidence{}
			in.Previous.Grace = graceFull(signalRunner, in.Now)
		}, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonRunnerSilent},
		{"spawning to Errored when the image cannot be pulled past the grace", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodPending, WaitingReason: "ImagePullBackOff", WaitingMessage: "pull access denied"}
			in.Runner = RunnerEvidence{}
			in.Previous.Grace = graceFull(signalContainer, in.Now)
		}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonImagePullFailed},
		{"spawning keeps waiting on an image pull error within the grace", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodPending, WaitingReason: "ErrImagePull"}
			in.Runner = RunnerEvidence{}
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonSignalGrace},
		{"spawning to Done when the agent exits cleanly at once", agentsv1alpha1.PhaseSpawning, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
		}, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonAgentExited},

		{"Working stays Working while active", agentsv1alpha1.PhaseWorking, toWorking, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive},
		{"Working shows an idle agent before stuckAfter", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.LastActivityTime = in.Now.Add(-6 * time.Minute)
		}, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentIdle},
		{"Working to NeedsInput", agentsv1alpha1.PhaseWorking, toNeedsInput, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput},
		{"Working to Stuck past stuckAfter", agentsv1alpha1.PhaseWorking, toStuck, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck},
		{"Working to Stuck when blocked past stuckAfter", agentsv1alpha1.PhaseWorking, func(in *Input) {
			toStuck(in)
			in.Runner.State = agentsv1alpha1.ActivityBlocked
		}, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentBlocked},
		{"Working to Stuck when the runner of a replaced pod stays silent past the grace", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.PodUID = "old-pod"
			in.Previous.Grace = graceFull(signalRunner, in.Now)
		}, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonRunnerSilent},
		{"Working holds while the pod is missing within the grace", agentsv1alpha1.PhaseWorking, func(in *Input) { in.Pod = PodEvidence{} }, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonSignalGrace},
		{"Working to Spawning when the pod is lost past the grace", agentsv1alpha1.PhaseWorking, toRespawn, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"Working to Spawning when the pod was evicted past the grace", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodFailed, Reason: "Evicted", Terminated: &ContainerExit{ExitCode: 137}}
			in.Previous.Grace = graceFull(signalPod, in.Now)
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"Working to Done on a clean exit without a PR", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
		}, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonAgentExited},
		{"Working to Errored on a failed exit without a PR", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(1))
		}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonAgentExited},
		{"Working to Errored when the container was OOM-killed without a PR", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodFailed, Terminated: &ContainerExit{ExitCode: 137, Reason: "OOMKilled"}}
		}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonAgentExited},
		{"Working to Errored when the workspace is gone past the grace", agentsv1alpha1.PhaseWorking, toWorkspaceGone, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonCheckoutMissing},
		{"Working holds when the runner reports a PR the forge does not show yet", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode, in.Runner.PullRequestNumber = agentsv1alpha1.ActivityExited, ptr(int32(0)), 12
		}, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonSignalGrace},
		{"Working to Done when the forge still shows no PR past the grace", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode, in.Runner.PullRequestNumber = agentsv1alpha1.ActivityExited, ptr(int32(0)), 12
			in.Previous.Grace = graceFull(signalPullRequest, in.Now)
		}, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonAgentExited},

		{"NeedsInput to Working once answered", agentsv1alpha1.PhaseNeedsInput, toWorking, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive},
		{"NeedsInput to Stuck", agentsv1alpha1.PhaseNeedsInput, toStuck, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck},
		{"NeedsInput holds while the pod is missing within the grace", agentsv1alpha1.PhaseNeedsInput, func(in *Input) {
			toNeedsInput(in)
			in.Pod = PodEvidence{}
		}, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput},
		{"NeedsInput to Spawning when the pod is lost past the grace", agentsv1alpha1.PhaseNeedsInput, func(in *Input) {
			toNeedsInput(in)
			toRespawn(in)
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"Stuck to Working when activity resumes", agentsv1alpha1.PhaseStuck, toWorking, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive},
		{"Stuck to NeedsInput", agentsv1alpha1.PhaseStuck, toNeedsInput, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput},
		{"Stuck to Spawning when the pod is lost past the grace", agentsv1alpha1.PhaseStuck, toRespawn, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"an idle agent with an open PR is not stuck", agentsv1alpha1.PhaseStuck, func(in *Input) {
			in.Runner.State = agentsv1alpha1.ActivityReady
			in.Runner.LastActivityTime = in.Now.Add(-3 * time.Hour)
			in.PullRequest = prFor(agentsv1alpha1.PhaseReviewPending)
		}, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.ReasonReviewRequired},
		{"an idle agent without a PR is stuck", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.Runner.State = agentsv1alpha1.ActivityReady
			in.Runner.LastActivityTime = in.Now.Add(-11 * time.Minute)
		}, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck},

		{"waiting for input beats a failing PR", agentsv1alpha1.PhaseCIFailed, func(in *Input) {
			toNeedsInput(in)
			in.PullRequest = prFor(agentsv1alpha1.PhaseCIFailed)
		}, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.ReasonWaitingForInput},
		{"a mid-turn agent silent past stuckAfter beats the PR", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			in.PullRequest = prFor(agentsv1alpha1.PhaseReviewPending)
			toStuck(in)
		}, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck},
		{"a PR phase keeps the PR's truth while the pod is lost", agentsv1alpha1.PhaseApproved, func(in *Input) {
			in.PullRequest = prFor(agentsv1alpha1.PhaseApproved)
			in.Pod = PodEvidence{}
			in.Previous.Grace = graceFull(signalPod, in.Now)
		}, agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved},
		{"a PR phase keeps the PR's truth after a clean exit", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
			in.PullRequest = prFor(agentsv1alpha1.PhaseReviewPending)
		}, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.ReasonReviewRequired},
		{"a PR phase goes Errored when the workspace is gone past the grace", agentsv1alpha1.PhaseCIFailed, func(in *Input) {
			in.PullRequest = prFor(agentsv1alpha1.PhaseCIFailed)
			toWorkspaceGone(in)
		}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonCheckoutMissing},
		{"a draft PR is PROpen", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.PullRequest = passing(openPR(), shaA)
			in.PullRequest.Draft, in.PullRequest.ReviewDecision = true, agentsv1alpha1.ReviewNone
		}, agentsv1alpha1.PhasePROpen, agentsv1alpha1.ReasonPullRequestDraft},
		{"an approved draft is Approved, never Mergeable", agentsv1alpha1.PhaseWorking, func(in *Input) {
			in.PullRequest = approvedGreen(shaA)
			in.PullRequest.Draft = true
		}, agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved},
		{"approved but behind a base that must be up to date is Approved", agentsv1alpha1.PhaseMergeable, func(in *Input) {
			in.PullRequest = approvedGreen(shaA)
			in.PullRequest.MergeState = agentsv1alpha1.MergeStateBehind
		}, agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved},
		{"approved with conflicts is Approved", agentsv1alpha1.PhaseMergeable, func(in *Input) {
			in.PullRequest = approvedGreen(shaA)
			in.PullRequest.MergeState = agentsv1alpha1.MergeStateDirty
		}, agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved},
		{"no review required, no checks and clean is Mergeable", agentsv1alpha1.PhasePROpen, func(in *Input) {
			in.PullRequest = openPR()
			in.PullRequest.ReviewDecision = agentsv1alpha1.ReviewNone
			in.PullRequest.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksNone}
		}, agentsv1alpha1.PhaseMergeable, agentsv1alpha1.ReasonMergeable},
		{"CI failure beats changes requested", agentsv1alpha1.PhaseChangesRequested, func(in *Input) {
			in.PullRequest = failing(prFor(agentsv1alpha1.PhaseChangesRequested), shaA)
		}, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.ReasonChecksFailed},
		{"an unread forge keeps the last known PR phase", agentsv1alpha1.PhaseApproved, func(in *Input) {
			in.PullRequest = PullRequestEvidence{}
			in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA,
				Checks: agentsv1alpha1.ChecksPassing, ReviewDecision: agentsv1alpha1.ReviewApproved, MergeState: agentsv1alpha1.MergeStateBlocked}
		}, agentsv1alpha1.PhaseApproved, agentsv1alpha1.ReasonApproved},
		{"a known PR missing from the forge's answer is not forgotten", agentsv1alpha1.PhaseReviewPending, func(in *Input) {
			in.PullRequest = PullRequestEvidence{Observed: true}
			in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA,
				Checks: agentsv1alpha1.ChecksPending, ReviewDecision: agentsv1alpha1.ReviewRequired}
		}, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.ReasonReviewRequired},

		{"merged beats waiting for input", agentsv1alpha1.PhaseNeedsInput, func(in *Input) {
			toNeedsInput(in)
			toMerged(in)
		}, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"closed without merge is Done", agentsv1alpha1.PhaseReviewPending, toClosed, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonPullRequestClosed},
		{"Stopped while Stopped is asked", agentsv1alpha1.PhaseStopped, toStopped, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
		{"a Stopped session whose PR closes stays Stopped", agentsv1alpha1.PhaseStopped, func(in *Input) {
			toStopped(in)
			toClosed(in)
		}, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
		{"restore of a Stopped session spawns", agentsv1alpha1.PhaseStopped, noPod, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"restore ignores the last report of the pod that was stopped", agentsv1alpha1.PhaseStopped, func(in *Input) {
			in.Pod = PodEvidence{}
			in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
		}, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.ReasonPodPending},
		{"restore without a slot queues", agentsv1alpha1.PhaseStopped, func(in *Input) { in.Spec.Admitted = false }, agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonQueued},
		{"restore after the PR was closed is Done", agentsv1alpha1.PhaseStopped, toClosed, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonPullRequestClosed},
		{"a Stopped session whose PR merged is Merged", agentsv1alpha1.PhaseStopped, func(in *Input) {
			toStopped(in)
			toMerged(in)
		}, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"Done stays Done with a live agent", agentsv1alpha1.PhaseDone, toNeedsInput, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonSessionDone},
		{"Done stays Done when the PR reopens", agentsv1alpha1.PhaseDone, toPR(agentsv1alpha1.PhaseMergeable), agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonSessionDone},
		{"Done to Merged when its PR merges", agentsv1alpha1.PhaseDone, toMerged, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"Done to Stopped", agentsv1alpha1.PhaseDone, toStopped, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
		{"Errored stays Errored with a healthy agent", agentsv1alpha1.PhaseErrored, toWorking, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonSessionErrored},
		{"Errored to Merged when its PR merges", agentsv1alpha1.PhaseErrored, toMerged, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"Errored to Stopped, to be retried", agentsv1alpha1.PhaseErrored, toStopped, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
		{"Merged stays Merged when Stopped is asked", agentsv1alpha1.PhaseMerged, toStopped, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
		{"Merged stays Merged when the PR looks open again", agentsv1alpha1.PhaseMerged, toPR(agentsv1alpha1.PhaseCIFailed), agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
	}

	// A session that is new, leaves the queue or is restored is judged as if it were Spawning.
	entering := map[agentsv1alpha1.SessionPhase]func(in *Input){
		agentsv1alpha1.PhaseSpawning:   noPod,
		agentsv1alpha1.PhaseWorking:    toWorking,
		agentsv1alpha1.PhaseNeedsInput: toNeedsInput,
		agentsv1alpha1.PhaseStuck:      toStuck,
		agentsv1alpha1.PhaseDone:       exitWith(0),
		agentsv1alpha1.PhaseErrored:    exitWith(1),
	}
	for _, p := range Groups["PullRequest"] {
		entering[p] = toPR(p)
	}
	for _, f := range []agentsv1alpha1.SessionPhase{Start, agentsv1alpha1.PhaseQueued, agentsv1alpha1.PhaseStopped} {
		for _, to := range slices.Sorted(maps.Keys(entering)) {
			cases = append(cases, phaseCase{fmt.Sprintf("%q entering to %s as from Spawning", f, to), f, entering[to], to, ""})
		}
	}

	// Every PR phase to every other: the pull request's truth moves freely among them.
	pr := Groups["PullRequest"]
	for _, f := range pr {
		for _, t := range pr {
			if f != t {
				cases = append(cases, phaseCase{fmt.Sprintf("%s to %s as the PR changes", f, t), f, toPR(t), t, ""})
			}
		}
	}
	// Everything that runs reaches the PR phases, NeedsInput and Stuck.
	for _, f := range []agentsv1alpha1.SessionPhase{agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck} {
		for _, t := range pr {
			cases = append(cases, phaseCase{fmt.Sprintf("%s to %s when the PR is open", f, t), f, toPR(t), t, ""})
		}
	}
	for _, f := range pr {
		cases = append(cases,
			phaseCase{fmt.Sprintf("%s to NeedsInput", f), f, func(in *Input) { toNeedsInput(in); in.PullRequest = prFor(f) }, agentsv1alpha1.PhaseNeedsInput, ""},
			phaseCase{fmt.Sprintf("%s to Stuck", f), f, func(in *Input) { in.PullRequest = prFor(f); toStuck(in) }, agentsv1alpha1.PhaseStuck, ""},
			phaseCase{fmt.Sprintf("%s to Errored when the container cannot start past the grace", f), f, func(in *Input) {
				in.PullRequest = prFor(f)
				in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodRunning, WaitingReason: "CrashLoopBackOff", Restarts: 6}
				in.Previous.Grace = graceFull(signalContainer, in.Now)
			}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonPodFailed},
		)
	}
	// Every live phase can be stopped, merged or closed.
	for _, f := range Groups["Live"] {
		cases = append(cases,
			phaseCase{fmt.Sprintf("%s to Stopped", f), f, toStopped, agentsv1alpha1.PhaseStopped, agentsv1alpha1.ReasonSessionStopped},
			phaseCase{fmt.Sprintf("%s to Merged", f), f, toMerged, agentsv1alpha1.PhaseMerged, agentsv1alpha1.ReasonPullRequestMerged},
			phaseCase{fmt.Sprintf("%s to Done when the PR is closed", f), f, toClosed, agentsv1alpha1.PhaseDone, agentsv1alpha1.ReasonPullRequestClosed},
		)
	}
	for _, f := range Groups["Started"] {
		cases = append(cases, phaseCase{fmt.Sprintf("%s to Queued when the budget is spent, between turns", f), f, func(in *Input) {
			in.Spec.Budget = BudgetEvidence{Exhausted: "the daily budget of $5 is spent: $5.2", FinishTurn: true, ResetTime: in.Now.Add(time.Hour)}
			if in.Runner.State == agentsv1alpha1.ActivityActive {
				in.Runner.State = agentsv1alpha1.ActivityReady
			}
		}, agentsv1alpha1.PhaseQueued, agentsv1alpha1.ReasonBudgetExhausted})
		cases = append(cases, phaseCase{fmt.Sprintf("%s to Errored when the workspace fails past the grace", f), f, func(in *Input) {
			in.Workspace = WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeFailed, Message: "base ref not found"}
			in.Previous.Grace = graceFull(signalWorkspace, in.Now)
		}, agentsv1alpha1.PhaseErrored, agentsv1alpha1.ReasonCheckoutFailed})
	}
	return cases
}

func TestPhaseTransitions(t *testing.T) {
	covered := map[Transition]bool{}
	for _, tc := range phaseCases() {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(tc.from)
			tc.setup(&in)
			d := Decide(in)
			g.Expect(d.Phase).To(Equal(tc.want), "reason %s: %s", d.Reason, d.Message)
			if tc.reason != "" {
				g.Expect(d.Reason).To(Equal(tc.reason), d.Message)
			}
			g.Expect(Allowed(tc.from, d.Phase)).To(BeTrue(), "%q -> %q is not in the transition table", tc.from, d.Phase)
		})
		if tc.from != tc.want {
			covered[Transition{tc.from, tc.want}] = true
		}
	}
	t.Run("every transition in the table is exercised", func(t *testing.T) {
		g := NewWithT(t)
		var missing []Transition
		for _, tr := range Transitions() {
			if !covered[tr] {
				missing = append(missing, tr)
			}
		}
		g.Expect(missing).To(BeEmpty())
	})
}
