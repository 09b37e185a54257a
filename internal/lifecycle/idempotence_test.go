package lifecycle

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// roundTrip passes a status through JSON, as the API server stores it (times to whole seconds).
func roundTrip(t testing.TB, st agentsv1alpha1.AgentSessionStatus) agentsv1alpha1.AgentSessionStatus {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("marshal status: %v", err)
	}
	var out agentsv1alpha1.AgentSessionStatus
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal status: %v", err)
	}
	return out
}

func statusJSON(t testing.TB, st agentsv1alpha1.AgentSessionStatus) string {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("marshal status: %v", err)
	}
	return string(b)
}

// checkIdempotent decides on in, writes the decision, reads it back as the API server would,
// and decides again on the same evidence (and the record of the actions it ran): no events, no
// actions, and the status is a fixed point. This is what makes a manager restart (or a reconcile storm) safe.
func checkIdempotent(t testing.TB, in Input) {
	t.Helper()
	first := Decide(in)
	written := *in.Previous.DeepCopy()
	Apply(&written, first)
	written = roundTrip(t, written)

	again := in
	again.Previous = written
	again.Merge = ranActions(in.Merge, first)
	second := Decide(again)
	// Level actions (the pod, the Worktree) are asked for again while the world is as it was:
	// the API server makes them safe to repeat. Nothing else may repeat.
	if len(second.Events) > 0 || len(edge(second)) > 0 {
		t.Fatalf("deciding again on the same evidence produced events %v and actions %v (first decision: phase %s, events %v)",
			eventTypes(second), edge(second), first.Phase, eventTypes(first))
	}
	if a, b := levelActions(first), levelActions(second); !reflect.DeepEqual(a, b) {
		t.Fatalf("the level actions changed on the same evidence: %v, then %v", a, b)
	}
	if second.Phase != first.Phase {
		t.Fatalf("deciding again moved the phase from %s to %s", first.Phase, second.Phase)
	}
	rewritten := *written.DeepCopy()
	Apply(&rewritten, second)
	if a, b := statusJSON(t, written), statusJSON(t, roundTrip(t, rewritten)); a != b {
		t.Fatalf("the status is not a fixed point:\nfirst:  %s\nsecond: %s", a, b)
	}
}

func TestIdempotence(t *testing.T) {
	type scenario struct {
		name string
		in   Input
	}
	var scenarios []scenario
	for _, tc := range phaseCases() {
		in := from(tc.from)
		tc.setup(&in)
		scenarios = append(scenarios, scenario{"transition: " + tc.name, in})
	}
	add := func(name string, in Input) { scenarios = append(scenarios, scenario{name, in}) }
	add("CI failure, first attempt", withPR(t0, failing(openPR(), shaA)))
	add("CI failure with a template", func() Input {
		in := withPR(t0, failing(openPR(), shaA))
		in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{index .Checks 3}}"}}
		return in
	}())
	add("review threads", withPR(t0, threadsPR(thread1, thread2)))
	add("merge conflicts", func() Input {
		pr := openPR()
		pr.MergeState = agentsv1alpha1.MergeStateDirty
		return withPR(t0, pr)
	}())
	add("approved and green with Merge", func() Input {
		in := withPR(t0, approvedGreen(shaA))
		in.Settings = mergeSettings()
		return in
	}())
	add("approved and green with Notify", withPR(t0, approvedGreen(shaA)))
	add("merged after Shepherd's merge", func() Input {
		pr := approvedGreen(shaA)
		pr.State = agentsv1alpha1.PullRequestMerged
		in := withPR(t0, pr)
		in.Settings = mergeSettings()
		in.Previous.Phase = agentsv1alpha1.PhaseMergeable
		in.Previous.Reactions = []agentsv1alpha1.ReactionStatus{{Trigger: agentsv1alpha1.TriggerApprovedAndGreen, LastAttemptKey: "head:" + shaA, Attempts: 1, Episode: shaA}}
		return in
	}())
	add("user messages", func() Input {
		in := running()
		in.Spec.Messages = []agentsv1alpha1.Message{{ID: "a", Text: "one"}, {ID: "b", Text: "two"}}
		return in
	}())
	add("escalation due by time", func() Input {
		in := withPR(t0, threadsPR(thread1))
		in.Previous.Phase = agentsv1alpha1.PhaseChangesRequested
		in.Previous.Reactions = []agentsv1alpha1.ReactionStatus{{Trigger: agentsv1alpha1.TriggerChangesRequested, Episode: shaA,
			EpisodeStartTime: mt(t0.Add(-time.Hour)), Attempts: 1, LastAttemptKey: fingerprint([]string{"t:" + thread1.ID})}}
		return in
	}())
	add("grace after a pause", func() Input {
		in := running()
		in.Pod = PodEvidence{}
		in.Previous.Grace = &agentsv1alpha1.GraceStatus{Signal: signalPod, Since: mt(t0.Add(-time.Hour)), Observations: 1}
		return in
	}())
	add("grace one observation short", func() Input {
		in := running()
		in.Pod = PodEvidence{}
		in.Previous.Grace = &agentsv1alpha1.GraceStatus{Signal: signalPod, Since: mt(t0.Add(-10 * time.Minute)), Observations: 2}
		return in
	}())
	add("sub-second clock", func() Input {
		in := withPR(t0.Add(700*time.Millisecond), failing(openPR(), shaA))
		in.Runner.LastActivityTime = t0.Add(-11*time.Minute + 300*time.Millisecond)
		return in
	}())

	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { checkIdempotent(t, sc.in) })
	}
}

func TestRestartKeepsAttempts(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(withPR(t0, failing(openPR(), shaA)))
	s.step(withPR(t0.Add(5*time.Minute), failing(openPR(), shaB)))

	// A new manager reads the status from the API server and sees C fail: the third failure
	// escalates; nothing was forgotten.
	s.status = roundTrip(t, s.status)
	d := s.step(withPR(t0.Add(10*time.Minute), failing(openPR(), shaC)))
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(BeEmpty())
}

func levelActions(d Decision) []ActionType {
	var out []ActionType
	for _, a := range d.Actions {
		if a.Type.Level() {
			out = append(out, a.Type)
		}
	}
	return out
}

// TestRestartKeepsTheQuestion: a new manager knows nothing of the runner until its next report
// (the report store is memory). A session waiting for input stays NeedsInput through that gap,
// and neither the gap nor the runner's next report of the same question notifies again: one
// notification per question across a restart, whether the pod started a moment ago (its
// runner's first grace slot) or long before.
func TestRestartKeepsTheQuestion(t *testing.T) {
	for _, started := range []time.Duration{-2 * time.Second, -time.Hour} {
		t.Run("pod started "+(-started).String()+" ago", func(t *testing.T) {
			g := NewWithT(t)
			s := newSim(running().Previous)
			in := running()
			in.Pod.Started = t0.Add(started)
			toNeedsInput(&in)
			d := s.step(in)
			g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseNeedsInput))
			g.Expect(actionsOf(d, ActionNotify)).To(HaveLen(1))

			s.status = roundTrip(t, s.status)
			gap := running()
			gap.Now, gap.Pod.Started, gap.Runner = t0.Add(time.Second), t0.Add(started), RunnerEvidence{}
			d = s.step(gap)
			g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseNeedsInput), "no report yet is not an answer: %s", d.Message)
			g.Expect(actionsOf(d, ActionNotify)).To(BeEmpty(), "the gap asks nothing new")

			again := running()
			again.Now, again.Pod.Started, again.Runner.ReportTime = t0.Add(2*time.Second), t0.Add(started), t0.Add(2*time.Second)
			toNeedsInput(&again)
			d = s.step(again)
			g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseNeedsInput))
			g.Expect(actionsOf(d, ActionNotify)).To(BeEmpty(), "the same question, reported again, is not news")
			g.Expect(s.reaction(agentsv1alpha1.TriggerNeedsInput).Attempts).To(Equal(int32(1)))
		})
	}
}
