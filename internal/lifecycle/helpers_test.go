package lifecycle

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// t0 is the test clock's "now" unless a test moves it.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	shaA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	shaB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	shaC = "cccccccccccccccccccccccccccccccccccccccc"
	shaD = "dddddddddddddddddddddddddddddddddddddddd"
)

func mt(t time.Time) *metav1.Time { return ptr(metav1.NewTime(t)) }

// running is a session whose agent works: admitted, workspace ready, pod running, the runner
// active 30s ago, the forge read and no pull request.
func running() Input {
	return Input{
		Now:        t0,
		Generation: 3,
		Spec:       SpecEvidence{State: agentsv1alpha1.SessionRunning, Admitted: true},
		Workspace:  WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeReady, Exists: true, Own: true},
		Pod:        PodEvidence{Exists: true, UID: "pod-1", Phase: PodRunning, ContainerRunning: true},
		Runner: RunnerEvidence{
			Reported: true, PodUID: "pod-1", ReportTime: t0, State: agentsv1alpha1.ActivityActive,
			LastActivityTime: t0.Add(-30 * time.Second), AgentSessionID: "conv-1",
		},
		PullRequest: PullRequestEvidence{Observed: true},
		Previous: agentsv1alpha1.AgentSessionStatus{
			Phase:               agentsv1alpha1.PhaseWorking,
			PhaseTransitionTime: mt(t0.Add(-time.Hour)),
			AdmittedTime:        mt(t0.Add(-2 * time.Hour)),
			StartTime:           mt(t0.Add(-2 * time.Hour)),
		},
	}
}

// from returns running() with the previous phase set.
// steady records the pull request the evidence shows as the previous status, last changed at
// t: nothing about it has changed since.
func steady(in *Input, t time.Time) {
	if d := Decide(*in); d.PullRequest != nil {
		pr := d.PullRequest.DeepCopy()
		pr.LastChangeTime = &metav1.Time{Time: t}
		in.Previous.PullRequest = pr
	}
}

func from(p agentsv1alpha1.SessionPhase) Input {
	in := running()
	in.Previous.Phase = p
	if p == "" {
		in.Previous = agentsv1alpha1.AgentSessionStatus{}
	}
	if isPRPhase(p) {
		in.Previous.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 12, State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA}
	}
	return in
}

// openPR is pull request #12, open at shaA, checks pending, review required, mergeable state
// clean.
func openPR() PullRequestEvidence {
	return PullRequestEvidence{
		Observed: true, Exists: true,
		Number: 12, URL: "https://github.com/acme/app/pull/12", Title: "Fix the login bug",
		State: agentsv1alpha1.PullRequestOpen, HeadSHA: shaA, HeadBranch: "shepherd/42-fix-login", BaseBranch: "main",
		MergeState: agentsv1alpha1.MergeStateClean, ReviewDecision: agentsv1alpha1.ReviewRequired,
		Checks: ChecksEvidence{State: agentsv1alpha1.ChecksPending, Passed: 2, Pending: 1},
	}
}

func failing(pr PullRequestEvidence, sha string) PullRequestEvidence {
	pr.HeadSHA = sha
	pr.Checks = ChecksEvidence{
		State: agentsv1alpha1.ChecksFailing, Passed: 2, Failed: 1,
		FailedChecks: []FailedCheck{{Name: "unit-tests", URL: "https://ci.example/run/7", LogExcerpt: "--- FAIL: TestLogin (0.01s)\n    login_test.go:42: want 200, got 500"}},
	}
	return pr
}

func passing(pr PullRequestEvidence, sha string) PullRequestEvidence {
	pr.HeadSHA = sha
	pr.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksPassing, Passed: 3}
	return pr
}

func pending(pr PullRequestEvidence, sha string) PullRequestEvidence {
	pr.HeadSHA = sha
	pr.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksPending, Passed: 1, Pending: 2}
	return pr
}

func approvedGreen(sha string) PullRequestEvidence {
	pr := passing(openPR(), sha)
	pr.ReviewDecision, pr.ApprovedAtHead = agentsv1alpha1.ReviewApproved, true
	return pr
}

// prFor returns pull request evidence that puts an open pull request in phase p.
func prFor(p agentsv1alpha1.SessionPhase) PullRequestEvidence {
	pr := openPR()
	switch p {
	case agentsv1alpha1.PhaseCIFailed:
		pr = failing(pr, shaA)
	case agentsv1alpha1.PhaseChangesRequested:
		pr.ReviewDecision = agentsv1alpha1.ReviewChangesRequested
		pr.Threads = []ReviewThread{{ID: "T1", Author: "alice", Path: "login.go", Line: 10, Body: "Handle the error."}}
	case agentsv1alpha1.PhaseMergeable:
		pr = approvedGreen(shaA)
	case agentsv1alpha1.PhaseApproved:
		pr = approvedGreen(shaA)
		pr.MergeState = agentsv1alpha1.MergeStateBlocked
	case agentsv1alpha1.PhaseReviewPending:
	case agentsv1alpha1.PhasePROpen:
		pr.ReviewDecision = agentsv1alpha1.ReviewNone
		pr.MergeState = agentsv1alpha1.MergeStateUnknown
	}
	return pr
}

// graceFull is a grace for sig that has all its observations and has lasted the whole period:
// the next observation of the same signal declares it.
func graceFull(sig string, now time.Time) *agentsv1alpha1.GraceStatus {
	return &agentsv1alpha1.GraceStatus{Signal: sig, Since: mt(now.Add(-DefaultGracePeriod)), Observations: DefaultGraceObservations}
}

// sim runs a sequence of decisions, each on the status the previous one wrote.
type sim struct {
	status agentsv1alpha1.AgentSessionStatus
	last   Decision
	// merge is the merge runner's record, as the controller keeps it.
	merge MergeEvidence
}

// ranActions is the merge runner's record once the controller ran d's actions: a Merge action
// is under way (its outcome is the test's to set).
func ranActions(m MergeEvidence, d Decision) MergeEvidence {
	for _, a := range d.Actions {
		if a.Type != ActionMerge {
			continue
		}
		attempts := int32(1)
		if m.For(a.PullRequestNumber, a.ExpectedHeadSHA) {
			attempts = m.Attempts + 1
		}
		m = MergeEvidence{PullRequestNumber: a.PullRequestNumber, HeadSHA: a.ExpectedHeadSHA, Outcome: MergeInFlight, Attempts: attempts}
	}
	return m
}

func newSim(prev agentsv1alpha1.AgentSessionStatus) *sim { return &sim{status: *prev.DeepCopy()} }

// step decides on in (with the simulated status as Previous) and applies the decision.
func (s *sim) step(in Input) Decision {
	in.Previous = *s.status.DeepCopy()
	if in.Merge.Outcome == MergeNotRun {
		in.Merge = s.merge
	}
	d := Decide(in)
	Apply(&s.status, d)
	s.last = d
	s.merge = ranActions(in.Merge, d)
	return d
}

// stepper returns a step function: pr observed at minute m of the test clock, under settings.
func (s *sim) stepper(settings Settings) func(m int, pr PullRequestEvidence) Decision {
	return func(m int, pr PullRequestEvidence) Decision {
		in := withPR(t0.Add(time.Duration(m)*time.Minute), pr)
		in.Settings = settings
		return s.step(in)
	}
}

func (s *sim) reaction(t agentsv1alpha1.ReactionTrigger) agentsv1alpha1.ReactionStatus {
	for _, r := range s.status.Reactions {
		if r.Trigger == t {
			return r
		}
	}
	return agentsv1alpha1.ReactionStatus{Trigger: t}
}

func eventTypes(d Decision) []agentsv1alpha1.EventType {
	var out []agentsv1alpha1.EventType
	for _, e := range d.Events {
		out = append(out, e.Type)
	}
	return out
}

func actionsOf(d Decision, t ActionType) []Action {
	var out []Action
	for _, a := range d.Actions {
		if a.Type == t {
			out = append(out, a)
		}
	}
	return out
}

func findEvent(d Decision, t agentsv1alpha1.EventType) (Event, bool) {
	for _, e := range d.Events {
		if e.Type == t {
			return e, true
		}
	}
	return Event{}, false
}

func cond(d Decision, t string) (metav1.Condition, bool) {
	for _, c := range d.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return metav1.Condition{}, false
}

// edge is the decision's actions without the level ones (the agent pod, the Worktree), which
// follow the state of the world in every decision and are not what a reaction test is about.
func edge(d Decision) []Action {
	var out []Action
	for _, a := range d.Actions {
		if !a.Type.Level() {
			out = append(out, a)
		}
	}
	return out
}
