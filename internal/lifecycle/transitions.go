package lifecycle

import (
	"sort"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Start stands for "no phase yet" ([*] in the diagram): the From of a new session's first
// transition.
const Start agentsv1alpha1.SessionPhase = ""

// The groups of phases.
const (
	// GroupPullRequest: the phases read from an open pull request.
	GroupPullRequest = "PullRequest"
	// GroupActive: the agent has run.
	GroupActive = "Active"
	// GroupStarted: the session left the queue.
	GroupStarted = "Started"
	// GroupLive: every phase that is not terminal.
	GroupLive = "Live"
)

// Groups of phases used by the transition rules and, as composite states, by the diagram in
// docs/lifecycle.md.
var Groups = map[string][]agentsv1alpha1.SessionPhase{
	GroupPullRequest: {agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable},
	GroupActive: {agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck, agentsv1alpha1.PhasePROpen,
		agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.PhaseChangesRequested,
		agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable},
	GroupStarted: {agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput, agentsv1alpha1.PhaseStuck,
		agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable},
	GroupLive: {agentsv1alpha1.PhaseQueued, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseNeedsInput,
		agentsv1alpha1.PhaseStuck, agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable},
}

// Rule is one row of the transition table: from a phase or group to a phase or group, and the
// evidence that drives it. A group on both sides means every pair of distinct phases.
type Rule struct {
	From, To string
	Evidence string
}

// Names used in Rules: the phases, [*] for "no phase yet", and the groups.
const (
	nStart      = "[*]"
	nQueued     = string(agentsv1alpha1.PhaseQueued)
	nSpawning   = string(agentsv1alpha1.PhaseSpawning)
	nWorking    = string(agentsv1alpha1.PhaseWorking)
	nNeedsInput = string(agentsv1alpha1.PhaseNeedsInput)
	nStuck      = string(agentsv1alpha1.PhaseStuck)
	nMerged     = string(agentsv1alpha1.PhaseMerged)
	nDone       = string(agentsv1alpha1.PhaseDone)
	nErrored    = string(agentsv1alpha1.PhaseErrored)
	nStopped    = string(agentsv1alpha1.PhaseStopped)
)

// Rules is the transition table, in the order docs/lifecycle.md prints it. Decide never makes a
// transition the table does not list (the fuzz test holds it to that), and the diagram in
// docs/lifecycle.md draws exactly these edges (a test parses it).
var Rules = []Rule{
	{nStart, nQueued, "new session, not admitted under the Project's maxConcurrentSessions"},
	{nStart, nStopped, "new session created with state Stopped"},
	{nStart, GroupStarted, "new session, admitted: judged by the runtime rules as if it were Spawning (without a pod yet, it stays Spawning)"},
	{nStart, nMerged, "its pull request is already merged (an adopted branch)"},
	{nStart, nDone, "its pull request is already closed, or as from Spawning"},
	{nStart, nErrored, "as from Spawning"},
	{nQueued, GroupStarted, "admitted: judged as if it were Spawning"},
	{nQueued, nErrored, "admitted: as from Spawning"},
	{nSpawning, GroupActive, "the runner of the current pod reports the agent (Working without a pull request, NeedsInput, Stuck, or the open pull request's phase)"},
	{nWorking, GroupPullRequest, "the session's pull request is open"},
	{nWorking, nNeedsInput, "the runner reports WaitingForInput"},
	{nWorking, nStuck, "no activity and no pull request change past stuckAfter, or the runner silent past the grace"},
	{nNeedsInput, nWorking, "the agent works again, no pull request"},
	{nNeedsInput, GroupPullRequest, "the agent works again, pull request open"},
	{nNeedsInput, nStuck, "silent past stuckAfter, or the runner silent past the grace"},
	{nStuck, nWorking, "activity again, no pull request"},
	{nStuck, GroupPullRequest, "activity again (or an idle agent with an open pull request)"},
	{nStuck, nNeedsInput, "the runner reports WaitingForInput"},
	{GroupPullRequest, GroupPullRequest, "the pull request's truth changed: failing checks, changes requested, approved, mergeable, review required, open"},
	{GroupPullRequest, nNeedsInput, "the runner reports WaitingForInput (beats the pull request)"},
	{GroupPullRequest, nStuck, "an agent mid-turn silent past stuckAfter, or the runner silent past the grace (runtime beats the pull request)"},
	{nWorking, nSpawning, "the agent pod lost past the grace, no pull request: respawn"},
	{nNeedsInput, nSpawning, "the agent pod lost past the grace, no pull request: respawn"},
	{nStuck, nSpawning, "the agent pod lost past the grace, no pull request: respawn"},
	{GroupLive, nStopped, "state set to Stopped"},
	{GroupLive, nMerged, "the pull request itself says merged"},
	{GroupLive, nDone, "the pull request was closed without merging, the issue was closed in the tracker, a limit (maxDuration, maxTurns) was reached, or the agent exited with code 0 and no pull request"},
	{GroupStarted, nErrored, "workspace Failed or Missing past the grace, the agent container unable to start past the grace, or the agent exited with a failure and no pull request"},
	{GroupStarted, nQueued, "the Project's budget is spent (under FinishTurn once the agent is between turns); resumes when the window resets"},
	{nStopped, nQueued, "restore (state Running again), not admitted"},
	{nStopped, GroupStarted, "restore (state Running again), admitted: judged as if it were Spawning"},
	{nStopped, nDone, "restore, and the pull request was closed meanwhile (or as from Spawning)"},
	{nStopped, nErrored, "restore: as from Spawning"},
	{nStopped, nMerged, "the pull request itself says merged"},
	{nDone, nMerged, "the pull request itself says merged"},
	{nDone, nStopped, "state set to Stopped (set Running again to resume the conversation)"},
	{nErrored, nMerged, "the pull request itself says merged"},
	{nErrored, nStopped, "state set to Stopped (set Running again to retry)"},
}

// Transition is one edge: a phase to another.
type Transition struct {
	From, To agentsv1alpha1.SessionPhase
}

// Expand returns the phases a name in the table stands for.
func Expand(name string) []agentsv1alpha1.SessionPhase {
	if name == nStart {
		return []agentsv1alpha1.SessionPhase{Start}
	}
	if g, ok := Groups[name]; ok {
		return g
	}
	return []agentsv1alpha1.SessionPhase{agentsv1alpha1.SessionPhase(name)}
}

// Transitions returns every edge of Rules, expanded and sorted, without self-loops.
func Transitions() []Transition {
	set := map[Transition]bool{}
	for _, r := range Rules {
		for _, f := range Expand(r.From) {
			for _, t := range Expand(r.To) {
				if f != t {
					set[Transition{f, t}] = true
				}
			}
		}
	}
	out := make([]Transition, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// Allowed reports whether the table lists from → to (staying put is always allowed).
func Allowed(from, to agentsv1alpha1.SessionPhase) bool {
	if from == to {
		return true
	}
	for _, t := range Transitions() {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}
