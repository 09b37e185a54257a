package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	. "github.com/shepherd-dev/shepherd/test/builders"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// step is one thing that happens to a session, or one thing to check about it.
type step struct {
	what string
	do   func(a *agent)
}

func expectPhase(p agentsv1alpha1.SessionPhase) step {
	return step{"the session is " + string(p), func(a *agent) { a.expect(p) }}
}

func expectStatus(what string, m OmegaMatcher) step {
	return step{what, func(a *agent) {
		GinkgoHelper()
		Eventually(sessionStatus(a.w.ns, a.name)).Should(m)
	}}
}

func agentRuns() step {
	return step{"the pod runs and the runner reports the agent active", func(a *agent) {
		a.start()
		a.report(agentsv1alpha1.ActivityActive)
	}}
}

func agentReports(state agentsv1alpha1.ActivityState, mutate ...func(*runnerapi.Report)) step {
	return step{"the runner reports " + string(state), func(a *agent) { a.report(state, mutate...) }}
}

// pullRequestWithCheck pushes, starts a check on the head, then opens the pull request, as CI
// and the runner do at the end of a turn.
func pullRequestWithCheck() step {
	return step{"the agent pushes, CI starts, the pull request opens", func(a *agent) {
		head := a.push("feature.go")
		a.check("")
		pr, err := a.runner.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: a.branch(), Base: "main", Head: head, Title: "Add the feature", Body: "Adds it"})
		Expect(err).NotTo(HaveOccurred())
		a.pr = int(pr.Number)
		a.report(agentsv1alpha1.ActivityReady)
	}}
}

func ciConcludes(conclusion string) step {
	return step{"CI concludes " + conclusion, func(a *agent) { a.check(conclusion) }}
}

func pushesFix(conclusion string) step {
	return step{"the agent pushes a fix and CI reports " + orPending(conclusion), func(a *agent) {
		a.push("fix.go")
		a.check(conclusion)
	}}
}

func orPending(s string) string {
	if s == "" {
		return "in progress"
	}
	return s
}

func requireReview() step {
	return step{"the base branch requires one approval", func(a *agent) {
		Expect(gh.SetProtection(a.w.full, fakegithub.Protection{RequiredApprovals: 1})).To(Succeed())
	}}
}

func reviews(state string) step {
	return step{"a reviewer submits " + state, func(a *agent) { a.review(state) }}
}

func humanMerges() step {
	return step{"a human merges the pull request", func(a *agent) {
		_, err := gh.Merge(a.w.full, a.pr, "squash")
		Expect(err).NotTo(HaveOccurred())
	}}
}

func setsState(s agentsv1alpha1.SessionState) step {
	return step{"the user sets the session " + string(s), func(a *agent) { a.setState(s) }}
}

func podRemoved() step {
	return step{"the agent pod is removed", func(a *agent) {
		GinkgoHelper()
		Eventually(podExists(a.w.ns, a.podName())).Should(BeFalse())
	}}
}

func podCreated() step {
	return step{"the agent pod is created", func(a *agent) { a.pod() }}
}

func imageCannotBePulled() step {
	return step{"the kubelet cannot pull the agent image", func(a *agent) {
		setPodStatus(a.pod(), agentWaiting("ErrImagePull", "pull access denied for no-such-image"))
	}}
}

// unschedulable leaves the agent pod pending with the scheduler's verdict, as kube-scheduler
// writes it.
func unschedulable(msg string) step {
	return step{"the scheduler cannot place the agent pod", func(a *agent) {
		setPodStatus(a.pod(), func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}}
		})
	}}
}

// spawnDeadline10s is the shortest spawn deadline the CRD accepts.
func spawnDeadline10s(b *ProjectBuilder) *ProjectBuilder {
	return b.With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Activity = &agentsv1alpha1.ActivitySpec{SpawnDeadline: &metav1.Duration{Duration: 10 * time.Second}}
	})
}

func worktreeStaysReady() step {
	return step{"the session's Worktree is kept, Ready", func(a *agent) {
		GinkgoHelper()
		Eventually(worktreeStatus(a.w.ns, a.name)).Should(HaveField("Phase", agentsv1alpha1.WorktreeReady))
		Expect(podExists(a.w.ns, a.name+"-worktree")()).To(BeFalse(), "no prepare pod of its own for a session's Worktree")
	}}
}

// shortActivity makes Stuck reachable quickly: the shortest thresholds the CRD accepts.
func shortActivity(b *ProjectBuilder) *ProjectBuilder {
	return b.With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Activity = &agentsv1alpha1.ActivitySpec{
			IdleAfter: &metav1.Duration{Duration: 30 * time.Second}, StuckAfter: &metav1.Duration{Duration: time.Minute},
			GracePeriod: &metav1.Duration{Duration: 10 * time.Second}, GraceObservations: ptrTo(int32(1)),
		}
	})
}

func defaults(b *ProjectBuilder) *ProjectBuilder { return b }

func removeAfterMerge(b *ProjectBuilder) *ProjectBuilder {
	return b.With(func(s *agentsv1alpha1.ProjectSpec) {
		s.Cleanup = &agentsv1alpha1.CleanupSpec{WorktreeAfterMerge: agentsv1alpha1.WorktreeRemove}
	})
}

var _ = Describe("The session state machine", func() {
	DescribeTable("drives a session through its phases",
		func(projectOpts func(*ProjectBuilder) *ProjectBuilder, steps ...step) {
			w := newWorld()
			create(projectOpts(w.project()).Obj())
			a := w.agent("walk")
			create(MakeSession(a.name, w.ns, "widgets").Prompt("Add the feature").Obj())
			for _, s := range steps {
				By(s.what)
				s.do(a)
			}
		},
		Entry("from spawn to merge through every pull request phase", defaults,
			podCreated(),
			expectPhase(agentsv1alpha1.PhaseSpawning),
			agentRuns(),
			expectPhase(agentsv1alpha1.PhaseWorking),
			pullRequestWithCheck(),
			expectPhase(agentsv1alpha1.PhasePROpen),
			expectStatus("the pull request is recorded", HaveField("PullRequest", And(
				Not(BeNil()), HaveField("State", agentsv1alpha1.PullRequestOpen), HaveField("Checks", agentsv1alpha1.ChecksPending)))),
			ciConcludes("failure"),
			expectPhase(agentsv1alpha1.PhaseCIFailed),
			requireReview(),
			pushesFix("success"),
			expectPhase(agentsv1alpha1.PhaseReviewPending),
			reviews("CHANGES_REQUESTED"),
			expectPhase(agentsv1alpha1.PhaseChangesRequested),
			pushesFix(""),
			reviews("APPROVED"),
			expectPhase(agentsv1alpha1.PhaseApproved),
			ciConcludes("success"),
			expectPhase(agentsv1alpha1.PhaseMergeable),
			expectStatus("Mergeable asks a human to merge", HaveField("Conditions", And(
				HaveCondition(agentsv1alpha1.ConditionMergeable, metav1.ConditionTrue),
				HaveCondition(agentsv1alpha1.ConditionNeedsAttention, metav1.ConditionTrue)))),
			humanMerges(),
			expectPhase(agentsv1alpha1.PhaseMerged),
			expectStatus("Merged is Ready", HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonPullRequestMerged))),
			podRemoved(),
			worktreeStaysReady(),
		),
		Entry("merged with the Remove cleanup policy: the pod goes, then the checkout", removeAfterMerge,
			agentRuns(),
			pullRequestWithCheck(),
			expectPhase(agentsv1alpha1.PhasePROpen),
			humanMerges(),
			expectPhase(agentsv1alpha1.PhaseMerged),
			podRemoved(),
			step{"the session's Worktree is set Absent and its checkout removed", func(a *agent) {
				GinkgoHelper()
				Eventually(func() agentsv1alpha1.WorktreeState { return fresh(worktree(a.w.ns, a.name)).Spec.State }).
					Should(Equal(agentsv1alpha1.WorktreeAbsent))
				Eventually(worktreeStatus(a.w.ns, a.name)).Should(HaveField("Phase", agentsv1alpha1.WorktreeRemoving))
				finishPod(waitPod(a.w.ns, a.name+"-worktree"), 0, "")
				Eventually(worktreeStatus(a.w.ns, a.name)).Should(HaveField("Phase", agentsv1alpha1.WorktreeRemoved))
			}},
		),
		Entry("a question, silence, a stop", shortActivity,
			agentRuns(),
			expectPhase(agentsv1alpha1.PhaseWorking),
			agentReports(agentsv1alpha1.ActivityWaitingForInput, question("Postgres or SQLite?")),
			expectPhase(agentsv1alpha1.PhaseNeedsInput),
			expectStatus("the question is in status, and a human is needed", And(
				HaveField("Activity.Question", "Postgres or SQLite?"),
				HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonWaitingForInput)))),
			agentReports(agentsv1alpha1.ActivityActive),
			expectPhase(agentsv1alpha1.PhaseWorking),
			agentReports(agentsv1alpha1.ActivityActive, silentFor(2*time.Minute)),
			expectPhase(agentsv1alpha1.PhaseStuck),
			expectStatus("Stuck says why", HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonAgentStuck))),
			agentReports(agentsv1alpha1.ActivityActive),
			expectPhase(agentsv1alpha1.PhaseWorking),
			setsState(agentsv1alpha1.SessionStopped),
			expectPhase(agentsv1alpha1.PhaseStopped),
			podRemoved(),
			worktreeStaysReady(),
		),
		Entry("a clean exit without a pull request is Done", defaults,
			agentRuns(),
			expectPhase(agentsv1alpha1.PhaseWorking),
			agentReports(agentsv1alpha1.ActivityExited, exitCode(0)),
			expectPhase(agentsv1alpha1.PhaseDone),
			expectStatus("Done is Ready", HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue))),
			podRemoved(),
		),
		Entry("a failed exit without a pull request is Errored", defaults,
			agentRuns(),
			agentReports(agentsv1alpha1.ActivityExited, exitCode(2), func(r *runnerapi.Report) { r.Activity.Message = "panic: boom" }),
			expectPhase(agentsv1alpha1.PhaseErrored),
			expectStatus("Errored is Stalled with the exit", And(
				HaveField("Activity.ExitCode", HaveValue(Equal(int32(2)))),
				HaveField("Conditions", HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonAgentExited)))),
			podRemoved(),
		),
		Entry("an unschedulable pod says why, then is Stalled at the spawn deadline with the scheduler's message", spawnDeadline10s,
			unschedulable("0/3 nodes are available: 3 Insufficient memory."),
			expectStatus("the scheduler's words, before the deadline", HaveField("Conditions",
				HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonPodUnschedulable))),
			expectStatus("Stalled at the deadline, with the message", And(HaveField("Phase", agentsv1alpha1.PhaseSpawning),
				HaveField("Conditions", ContainElement(And(HaveField("Type", agentsv1alpha1.ConditionStalled), HaveField("Status", metav1.ConditionTrue),
					HaveField("Reason", agentsv1alpha1.ReasonSpawnDeadlineExceeded), HaveField("Message", ContainSubstring("3 Insufficient memory"))))))),
			agentRuns(),
			expectPhase(agentsv1alpha1.PhaseWorking),
			expectStatus("once the pod starts, nothing is stalled", HaveField("Conditions", Not(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue)))),
		),
		Entry("an image that cannot be pulled is Errored after the grace", shortActivity,
			imageCannotBePulled(),
			expectPhase(agentsv1alpha1.PhaseErrored),
			expectStatus("the reason says so", HaveField("Conditions", And(
				HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonImagePullFailed),
				HaveCondition(agentsv1alpha1.ConditionAgentRunning, metav1.ConditionFalse)))),
			podRemoved(),
		),
	)
})

func ptrTo[T any](v T) *T { return &v }
