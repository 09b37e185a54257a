package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// withPR returns a running session observing pr at now.
func withPR(now time.Time, pr PullRequestEvidence) Input {
	in := running()
	in.Now = now
	in.Runner.ReportTime = now
	in.Runner.State = agentsv1alpha1.ActivityReady
	in.Runner.LastActivityTime = now.Add(-time.Minute)
	in.PullRequest = pr
	return in
}

func TestCIFailureEpisode(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

	// 1. Checks fail on A: the first attempt goes to the agent with the failed check and its log.
	d := s.step(withPR(at(0), failing(openPR(), shaA)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed))
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Trigger).To(Equal(agentsv1alpha1.TriggerCIFailed))
	g.Expect(sends[0].Text).To(ContainSubstring("unit-tests: https://ci.example/run/7"))
	g.Expect(sends[0].Text).To(ContainSubstring("login_test.go:42: want 200, got 500"))
	g.Expect(sends[0].Text).To(ContainSubstring("attempt 1 of 2"))
	g.Expect(sends[0].ID).To(HavePrefix("ciFailed."))
	g.Expect(d.Outbox).To(ConsistOf(HaveField("ID", sends[0].ID)))
	g.Expect(eventTypes(d)).To(ContainElements(agentsv1alpha1.EventPRCreated, agentsv1alpha1.EventCIFailing, agentsv1alpha1.EventCIFixSent))
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", shaA), HaveField("Attempts", int32(1))))

	// 2. The same failure seen again: nothing new.
	d = s.step(withPR(at(1), failing(openPR(), shaA)))
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(d.Events).To(BeEmpty())

	// 2b. CI re-runs on the same head (pending again) and fails again: the same attempt.
	g.Expect(edge(s.step(withPR(at(2), pending(openPR(), shaA))))).To(BeEmpty())
	d = s.step(withPR(at(3), failing(openPR(), shaA)))
	g.Expect(edge(d)).To(BeEmpty(), "a re-run on the same head is not a new attempt")
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", shaA), HaveField("Attempts", int32(1))))

	// 3. The agent pushed B; checks pending between pushes do not reset the episode.
	d = s.step(withPR(at(5), pending(openPR(), shaB)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseReviewPending))
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", shaA), HaveField("Attempts", int32(1))))

	// 4. B fails too: a second attempt of the same episode, and the fix is reported as failed.
	d = s.step(withPR(at(9), failing(openPR(), shaB)))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(HaveLen(1))
	g.Expect(actionsOf(d, ActionSendToAgent)[0].Text).To(ContainSubstring("attempt 2 of 2"))
	g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventCIFixFailed))
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", shaA), HaveField("Attempts", int32(2))))

	// 5. C pending, then C fails: the retries are used up, so it escalates, once, at urgent.
	s.step(withPR(at(12), pending(openPR(), shaC)))
	d = s.step(withPR(at(15), failing(openPR(), shaC)))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(BeEmpty())
	esc := actionsOf(d, ActionEscalate)
	g.Expect(esc).To(HaveLen(1))
	g.Expect(esc[0].Priority).To(Equal(agentsv1alpha1.PriorityUrgent))
	g.Expect(esc[0].Text).To(ContainSubstring("2 attempt(s) did not resolve it"))
	ev, ok := findEvent(d, agentsv1alpha1.EventReactionEscalated)
	g.Expect(ok).To(BeTrue())
	g.Expect(ev.Priority).To(Equal(agentsv1alpha1.PriorityUrgent))
	g.Expect(ev.Reason).To(Equal(agentsv1alpha1.ReasonEscalated))
	attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention.Status).To(BeEquivalentTo("True"))
	g.Expect(attention.Reason).To(Equal(agentsv1alpha1.ReasonEscalated))

	// 6. D fails as well: the episode belongs to humans now; no more messages, no second escalation.
	d = s.step(withPR(at(20), failing(openPR(), shaD)))
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Attempts", int32(2)), HaveField("Escalated", true)))

	// 7. Checks pass: the episode ends.
	d = s.step(withPR(at(30), passing(openPR(), shaD)))
	g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventCIPassing))
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", ""), HaveField("Attempts", int32(0)), HaveField("Escalated", false)))

	// 8. A later failure is a new episode with its own attempts.
	d = s.step(withPR(at(40), failing(openPR(), shaA)))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(HaveLen(1))
	g.Expect(actionsOf(d, ActionSendToAgent)[0].Text).To(ContainSubstring("attempt 1 of 2"))
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(And(HaveField("Episode", shaA), HaveField("Attempts", int32(1))))
}

func TestCIFailureEscalatesAfterDuration(t *testing.T) {
	g := NewWithT(t)
	in := withPR(t0, failing(openPR(), shaA))
	in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 20 * time.Minute},
	}
	s := newSim(in.Previous)
	d := s.step(in)
	g.Expect(actionsOf(d, ActionSendToAgent)).To(HaveLen(1))
	g.Expect(d.RequeueAfter).To(Equal(20 * time.Minute))

	in.Now = t0.Add(19 * time.Minute)
	g.Expect(edge(s.step(in))).To(BeEmpty())

	in.Now = t0.Add(20 * time.Minute)
	d = s.step(in)
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
	g.Expect(actionsOf(d, ActionEscalate)[0].Text).To(ContainSubstring("escalateAfter 20m0s"))

	in.Now = t0.Add(50 * time.Minute)
	g.Expect(edge(s.step(in))).To(BeEmpty())
}

func TestCIFailureWithoutFreshPullRequestChangesNothing(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(withPR(t0, failing(openPR(), shaA)))
	before := s.reaction(agentsv1alpha1.TriggerCIFailed)

	in := withPR(t0.Add(time.Hour), PullRequestEvidence{}) // the forge was not read
	d := s.step(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed))
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed)).To(Equal(before))
}

func threadsPR(threads ...ReviewThread) PullRequestEvidence {
	pr := passing(openPR(), shaA)
	pr.ReviewDecision = agentsv1alpha1.ReviewChangesRequested
	pr.Threads = threads
	return pr
}

var (
	thread1 = ReviewThread{ID: "PRRT_1", Author: "alice", Path: "login.go", Line: 10, Body: "Handle the error here.", URL: "https://github.com/acme/app/pull/12#r1"}
	thread2 = ReviewThread{ID: "PRRT_2", Author: "bob", Path: "login_test.go", Line: 3, Body: "Add a test for 500."}
	thread3 = ReviewThread{ID: "PRRT_3", Author: "alice", Path: "README.md", Body: "Document the flag."}
)

func TestChangesRequestedForwardsEachNewSetOnce(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

	d := s.step(withPR(at(0), threadsPR(thread1, thread2)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseChangesRequested))
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Text).To(ContainSubstring("login.go:10 by alice (thread PRRT_1, https://github.com/acme/app/pull/12#r1):\n    > Handle the error here."))
	g.Expect(sends[0].Text).To(ContainSubstring("login_test.go:3 by bob (thread PRRT_2)"))
	g.Expect(eventTypes(d)).To(ContainElements(agentsv1alpha1.EventReviewChangesRequested, agentsv1alpha1.EventReviewCommentsSent))

	// Seen again: nothing.
	g.Expect(edge(s.step(withPR(at(2), threadsPR(thread1, thread2))))).To(BeEmpty())
	// One thread resolved: the set shrank, nothing new to say.
	g.Expect(edge(s.step(withPR(at(4), threadsPR(thread2))))).To(BeEmpty())
	// A new thread: only it is sent, the still-open one is counted.
	d = s.step(withPR(at(6), threadsPR(thread2, thread3)))
	sends = actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Text).To(ContainSubstring("README.md by alice (thread PRRT_3)"))
	g.Expect(sends[0].Text).NotTo(ContainSubstring("PRRT_2"))
	g.Expect(sends[0].Text).To(ContainSubstring("1 earlier comment(s) are still unresolved"))
	g.Expect(s.reaction(agentsv1alpha1.TriggerChangesRequested).Attempts).To(Equal(int32(2)))

	// Still unresolved 30 minutes after the episode began: escalate once.
	d = s.step(withPR(at(30), threadsPR(thread2, thread3)))
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
	g.Expect(edge(s.step(withPR(at(45), threadsPR(thread2, thread3))))).To(BeEmpty())

	// Approved with every thread resolved: the episode ends.
	approved := approvedGreen(shaB)
	approved.MergeState = agentsv1alpha1.MergeStateBlocked
	s.step(withPR(at(50), approved))
	g.Expect(s.reaction(agentsv1alpha1.TriggerChangesRequested)).To(And(HaveField("Episode", ""), HaveField("Escalated", false)))
}

func TestChangesRequestedReviewBodyIsForwarded(t *testing.T) {
	g := NewWithT(t)
	pr := passing(openPR(), shaA)
	pr.ReviewDecision = agentsv1alpha1.ReviewChangesRequested
	pr.ChangeRequests = []Review{{ID: "PRR_9", Author: "carol", Body: "Split this into two commits."}}
	d := Decide(withPR(t0, pr))
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Text).To(ContainSubstring("Review by carol:\n    > Split this into two commits."))
}

func TestUnresolvedThreadsOnAnApprovedPRAreForwarded(t *testing.T) {
	g := NewWithT(t)
	pr := approvedGreen(shaA)
	pr.Threads = []ReviewThread{thread1}
	d := Decide(withPR(t0, pr))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseMergeable))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(ConsistOf(HaveField("Trigger", agentsv1alpha1.TriggerChangesRequested)))
}

func TestFingerprint(t *testing.T) {
	g := NewWithT(t)
	a, b, c := "t:A", "t:B", "t:C"
	g.Expect(fingerprint([]string{a, b})).To(Equal(fingerprint([]string{b, a})), "order does not matter")
	g.Expect(newItems([]string{a, b}, fingerprint([]string{a, b}))).To(BeEmpty())
	g.Expect(newItems([]string{a}, fingerprint([]string{a, b}))).To(BeEmpty(), "a shrinking set is not new")
	g.Expect(newItems([]string{b, c}, fingerprint([]string{a, b}))).To(Equal(map[string]bool{c: true}))
	g.Expect(newItems([]string{a}, "")).To(Equal(map[string]bool{a: true}))

	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("t:%d", i))
	}
	fp := fingerprint(many)
	g.Expect(len(fp)).To(BeNumerically("<=", maxKeyLen))
	g.Expect(fp).To(HavePrefix("all:"))
	g.Expect(newItems(many, fp)).To(BeEmpty(), "the same large set is not new")
	g.Expect(newItems(append(many, "t:new"), fp)).To(HaveLen(41), "a changed large set is resent whole")
}

func TestMergeConflictsForwardedOncePerEpisode(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	dirty := func(sha string) PullRequestEvidence {
		pr := pending(openPR(), sha)
		pr.MergeState = agentsv1alpha1.MergeStateDirty
		return pr
	}

	d := s.step(withPR(at(0), dirty(shaA)))
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Text).To(ContainSubstring("has merge conflicts with main"))
	g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventMergeConflicts))

	// The agent pushed but the conflict remains; mergeability being recomputed is not an end.
	g.Expect(edge(s.step(withPR(at(3), dirty(shaB))))).To(BeEmpty())
	unknown := pending(openPR(), shaB)
	unknown.MergeState = agentsv1alpha1.MergeStateUnknown
	g.Expect(edge(s.step(withPR(at(4), unknown)))).To(BeEmpty())
	g.Expect(s.reaction(agentsv1alpha1.TriggerMergeConflicts).Episode).To(Equal(shaA))

	// 15 minutes into the episode: escalate, once.
	d = s.step(withPR(at(15), dirty(shaB)))
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
	g.Expect(edge(s.step(withPR(at(16), dirty(shaB))))).To(BeEmpty())

	// Resolved, then a new conflict later (the base moved): a new episode, sent again.
	s.step(withPR(at(20), pending(openPR(), shaC)))
	g.Expect(s.reaction(agentsv1alpha1.TriggerMergeConflicts).Episode).To(BeEmpty())
	d = s.step(withPR(at(30), dirty(shaC)))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(HaveLen(1))
}

func mergeSettings() Settings {
	return Settings{Reactions: map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerApprovedAndGreen: {Action: agentsv1alpha1.ReactionMerge, MergeMethod: agentsv1alpha1.MergeRebase},
	}}
}

func TestApprovedAndGreenMergesOncePerHead(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	step := s.stepper(mergeSettings())

	d := step(0, approvedGreen(shaA))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseMergeable))
	merges := actionsOf(d, ActionMerge)
	g.Expect(merges).To(HaveLen(1))
	g.Expect(merges[0]).To(And(HaveField("MergeMethod", agentsv1alpha1.MergeRebase), HaveField("ExpectedHeadSHA", shaA), HaveField("PullRequestNumber", int64(12))))
	g.Expect(actionsOf(d, ActionNotify)).To(BeEmpty(), "Merge merges; it does not only notify")
	attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention.Status).To(BeEquivalentTo("False"))

	g.Expect(actionsOf(step(1, approvedGreen(shaA)), ActionMerge)).To(BeEmpty())
	// Mergeability flaps while the forge recomputes it: still no second merge of the same head.
	flap := approvedGreen(shaA)
	flap.MergeState = agentsv1alpha1.MergeStateUnknown
	g.Expect(step(2, flap).Phase).To(Equal(agentsv1alpha1.PhaseApproved))
	g.Expect(actionsOf(step(3, approvedGreen(shaA)), ActionMerge)).To(BeEmpty())

	// A new head that is approved and green again gets its own merge.
	d = step(5, approvedGreen(shaB))
	g.Expect(actionsOf(d, ActionMerge)).To(ConsistOf(HaveField("ExpectedHeadSHA", shaB)))

	// The forge says merged: Merged, and the merge is reported completed.
	merged := approvedGreen(shaB)
	merged.State = agentsv1alpha1.PullRequestMerged
	d = step(6, merged)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseMerged))
	g.Expect(eventTypes(d)).To(ContainElements(agentsv1alpha1.EventPRMerged, agentsv1alpha1.EventMergeCompleted))
	g.Expect(actionsOf(d, ActionNotify)).To(ConsistOf(HaveField("Priority", agentsv1alpha1.PriorityAction)))
}

// The merge runner's record decides what follows a merge the status says was asked for.
func TestMergeFollowsTheRunnersRecord(t *testing.T) {
	start := func(g Gomega) (*sim, func(m int, pr PullRequestEvidence) Decision, Action) {
		s := newSim(running().Previous)
		step := s.stepper(mergeSettings())
		d := step(0, approvedGreen(shaA))
		merges := actionsOf(d, ActionMerge)
		g.Expect(merges).To(HaveLen(1))
		g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventMergeReady, new([]agentsv1alpha1.EventType)))
		ready := 0
		for _, e := range d.Events {
			if e.Type == agentsv1alpha1.EventMergeReady {
				ready++
			}
		}
		g.Expect(ready).To(Equal(1), "one merge.ready, not one per rule")
		ev, _ := findEvent(d, agentsv1alpha1.EventMergeReady)
		g.Expect(ev.Reason).To(Equal(agentsv1alpha1.ReasonMergeRequested))
		g.Expect(s.merge).To(And(HaveField("Outcome", MergeInFlight), HaveField("HeadSHA", shaA)))
		return s, step, merges[0]
	}

	t.Run("a restart between the status write and the forge call asks again, as the same action", func(t *testing.T) {
		g := NewWithT(t)
		s, step, first := start(g)
		s.merge = MergeEvidence{} // the new manager has no record
		d := step(1, approvedGreen(shaA))
		g.Expect(actionsOf(d, ActionMerge)).To(ConsistOf(first))
		g.Expect(d.Events).To(BeEmpty())
		g.Expect(s.reaction(agentsv1alpha1.TriggerApprovedAndGreen).Attempts).To(Equal(int32(1)))
		g.Expect(actionsOf(step(2, approvedGreen(shaA)), ActionMerge)).To(BeEmpty(), "under way now")
	})

	t.Run("a transient failure is asked again after its back-off, and said meanwhile", func(t *testing.T) {
		g := NewWithT(t)
		s, step, first := start(g)
		retryAt := t0.Add(90 * time.Second)
		s.merge.Outcome, s.merge.RetryAt, s.merge.Error = MergeRetrying, retryAt, "forge unavailable (HTTP 502)"
		d := step(1, approvedGreen(shaA))
		g.Expect(edge(d)).To(BeEmpty())
		g.Expect(d.RequeueAfter).To(Equal(30 * time.Second))
		rec, ok := cond(d, agentsv1alpha1.ConditionReconciling)
		g.Expect(ok).To(BeTrue())
		g.Expect(rec.Reason).To(Equal(agentsv1alpha1.ReasonMergeRetrying))
		g.Expect(rec.Message).To(ContainSubstring("HTTP 502"))
		d = step(2, approvedGreen(shaA))
		g.Expect(actionsOf(d, ActionMerge)).To(ConsistOf(first))
		g.Expect(s.merge.Attempts).To(Equal(int32(2)))
	})

	t.Run("a refusal is escalated once and not tried again", func(t *testing.T) {
		g := NewWithT(t)
		s, step, _ := start(g)
		s.merge.Outcome, s.merge.Error = MergeRefused, "not mergeable (HTTP 405): Required status check is expected"
		d := step(1, approvedGreen(shaA))
		g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty())
		esc := actionsOf(d, ActionEscalate)
		g.Expect(esc).To(HaveLen(1))
		g.Expect(esc[0].Text).To(ContainSubstring("Required status check"))
		g.Expect(eventTypes(d)).To(ConsistOf(agentsv1alpha1.EventReactionEscalated))
		d = step(2, approvedGreen(shaA))
		g.Expect(edge(d)).To(BeEmpty())
		g.Expect(d.Events).To(BeEmpty())
	})

	t.Run("a head that moved waits for the new head", func(t *testing.T) {
		g := NewWithT(t)
		s, step, _ := start(g)
		s.merge.Outcome = MergeHeadMoved
		g.Expect(edge(step(1, approvedGreen(shaA)))).To(BeEmpty())
		g.Expect(actionsOf(step(2, approvedGreen(shaB)), ActionMerge)).To(ConsistOf(HaveField("ExpectedHeadSHA", shaB)))
	})

	t.Run("a merge the forge confirmed is Merged before the forge is read again", func(t *testing.T) {
		g := NewWithT(t)
		s, step, _ := start(g)
		s.merge.Outcome, s.merge.MergeCommitSHA = MergeSucceeded, shaC
		d := step(1, approvedGreen(shaA)) // a read from before the merge
		g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseMerged))
		g.Expect(d.PullRequest).To(And(HaveField("State", agentsv1alpha1.PullRequestMerged), HaveField("MergeCommitSHA", shaC)))
		g.Expect(eventTypes(d)).To(ContainElements(agentsv1alpha1.EventPRMerged, agentsv1alpha1.EventMergeCompleted))
		g.Expect(edge(d)).NotTo(ContainElement(HaveField("Type", ActionMerge)))
		in := withPR(t0.Add(2*time.Minute), approvedGreen(shaA))
		in.Settings, in.Previous = mergeSettings(), s.status
		g.Expect(Decide(in).Phase).To(Equal(agentsv1alpha1.PhaseMerged), "Merged holds once the record is gone")
	})
}

// The merge gate: an approval at the head it merges and checks passed there, unless the Project
// opted out of either.
func TestMergeGate(t *testing.T) {
	staleApproval := approvedGreen(shaB) // the forge still says Approved: the approval was of shaA
	staleApproval.ApprovedAtHead = false
	unchecked := approvedGreen(shaA)
	unchecked.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksNone}
	for _, tc := range []struct {
		name   string
		pr     PullRequestEvidence
		opt    func(*Reaction)
		merges bool
		why    string
	}{
		{"an approval at the head, checks passed", approvedGreen(shaA), nil, true, ""},
		{"an approval of an earlier head", staleApproval, nil, false, "approval given at head bbbbbbb"},
		{"an approval of an earlier head, mergeWithoutApproval", staleApproval, func(r *Reaction) { r.MergeWithoutApproval = true }, true, ""},
		{"no checks at the head", unchecked, nil, false, "checks ran and passed at head aaaaaaa"},
		{"no checks at the head, mergeWithoutChecks", unchecked, func(r *Reaction) { r.MergeWithoutChecks = true }, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			settings := mergeSettings()
			r := settings.Reactions[agentsv1alpha1.TriggerApprovedAndGreen]
			if tc.opt != nil {
				tc.opt(&r)
			}
			settings.Reactions[agentsv1alpha1.TriggerApprovedAndGreen] = r
			s := newSim(running().Previous)
			d := s.stepper(settings)(0, tc.pr)
			g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseMergeable))
			g.Expect(actionsOf(d, ActionMerge)).To(HaveLen(map[bool]int{true: 1, false: 0}[tc.merges]))
			attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
			if tc.merges {
				g.Expect(attention.Status).To(BeEquivalentTo("False"))
				return
			}
			g.Expect(attention).To(And(HaveField("Status", BeEquivalentTo("True")), HaveField("Reason", agentsv1alpha1.ReasonMergeGated),
				HaveField("Message", ContainSubstring(tc.why))))
			g.Expect(s.reaction(agentsv1alpha1.TriggerApprovedAndGreen).Attempts).To(BeZero(), "a gated merge is no attempt")
			g.Expect(eventTypes(d)).NotTo(ContainElement(agentsv1alpha1.EventReactionEscalated))

			opened := tc.pr
			opened.ApprovedAtHead, opened.Checks = true, ChecksEvidence{State: agentsv1alpha1.ChecksPassing, Passed: 1}
			g.Expect(actionsOf(s.stepper(settings)(1, opened), ActionMerge)).To(HaveLen(1), "the merge runs once the gate opens")
		})
	}
}

func TestApprovedAndGreenNotifyOnlyNotifies(t *testing.T) {
	g := NewWithT(t)
	d := Decide(withPR(t0, approvedGreen(shaA)))
	g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty())
	notes := actionsOf(d, ActionNotify)
	g.Expect(notes).To(HaveLen(1))
	g.Expect(notes[0].Priority).To(Equal(agentsv1alpha1.PriorityAction))
	g.Expect(notes[0].Text).To(ContainSubstring("https://github.com/acme/app/pull/12"))
	ev, _ := findEvent(d, agentsv1alpha1.EventMergeReady)
	g.Expect(ev.Priority).To(Equal(agentsv1alpha1.PriorityAction))
	attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention.Status).To(BeEquivalentTo("True"), "a human has to merge")
}

func TestMergeIsNeverDowngraded(t *testing.T) {
	g := NewWithT(t)
	pr := approvedGreen("")
	in := withPR(t0, pr)
	in.Settings = mergeSettings()
	d := Decide(in)
	g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty(), "no head commit to guard the merge with")
	g.Expect(actionsOf(d, ActionNotify)).To(BeEmpty(), "and not silently turned into a notification")
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
}

func TestMergeNeedsEveryCondition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(pr *PullRequestEvidence)
	}{
		{"draft", func(pr *PullRequestEvidence) { pr.Draft = true }},
		{"behind a base that must be up to date", func(pr *PullRequestEvidence) {
			pr.MergeState = agentsv1alpha1.MergeStateBehind
		}},
		{"conflicting", func(pr *PullRequestEvidence) { pr.MergeState = agentsv1alpha1.MergeStateDirty }},
		{"blocked", func(pr *PullRequestEvidence) { pr.MergeState = agentsv1alpha1.MergeStateBlocked }},
		{"unstable: a check the base does not require is not green", func(pr *PullRequestEvidence) { pr.MergeState = agentsv1alpha1.MergeStateUnstable }},
		{"checks pending", func(pr *PullRequestEvidence) { pr.Checks.State = agentsv1alpha1.ChecksPending }},
		{"review required", func(pr *PullRequestEvidence) { pr.ReviewDecision = agentsv1alpha1.ReviewRequired }},
		{"mergeability unknown", func(pr *PullRequestEvidence) { pr.MergeState = agentsv1alpha1.MergeStateUnknown }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			pr := approvedGreen(shaA)
			tc.change(&pr)
			in := withPR(t0, pr)
			in.Settings = mergeSettings()
			d := Decide(in)
			g.Expect(d.Phase).NotTo(Equal(agentsv1alpha1.PhaseMergeable))
			g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty())
		})
	}
}

func TestStuckNotifiesOncePerEpisode(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	in := running()
	in.Now = t0.Add(20 * time.Minute)
	in.Runner.LastActivityTime = t0
	d := s.step(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseStuck))
	notes := actionsOf(d, ActionNotify)
	g.Expect(notes).To(HaveLen(1))
	g.Expect(notes[0]).To(And(HaveField("Priority", agentsv1alpha1.PriorityUrgent), HaveField("Trigger", agentsv1alpha1.TriggerStuck)))
	ev, _ := findEvent(d, agentsv1alpha1.EventSessionStuck)
	g.Expect(ev.Priority).To(Equal(agentsv1alpha1.PriorityUrgent))

	in.Now = t0.Add(40 * time.Minute)
	g.Expect(edge(s.step(in))).To(BeEmpty())

	// Activity resumes: the episode ends; stuck again later notifies again.
	in.Runner.LastActivityTime = in.Now
	g.Expect(s.step(in).Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	in.Now = t0.Add(60 * time.Minute)
	d = s.step(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseStuck))
	g.Expect(actionsOf(d, ActionNotify)).To(HaveLen(1))
}

func TestNeedsInputNotifiesEachQuestion(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	in := running()
	toNeedsInput(&in)
	d := s.step(in)
	notes := actionsOf(d, ActionNotify)
	g.Expect(notes).To(HaveLen(1))
	g.Expect(notes[0].Priority).To(Equal(agentsv1alpha1.PriorityUrgent))
	g.Expect(notes[0].Text).To(ContainSubstring("keep the old URL"))

	in.Now = in.Now.Add(time.Minute)
	g.Expect(edge(s.step(in))).To(BeEmpty())

	in.Runner.Question = "Which database should the tests use?"
	in.Now = in.Now.Add(time.Minute)
	g.Expect(actionsOf(s.step(in), ActionNotify)).To(HaveLen(1))
}

func TestNeedsInputCanAnswerForTheHuman(t *testing.T) {
	g := NewWithT(t)
	in := running()
	toNeedsInput(&in)
	in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{agentsv1alpha1.TriggerNeedsInput: {Action: agentsv1alpha1.ReactionSendToAgent}}
	d := Decide(in)
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1))
	g.Expect(sends[0].Text).To(ContainSubstring(`("Should the login page keep the old URL?")`))
}

func TestExitedWithoutPullRequest(t *testing.T) {
	t.Run("a clean exit is Done and notifies at action", func(t *testing.T) {
		g := NewWithT(t)
		in := running()
		in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(0))
		d := Decide(in)
		g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseDone))
		g.Expect(edge(d)).To(ConsistOf(And(HaveField("Type", ActionNotify), HaveField("Trigger", agentsv1alpha1.TriggerExited), HaveField("Priority", agentsv1alpha1.PriorityAction))))
		g.Expect(eventTypes(d)).To(Equal([]agentsv1alpha1.EventType{agentsv1alpha1.EventSessionExited, agentsv1alpha1.EventSessionDone}))
	})
	t.Run("a failed exit is Errored and notifies once, urgently", func(t *testing.T) {
		g := NewWithT(t)
		in := running()
		in.Runner.State, in.Runner.ExitCode = agentsv1alpha1.ActivityExited, ptr(int32(2))
		d := Decide(in)
		g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseErrored))
		g.Expect(edge(d)).To(ConsistOf(And(HaveField("Type", ActionNotify), HaveField("Trigger", agentsv1alpha1.TriggerExited), HaveField("Priority", agentsv1alpha1.PriorityUrgent))))
		ev, _ := findEvent(d, agentsv1alpha1.EventSessionErrored)
		g.Expect(ev.Priority).To(Equal(agentsv1alpha1.PriorityUrgent))
	})
	t.Run("an exit without an exit code counts as a failure", func(t *testing.T) {
		g := NewWithT(t)
		in := running()
		in.Runner.State = agentsv1alpha1.ActivityExited
		g.Expect(Decide(in).Phase).To(Equal(agentsv1alpha1.PhaseErrored))
	})
}

func TestErroredWithoutAReactionStillNotifies(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseSpawning)
	in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodPending, WaitingReason: "InvalidImageName"}
	in.Runner = RunnerEvidence{}
	in.Previous.Grace = graceFull(signalContainer, in.Now)
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseErrored))
	g.Expect(edge(d)).To(ConsistOf(And(HaveField("Type", ActionNotify), HaveField("Priority", agentsv1alpha1.PriorityUrgent))))
	stalled, ok := cond(d, agentsv1alpha1.ConditionStalled)
	g.Expect(ok).To(BeTrue())
	g.Expect(stalled.Reason).To(Equal(agentsv1alpha1.ReasonImagePullFailed))
}

func TestReactionNoneStillShowsThePhase(t *testing.T) {
	g := NewWithT(t)
	in := withPR(t0, failing(openPR(), shaA))
	in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionNone}}
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed))
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(d.Reactions).To(BeEmpty())
	attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention).To(And(HaveField("Status", BeEquivalentTo("True")), HaveField("Reason", agentsv1alpha1.ReasonAwaitingHuman)))
}

func TestCIFailureNotifyCountsAttemptsAndEscalates(t *testing.T) {
	g := NewWithT(t)
	settings := Settings{Reactions: map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionNotify, Retries: ptr(int32(1)), Priority: agentsv1alpha1.PriorityInfo},
	}}
	s := newSim(running().Previous)
	step := s.stepper(settings)
	d := step(0, failing(openPR(), shaA))
	g.Expect(actionsOf(d, ActionNotify)).To(ConsistOf(HaveField("Priority", agentsv1alpha1.PriorityInfo)))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(BeEmpty())
	d = step(5, failing(openPR(), shaB))
	g.Expect(actionsOf(d, ActionEscalate)).To(HaveLen(1))
}

func TestReactionsWaitWhileAHigherRuleOwnsThePhase(t *testing.T) {
	g := NewWithT(t)
	in := withPR(t0, failing(openPR(), shaA))
	toNeedsInput(&in)
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseNeedsInput))
	g.Expect(actionsOf(d, ActionSendToAgent)).To(BeEmpty(), "the agent's question comes first")
	g.Expect(actionsOf(d, ActionNotify)).To(ConsistOf(HaveField("Trigger", agentsv1alpha1.TriggerNeedsInput)))
}

func TestUserMessagesAreQueuedOnceInOrder(t *testing.T) {
	g := NewWithT(t)
	in := running()
	in.Spec.Messages = []agentsv1alpha1.Message{{ID: "first", Text: "Also update the docs."}, {ID: "second", Text: "And the changelog."}}
	s := newSim(in.Previous)
	d := s.step(in)
	g.Expect(edge(d)).To(HaveExactElements(
		And(HaveField("ID", "first"), HaveField("Source", agentsv1alpha1.MessageFromUser), HaveField("Text", "Also update the docs.")),
		HaveField("ID", "second"),
	))
	g.Expect(s.status.Messages.Pending).To(HaveLen(2))
	g.Expect(edge(s.step(in))).To(BeEmpty())

	// Delivered ones are not queued again either.
	s.status.Messages.Pending = nil
	s.status.Messages.Delivered = []string{"first", "second"}
	g.Expect(edge(s.step(in))).To(BeEmpty())
}

func TestUserMessagesWaitForRoomAndForARunningSession(t *testing.T) {
	g := NewWithT(t)
	in := running()
	for i := range maxPending {
		in.Previous.Messages.Pending = append(in.Previous.Messages.Pending, agentsv1alpha1.OutboxMessage{ID: fmt.Sprintf("m%d", i), Source: agentsv1alpha1.MessageFromUser})
	}
	in.Spec.Messages = []agentsv1alpha1.Message{{ID: "late", Text: "x"}}
	g.Expect(edge(Decide(in))).To(BeEmpty(), "the outbox is full: it waits, it is not dropped")

	in = from(agentsv1alpha1.PhaseDone)
	in.Spec.Messages = []agentsv1alpha1.Message{{ID: "late", Text: "x"}}
	g.Expect(edge(Decide(in))).To(BeEmpty(), "nobody reads messages in a terminal phase")
}

func TestCustomTemplate(t *testing.T) {
	g := NewWithT(t)
	in := withPR(t0, failing(openPR(), shaA))
	in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionSendToAgent, Message: "Fix {{range .Checks}}{{.Name}} {{end}}on #{{.PullRequest.Number}}"},
	}
	d := Decide(in)
	g.Expect(actionsOf(d, ActionSendToAgent)[0].Text).To(Equal("Fix unit-tests on #12"))
}

func TestBrokenTemplateFallsBackLoudly(t *testing.T) {
	g := NewWithT(t)
	in := withPR(t0, failing(openPR(), shaA))
	// Valid at parse time, fails at run time (index out of range on this data).
	in.Settings.Reactions = map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed: {Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{index .Checks 5}}"},
	}
	d := Decide(in)
	sends := actionsOf(d, ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1), "the agent still gets the failure")
	g.Expect(sends[0].Text).To(HavePrefix("CI failed on pull request #12"))
	ev, ok := findEvent(d, agentsv1alpha1.EventReactionTemplateFailed)
	g.Expect(ok).To(BeTrue())
	g.Expect(ev.Reason).To(Equal(agentsv1alpha1.ReasonTemplateFailed))
}

func TestBuiltinTemplatesRender(t *testing.T) {
	for _, trig := range Triggers {
		t.Run(string(trig), func(t *testing.T) {
			g := NewWithT(t)
			text, err := renderMessage(trig, "", sampleData(trig))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.TrimSpace(text)).NotTo(BeEmpty())
			g.Expect(text).NotTo(ContainSubstring("<no value>"))
		})
	}
}

func TestLongMessagesAreClipped(t *testing.T) {
	g := NewWithT(t)
	pr := failing(openPR(), shaA)
	for i := range 30 {
		pr.Checks.FailedChecks = append(pr.Checks.FailedChecks, FailedCheck{Name: fmt.Sprintf("job-%d", i), LogExcerpt: strings.Repeat("é log line\n", 2000)})
	}
	d := Decide(withPR(t0, pr))
	text := actionsOf(d, ActionSendToAgent)[0].Text
	g.Expect(len(text)).To(BeNumerically("<=", MaxMessageBytes))
	g.Expect(text).To(HaveSuffix("…(truncated)"))
	g.Expect(strings.ToValidUTF8(text, "?")).To(Equal(text))
}

func TestReactionMessageWaitsForRoom(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(withPR(t0, failing(openPR(), shaA)))
	for i := range maxPending - 1 {
		s.status.Messages.Pending = append(s.status.Messages.Pending, agentsv1alpha1.OutboxMessage{ID: fmt.Sprintf("m%d", i), Source: agentsv1alpha1.MessageFromUser})
	}
	full := withPR(t0.Add(5*time.Minute), failing(openPR(), shaB))
	d := s.step(full)
	g.Expect(edge(d)).To(BeEmpty(), "no room in status.messages.pending")
	g.Expect(eventTypes(d)).NotTo(ContainElement(agentsv1alpha1.EventCIFixFailed), "nothing is said about an attempt that did not happen")
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed).Attempts).To(Equal(int32(1)))
	checkIdempotent(t, func() Input { in := full; in.Previous = *s.status.DeepCopy(); return in }())

	s.status.Messages.Pending = s.status.Messages.Pending[:10]
	d = s.step(full)
	g.Expect(actionsOf(d, ActionSendToAgent)).To(HaveLen(1))
	g.Expect(eventTypes(d)).To(ContainElement(agentsv1alpha1.EventCIFixFailed))
	g.Expect(s.reaction(agentsv1alpha1.TriggerCIFailed).Attempts).To(Equal(int32(2)))
}

// TestAnotherPullRequestsMergeIsNotOurs: merged is read from the session's own pull request.
// Another pull request merging into the base only moves ours behind it.
func TestAnotherPullRequestsMergeIsNotOurs(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	step := s.stepper(mergeSettings())
	green := approvedGreen(shaA)
	green.MergeState = agentsv1alpha1.MergeStateBlocked // the protection waits for something else
	g.Expect(step(0, green).Phase).To(Equal(agentsv1alpha1.PhaseApproved))

	// Someone else's pull request merged into main: ours is now behind it, and still open.
	behind := green
	behind.MergeState = agentsv1alpha1.MergeStateBehind
	d := step(1, behind)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseApproved))
	g.Expect(eventTypes(d)).NotTo(ContainElements(agentsv1alpha1.EventPRMerged, agentsv1alpha1.EventMergeCompleted))
	g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty(), "behind a base that must be up to date")
	mergeable, _ := cond(d, agentsv1alpha1.ConditionMergeable)
	g.Expect(mergeable.Reason).To(Equal(agentsv1alpha1.ReasonBehindBase))
	g.Expect(s.status.PullRequest.State).To(Equal(agentsv1alpha1.PullRequestOpen))
}

// The agent pushes its fix; the review that requested changes stays on the pull request until the
// reviewer looks again. The new head must not send the same comments twice (a webhook shows the
// new head at once, before any re-review).
func TestChangesRequestedIsNotSentAgainForANewHead(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	g.Expect(actionsOf(s.step(withPR(at(0), threadsPR(thread1))), ActionSendToAgent)).To(HaveLen(1))
	moved := threadsPR(thread1)
	moved.HeadSHA = shaB
	g.Expect(actionsOf(s.step(withPR(at(1), moved)), ActionSendToAgent)).To(BeEmpty(), "the same comments at the new head")
	moved.Threads = append(moved.Threads, thread2)
	sends := actionsOf(s.step(withPR(at(2), moved)), ActionSendToAgent)
	g.Expect(sends).To(HaveLen(1), "a new thread is news at any head")
	g.Expect(sends[0].Text).To(ContainSubstring("PRRT_2"))
}

// A human's approval through Kubernetes (Argo CD's approve action) merges the head it names,
// under the Notify default, once; it does not carry over to a new head, and checks still gate.
func TestHumanApprovalMergesTheApprovedHead(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(m int, pr PullRequestEvidence, approved string) Decision {
		in := withPR(t0.Add(time.Duration(m)*time.Minute), pr)
		in.Spec.ApprovedHead = approved
		return s.step(in)
	}
	d := at(0, approvedGreen(shaA), "")
	g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty(), "Notify by default: a human merges")
	g.Expect(actionsOf(d, ActionNotify)).To(HaveLen(1))

	g.Expect(actionsOf(at(1, approvedGreen(shaA), shaB), ActionMerge)).To(BeEmpty(), "an approval of another head merges nothing")

	d = at(2, approvedGreen(shaA), shaA)
	g.Expect(actionsOf(d, ActionMerge)).To(ConsistOf(And(HaveField("ExpectedHeadSHA", shaA), HaveField("MergeMethod", DefaultMergeMethod))))
	attention, _ := cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention.Status).To(BeEquivalentTo("False"), "approved: no human is asked to merge any more")
	g.Expect(actionsOf(at(3, approvedGreen(shaA), shaA), ActionMerge)).To(BeEmpty(), "the merge is asked once")

	// A push after the approval: the new head is not approved.
	g.Expect(actionsOf(at(4, approvedGreen(shaB), shaA), ActionMerge)).To(BeEmpty())

	// The approval does not open the checks gate.
	unchecked := approvedGreen(shaB)
	unchecked.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksNone}
	s2 := newSim(running().Previous)
	in := withPR(t0, unchecked)
	in.Spec.ApprovedHead = shaB
	d = s2.step(in)
	g.Expect(actionsOf(d, ActionMerge)).To(BeEmpty())
	attention, _ = cond(d, agentsv1alpha1.ConditionNeedsAttention)
	g.Expect(attention.Reason).To(Equal(agentsv1alpha1.ReasonMergeGated))
}
