package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// TestEventVocabulary pins the architecture's event vocabulary: every event type is emitted by
// a scenario that causes it, at the priority EventPriorities gives it, and no event type is
// left out of the table.
func TestEventVocabulary(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	// steps runs the inputs in order on one simulated status and returns the last decision.
	steps := func(ins ...Input) Decision {
		s := newSim(ins[0].Previous)
		var d Decision
		for _, in := range ins {
			d = s.step(in)
		}
		return d
	}
	phase := func(p agentsv1alpha1.SessionPhase, setup func(in *Input)) func() Decision {
		return func() Decision {
			in := from(p)
			setup(&in)
			return Decide(in)
		}
	}
	reviewNone := openPR()
	reviewNone.ReviewDecision = agentsv1alpha1.ReviewNone
	dirty := pending(openPR(), shaA)
	dirty.MergeState = agentsv1alpha1.MergeStateDirty
	reopened := openPR()
	reopened.State = agentsv1alpha1.PullRequestClosed
	mergedB := approvedGreen(shaA)
	mergedB.State = agentsv1alpha1.PullRequestMerged
	withSettings := func(in Input, s Settings) Input { in.Settings = s; return in }
	noHead := approvedGreen("")
	brokenTemplate := withPR(at(0), failing(openPR(), shaA))
	brokenTemplate.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{index .Checks 5}}"},
	}

	cases := []struct {
		name   string
		event  agentsv1alpha1.EventType
		decide func() Decision
	}{
		{"a session not admitted yet is queued", agentsv1alpha1.EventSessionQueued, phase(Start, func(in *Input) { in.Spec.Admitted = false })},
		{"an admitted session is spawned", agentsv1alpha1.EventSessionSpawned, phase(Start, noPod)},
		{"a spawned agent that reports activity is working", agentsv1alpha1.EventSessionWorking, phase(agentsv1alpha1.PhaseSpawning, toWorking)},
		{"an agent idle past the threshold is stuck", agentsv1alpha1.EventSessionStuck, phase(agentsv1alpha1.PhaseWorking, toStuck)},
		{"an agent asking a question needs input", agentsv1alpha1.EventSessionNeedsInput, phase(agentsv1alpha1.PhaseWorking, toNeedsInput)},
		{"a session its user stops is killed", agentsv1alpha1.EventSessionKilled, phase(agentsv1alpha1.PhaseWorking, toStopped)},
		{"an agent that exits is reported", agentsv1alpha1.EventSessionExited, phase(agentsv1alpha1.PhaseWorking, exitWith(0))},
		{"a clean exit without a pull request is done", agentsv1alpha1.EventSessionDone, phase(agentsv1alpha1.PhaseWorking, exitWith(0))},
		{"a failed exit is errored", agentsv1alpha1.EventSessionErrored, phase(agentsv1alpha1.PhaseWorking, exitWith(2))},
		{"a first pull request is created", agentsv1alpha1.EventPRCreated, func() Decision { return Decide(withPR(at(0), openPR())) }},
		{"a new head commit updates the pull request", agentsv1alpha1.EventPRUpdated, func() Decision {
			return steps(withPR(at(0), pending(openPR(), shaA)), withPR(at(1), pending(openPR(), shaB)))
		}},
		{"a reopened pull request is updated", agentsv1alpha1.EventPRUpdated, func() Decision {
			return steps(withPR(at(0), reopened), withPR(at(1), restoreRunning(openPR())))
		}},
		{"the forge says merged", agentsv1alpha1.EventPRMerged, phase(agentsv1alpha1.PhaseReviewPending, toMerged)},
		{"the forge says closed", agentsv1alpha1.EventPRClosed, phase(agentsv1alpha1.PhaseReviewPending, toClosed)},
		{"checks go green", agentsv1alpha1.EventCIPassing, func() Decision {
			return steps(withPR(at(0), pending(openPR(), shaA)), withPR(at(1), passing(openPR(), shaA)))
		}},
		{"checks fail", agentsv1alpha1.EventCIFailing, func() Decision { return Decide(withPR(at(0), failing(openPR(), shaA))) }},
		{"the failure is sent to the agent", agentsv1alpha1.EventCIFixSent, func() Decision { return Decide(withPR(at(0), failing(openPR(), shaA))) }},
		{"the agent's fix fails too", agentsv1alpha1.EventCIFixFailed, func() Decision {
			return steps(withPR(at(0), failing(openPR(), shaA)), withPR(at(5), pending(openPR(), shaB)), withPR(at(9), failing(openPR(), shaB)))
		}},
		{"a review becomes required", agentsv1alpha1.EventReviewPending, func() Decision {
			return steps(withPR(at(0), reviewNone), withPR(at(1), openPR()))
		}},
		{"a reviewer approves", agentsv1alpha1.EventReviewApproved, func() Decision {
			return steps(withPR(at(0), passing(openPR(), shaA)), withPR(at(1), approvedGreen(shaA)))
		}},
		{"a reviewer requests changes", agentsv1alpha1.EventReviewChangesRequested, func() Decision { return Decide(withPR(at(0), threadsPR(thread1))) }},
		{"the review threads are sent to the agent", agentsv1alpha1.EventReviewCommentsSent, func() Decision { return Decide(withPR(at(0), threadsPR(thread1))) }},
		{"a comment is forwarded to the agent", agentsv1alpha1.EventReviewCommented, func() Decision {
			return Decide(withPR(at(1), commentsPR(comment("IC_1", "alice", "Why?", at(0)))))
		}},
		{"approved, green and mergeable is ready to merge", agentsv1alpha1.EventMergeReady, func() Decision { return Decide(withPR(at(0), approvedGreen(shaA))) }},
		{"the pull request conflicts with its base", agentsv1alpha1.EventMergeConflicts, func() Decision { return Decide(withPR(at(0), dirty)) }},
		{"the merge Shepherd asked for went through", agentsv1alpha1.EventMergeCompleted, func() Decision {
			return steps(withSettings(withPR(at(0), approvedGreen(shaA)), mergeSettings()), withSettings(withPR(at(1), mergedB), mergeSettings()))
		}},
		{"a merge that cannot be guarded escalates", agentsv1alpha1.EventReactionEscalated, func() Decision {
			return Decide(withSettings(withPR(at(0), noHead), mergeSettings()))
		}},
		{"a message template that fails at run time", agentsv1alpha1.EventReactionTemplateFailed, func() Decision { return Decide(brokenTemplate) }},
	}

	seen := map[agentsv1alpha1.EventType]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := tc.decide()
			ev, ok := findEvent(d, tc.event)
			g.Expect(ok).To(BeTrue(), "no %s event; got %v (phase %s: %s)", tc.event, eventTypes(d), d.Phase, d.Message)
			want, listed := EventPriorities[tc.event]
			g.Expect(listed).To(BeTrue(), "%s is not in EventPriorities", tc.event)
			g.Expect(ev.Priority).To(Equal(want))
			g.Expect(ev.Reason).NotTo(BeEmpty())
			g.Expect(ev.Message).NotTo(BeEmpty())
		})
		seen[tc.event] = true
	}
	t.Run("every event type has a scenario", func(t *testing.T) {
		g := NewWithT(t)
		var missing []agentsv1alpha1.EventType
		for _, e := range slices.Sorted(maps.Keys(EventPriorities)) {
			if !seen[e] {
				missing = append(missing, e)
			}
		}
		g.Expect(missing).To(BeEmpty())
	})
}

// restoreRunning is pr open again after it was closed.
func restoreRunning(pr PullRequestEvidence) PullRequestEvidence {
	pr.State = agentsv1alpha1.PullRequestOpen
	return pr
}

// TestEventPrioritiesCoverEveryEventType reads the EventType constants declared in the API
// package and requires EventPriorities to list exactly those.
func TestEventPrioritiesCoverEveryEventType(t *testing.T) {
	g := NewWithT(t)
	f, err := parser.ParseFile(token.NewFileSet(), "../../api/v1alpha1/lifecycle_constants.go", nil, 0)
	g.Expect(err).NotTo(HaveOccurred())
	var declared []agentsv1alpha1.EventType
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventType" {
			return true
		}
		for _, v := range vs.Values {
			lit, ok := v.(*ast.BasicLit)
			g.Expect(ok).To(BeTrue(), "EventType constants are string literals")
			s, err := strconv.Unquote(lit.Value)
			g.Expect(err).NotTo(HaveOccurred())
			declared = append(declared, agentsv1alpha1.EventType(s))
		}
		return true
	})
	g.Expect(declared).To(HaveLen(len(EventPriorities)))
	g.Expect(declared).To(ConsistOf(slices.Collect(maps.Keys(EventPriorities))))
}
