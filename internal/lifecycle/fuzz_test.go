package lifecycle

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// bytes hands out fuzz input; once exhausted it yields zeros.
type bytes struct {
	b []byte
}

func (r *bytes) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func pick[T any](r *bytes, xs ...T) T { return xs[int(r.next())%len(xs)] }

func (r *bytes) chance(n byte) bool { return r.next()%n == 0 }

// fuzzSettings are the Projects a fuzzed session may belong to.
var fuzzSettings = []Settings{
	{},
	mergeSettings(),
	{
		Reactions: map[agentsv1alpha1.ReactionTrigger]Reaction{
			agentsv1alpha1.TriggerCIFailed:         {Action: agentsv1alpha1.ReactionNotify, Retries: ptr(int32(1)), EscalateAfter: 3 * time.Minute},
			agentsv1alpha1.TriggerChangesRequested: {Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(2))},
			agentsv1alpha1.TriggerMergeConflicts:   {Action: agentsv1alpha1.ReactionNone},
			agentsv1alpha1.TriggerApprovedAndGreen: {Action: agentsv1alpha1.ReactionMerge, Retries: ptr(int32(0))},
			agentsv1alpha1.TriggerStuck:            {Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 2 * time.Minute},
			agentsv1alpha1.TriggerNeedsInput:       {Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{.Question}} {{index .Checks 2}}"},
		},
		IdleAfter: time.Minute, StuckAfter: 3 * time.Minute, GracePeriod: 30 * time.Second, GraceObservations: 2,
	},
}

// fuzzInput turns bytes into the evidence of one reconcile at now.
func fuzzInput(r *bytes, now time.Time, settings Settings, desired agentsv1alpha1.SessionState, limits SpecEvidence) Input {
	in := Input{Now: now, Generation: int64(1 + r.next()%3), Settings: settings}
	in.Spec = SpecEvidence{State: desired, Admitted: !r.chance(5), MaxDuration: limits.MaxDuration, MaxTurns: limits.MaxTurns, MaxCostUSD: limits.MaxCostUSD,
		MaxRepeatedFailures: limits.MaxRepeatedFailures, MaxUnchangedTurns: limits.MaxUnchangedTurns}
	if r.chance(6) {
		// The Project's budget is spent for now.
		in.Spec.Budget = BudgetEvidence{Exhausted: "the daily budget of $5 is spent: $5.2", FinishTurn: !r.chance(3), ResetTime: now.Add(time.Hour)}
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if r.chance(3) {
			in.Spec.Messages = append(in.Spec.Messages, agentsv1alpha1.Message{ID: id, Text: "please " + id})
		}
	}
	in.Workspace = pick(r,
		WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeReady}, WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeReady},
		WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeReady}, WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeReady},
		WorkspaceEvidence{Phase: agentsv1alpha1.WorktreePending}, WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeFailed, Message: "x"},
		WorkspaceEvidence{Phase: agentsv1alpha1.WorktreeMissing}, WorkspaceEvidence{NotFound: true}, WorkspaceEvidence{})

	if !r.chance(6) {
		in.Pod = PodEvidence{
			Exists: true, UID: pick(r, "pod-1", "pod-1", "pod-2", ""),
			Phase:            pick(r, PodRunning, PodRunning, PodRunning, PodPending, PodSucceeded, PodFailed, PodUnknown),
			ContainerRunning: !r.chance(4),
			Deleting:         r.chance(10), NodeLost: r.chance(12),
			Reason:        pick(r, "", "", "", "Evicted"),
			WaitingReason: pick(r, "", "", "", "", "ImagePullBackOff", "CrashLoopBackOff", "ContainerCreating"),
			Restarts:      int32(r.next() % 4),
		}
		if r.chance(3) {
			in.Pod.Terminated = &ContainerExit{ExitCode: pick(r, int32(0), 1, 137), Reason: pick(r, "", "OOMKilled", "Completed")}
		}
		if r.chance(8) {
			// What holds a pending pod up: the scheduler, or a volume attached to another node.
			in.Pod.Unschedulable = pick(r, "", "0/3 nodes are available")
			in.Pod.VolumeHeld = pick(r, "", "volume pv-1 (claim w, ReadWriteOnce) is still attached to node n1")
		}
	}
	if !r.chance(5) {
		in.Runner = RunnerEvidence{
			Reported: true, PodUID: pick(r, "pod-1", "pod-1", "pod-2", ""),
			ReportTime: now.Add(-time.Duration(r.next()%8) * time.Minute),
			State: pick(r, agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityReady, agentsv1alpha1.ActivityIdle,
				agentsv1alpha1.ActivityWaitingForInput, agentsv1alpha1.ActivityBlocked, agentsv1alpha1.ActivityExited, ""),
			LastActivityTime:  now.Add(-time.Duration(r.next()%32) * time.Minute),
			Question:          pick(r, "", "Which API?", "Keep the old flag?"),
			ExitCode:          pick(r, (*int32)(nil), ptr(int32(0)), ptr(int32(1))),
			PullRequestNumber: pick(r, int64(0), 0, 12),
			AgentSessionID:    "conv",
		}
		if r.chance(2) {
			in.Runner.Usage = &agentsv1alpha1.UsageStatus{Turns: int32(r.next() % 5)}
			if r.chance(2) {
				in.Runner.Usage.Source, in.Runner.Usage.CostUSD = agentsv1alpha1.UsageFromProxy, pick(r, "0.5", "1.5", "3")
			}
		}
		if r.chance(4) {
			in.Runner.Loop = LoopEvidence{RepeatedFailures: int32(r.next() % 5), FailingCall: "Bash: make", UnchangedTurns: int32(r.next() % 4)}
		}
	}

	pr := PullRequestEvidence{Observed: !r.chance(6), Exists: r.chance(2)}
	if pr.Exists {
		pr.Number = pick(r, int64(12), 12, 12, 13)
		pr.URL = "https://github.com/acme/app/pull/12"
		// Merged and closed end most sequences, so they come rarely.
		pr.State = pick(r, agentsv1alpha1.PullRequestOpen, "")
		if r.chance(25) {
			pr.State = pick(r, agentsv1alpha1.PullRequestClosed, agentsv1alpha1.PullRequestMerged)
		}
		pr.Draft = r.chance(8)
		pr.HeadSHA = pick(r, shaA, shaA, shaB, shaC, shaD, "")
		pr.HeadBranch, pr.BaseBranch = "feature", "main"
		pr.MergeState = pick(r, agentsv1alpha1.MergeStateClean, agentsv1alpha1.MergeStateClean, agentsv1alpha1.MergeStateBehind, agentsv1alpha1.MergeStateBlocked,
			agentsv1alpha1.MergeStateDirty, agentsv1alpha1.MergeStateUnstable, agentsv1alpha1.MergeStateDraft, agentsv1alpha1.MergeStateUnknown, "")
		pr.ReviewDecision = pick(r, agentsv1alpha1.ReviewApproved, agentsv1alpha1.ReviewApproved, agentsv1alpha1.ReviewChangesRequested,
			agentsv1alpha1.ReviewRequired, agentsv1alpha1.ReviewNone, "")
		for _, th := range []ReviewThread{thread1, thread2, thread3} {
			if r.chance(4) {
				pr.Threads = append(pr.Threads, th)
			}
		}
		if r.chance(6) {
			pr.ChangeRequests = []Review{{ID: "R1", Author: "carol", Body: "no"}}
		}
		// The conversation: the pool's comments made by now, one sometimes deleted since.
		for i, c := range fuzzComments {
			if !c.CreatedAt.After(now) && !r.chance(10) {
				pr.Comments = append(pr.Comments, fuzzComments[i])
			}
		}
		switch pick(r, agentsv1alpha1.ChecksPassing, agentsv1alpha1.ChecksFailing, agentsv1alpha1.ChecksFailing, agentsv1alpha1.ChecksPending, agentsv1alpha1.ChecksNone, "") {
		case agentsv1alpha1.ChecksFailing:
			pr = failing(pr, pr.HeadSHA)
		case agentsv1alpha1.ChecksPassing:
			pr = passing(pr, pr.HeadSHA)
		case agentsv1alpha1.ChecksPending:
			pr = pending(pr, pr.HeadSHA)
		case agentsv1alpha1.ChecksNone:
			pr.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksNone}
		}
	}
	in.PullRequest = pr
	if r.chance(30) {
		in.Issue = IssueEvidence{ID: "42", Closed: true, State: "closed"}
	}
	if r.chance(40) {
		in.Spec.Deleting, in.Spec.ClosePullRequestOnDelete = true, r.chance(2)
	}
	if r.chance(15) {
		in.Workspace.HeldBy = "another-session"
	}
	return in
}

var reasonRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

type episodeKey struct {
	trigger agentsv1alpha1.ReactionTrigger
	episode string
	start   string
}

func startOf(r agentsv1alpha1.ReactionStatus) string {
	if r.EpisodeStartTime == nil {
		return ""
	}
	return r.EpisodeStartTime.UTC().Format(time.RFC3339)
}

// fuzzComments is the conversation of every sequence: two comments share an instant, and they
// appear as time passes.
var fuzzComments = []Comment{
	{ID: "IC_1", Author: "alice", Body: "Why a map?", URL: "https://example.com/c/1", CreatedAt: t0.Add(time.Minute), Question: true},
	{ID: "IC_2", Author: "bob", Body: "Add a test.", URL: "https://example.com/c/2", CreatedAt: t0.Add(3 * time.Minute)},
	{ID: "IC_3", Author: "bot[bot]", Body: "2 findings", URL: "https://example.com/c/3", CreatedAt: t0.Add(3 * time.Minute), Review: true},
	{ID: "IC_4", Author: "alice", Body: "Thanks!", URL: "https://example.com/c/4", CreatedAt: t0.Add(9 * time.Minute)},
}

// runSequence feeds a random sequence of evidence to the engine, as a controller would (status
// written, read back, messages sometimes delivered), and checks the engine's invariants after
// every step.
func runSequence(t *testing.T, data []byte) {
	r := &bytes{b: data}
	settings := fuzzSettings[int(r.next())%len(fuzzSettings)]
	status := agentsv1alpha1.AgentSessionStatus{}
	now := t0
	desired := agentsv1alpha1.SessionRunning
	// The session's limits (spec.limits over the Project's) hold for the whole sequence.
	limits := SpecEvidence{
		MaxDuration:         pick(r, time.Duration(0), 0, 10*time.Minute, time.Hour),
		MaxTurns:            pick(r, int32(0), 0, 1, 3),
		MaxCostUSD:          pick(r, 0.0, 0, 0, 1.5),
		MaxRepeatedFailures: pick(r, int32(0), 0, 3),
		MaxUnchangedTurns:   pick(r, int32(0), 0, 2),
	}
	escalated := map[episodeKey]bool{}
	merged := map[string]bool{}
	forwarded := map[string]bool{}
	// The merge runner's record, and the heads whose merge may be asked for again: its record
	// was lost (a manager restart) or says to retry.
	var merge MergeEvidence
	askAgain := map[string]bool{}

	for step := 0; step < 60 && len(r.b) > 0; step++ {
		now = now.Add(time.Duration(r.next()%48) * 5 * time.Second)
		if r.chance(12) {
			// The user flips the desired state now and then.
			if desired == agentsv1alpha1.SessionRunning {
				desired = agentsv1alpha1.SessionStopped
			} else {
				desired = agentsv1alpha1.SessionRunning
			}
		}
		if merge.Outcome == MergeInFlight {
			switch r.next() % 6 {
			case 0:
				merge.Outcome = MergeSucceeded
			case 1:
				merge.Outcome, merge.RetryAt, merge.Error = MergeRetrying, now.Add(30*time.Second), "forge unavailable (HTTP 502)"
				askAgain[merge.HeadSHA] = true
			case 2:
				merge.Outcome, merge.Error = MergeRefused, "not mergeable (HTTP 405)"
			case 3:
				merge.Outcome = MergeHeadMoved
			case 4:
				// The manager restarted: its record is gone.
				askAgain[merge.HeadSHA], merge = true, MergeEvidence{}
			}
		}
		in := fuzzInput(r, now, settings, desired, limits)
		in.Previous = *status.DeepCopy()
		in.Merge = merge

		d := Decide(in)
		if again := Decide(in); !reflect.DeepEqual(d, again) {
			t.Fatalf("step %d: the same input gave two decisions:\n%+v\n%+v", step, d, again)
		}

		prev := status.Phase
		if !Allowed(prev, d.Phase) {
			t.Fatalf("step %d: %q -> %q is not in the transition table (%s: %s)", step, prev, d.Phase, d.Reason, d.Message)
		}
		restore := prev == agentsv1alpha1.PhaseStopped && desired == agentsv1alpha1.SessionRunning
		if prev.IsTerminal() && !d.Phase.IsTerminal() && !restore {
			t.Fatalf("step %d: terminal %s regressed to %s without a restore", step, prev, d.Phase)
		}
		if prev == agentsv1alpha1.PhaseMerged && d.Phase != agentsv1alpha1.PhaseMerged {
			t.Fatalf("step %d: Merged left for %s", step, d.Phase)
		}
		for _, nr := range d.Reactions {
			for _, pr := range status.Reactions {
				if pr.Trigger == nr.Trigger && pr.Episode != "" && pr.Episode == nr.Episode && startOf(pr) == startOf(nr) && nr.Attempts < pr.Attempts {
					t.Fatalf("step %d: %s attempts went from %d to %d within episode %s", step, nr.Trigger, pr.Attempts, nr.Attempts, nr.Episode)
				}
			}
			if len(nr.Episode) > maxKeyLen || len(nr.LastAttemptKey) > maxKeyLen {
				t.Fatalf("step %d: %s bookkeeping exceeds the status limits", step, nr.Trigger)
			}
		}
		if len(d.Reactions) > len(Triggers) {
			t.Fatalf("step %d: %d reaction entries", step, len(d.Reactions))
		}
		for _, a := range d.Actions {
			if a.Type == ActionCreatePod && in.Workspace.HeldBy != "" {
				t.Fatalf("step %d: a pod for a session whose Worktree %s holds", step, in.Workspace.HeldBy)
			}
			closeAsked := in.Spec.Deleting && in.Spec.ClosePullRequestOnDelete
			if in.Spec.Deleting && a.Type != ActionClosePullRequest || a.Type == ActionClosePullRequest && !closeAsked {
				t.Fatalf("step %d: %s asked (deleting %v, close on delete %v)", step, a.Type, in.Spec.Deleting, in.Spec.ClosePullRequestOnDelete)
			}
		}
		// A limit that ends the session tells a human once, at the transition, and only then.
		limitNotes := 0
		for _, a := range d.Actions {
			if a.Type == ActionNotify && a.Event == agentsv1alpha1.EventSessionDone {
				limitNotes++
			}
		}
		if ended := d.Phase == agentsv1alpha1.PhaseDone && limitReason(d.Reason) && prev != agentsv1alpha1.PhaseDone && !in.Spec.Deleting; limitNotes != map[bool]int{true: 1}[ended] {
			t.Fatalf("step %d: %d limit notifications for %s -> %s (%s)", step, limitNotes, prev, d.Phase, d.Reason)
		}
		if limitReason(d.Reason) && (limits.MaxDuration == 0 && d.Reason == agentsv1alpha1.ReasonMaxDurationReached ||
			limits.MaxTurns == 0 && d.Reason == agentsv1alpha1.ReasonMaxTurnsReached || limits.MaxCostUSD == 0 && d.Reason == agentsv1alpha1.ReasonMaxCostReached ||
			limits.MaxRepeatedFailures == 0 && limits.MaxUnchangedTurns == 0 && d.Reason == agentsv1alpha1.ReasonLoopDetected) {
			t.Fatalf("step %d: %s without that limit", step, d.Reason)
		}
		for _, a := range d.Actions {
			if a.Type == ActionSendToAgent && a.Trigger == agentsv1alpha1.TriggerCommented {
				for _, c := range fuzzComments {
					if strings.Contains(a.Text, c.URL+")") {
						if forwarded[c.ID] {
							t.Fatalf("step %d: comment %s forwarded twice", step, c.ID)
						}
						forwarded[c.ID] = true
					}
				}
			}
		}
		for _, a := range d.Actions {
			switch a.Type {
			case ActionEscalate:
				var st agentsv1alpha1.ReactionStatus
				for _, x := range d.Reactions {
					if x.Trigger == a.Trigger {
						st = x
					}
				}
				k := episodeKey{a.Trigger, st.Episode, startOf(st)}
				if escalated[k] {
					t.Fatalf("step %d: %s escalated twice in episode %s", step, a.Trigger, st.Episode)
				}
				escalated[k] = true
				if a.Priority != agentsv1alpha1.PriorityUrgent {
					t.Fatalf("step %d: escalation at %s", step, a.Priority)
				}
			case ActionMerge:
				if a.ExpectedHeadSHA == "" || merged[a.ExpectedHeadSHA] && !askAgain[a.ExpectedHeadSHA] {
					t.Fatalf("step %d: merge of head %q requested twice (the runner's record: %+v) or unguarded", step, a.ExpectedHeadSHA, merge)
				}
				merged[a.ExpectedHeadSHA], askAgain[a.ExpectedHeadSHA] = true, false
			case ActionSendToAgent:
				if len(a.Text) > MaxMessageBytes || len(a.ID) > 128 || a.ID == "" {
					t.Fatalf("step %d: message %q out of bounds", step, a.ID)
				}
			}
		}
		for _, c := range d.Conditions {
			if c.ObservedGeneration != in.Generation {
				t.Fatalf("step %d: condition %s has observedGeneration %d, want %d", step, c.Type, c.ObservedGeneration, in.Generation)
			}
			if !reasonRE.MatchString(c.Reason) {
				t.Fatalf("step %d: condition %s has reason %q", step, c.Type, c.Reason)
			}
			if (c.Type == agentsv1alpha1.ConditionReconciling || c.Type == agentsv1alpha1.ConditionStalled) && c.Status != metav1.ConditionTrue {
				t.Fatalf("step %d: %s present while %s", step, c.Type, c.Status)
			}
		}
		for _, e := range d.Events {
			if !reasonRE.MatchString(e.Reason) || e.Priority == "" {
				t.Fatalf("step %d: event %s has reason %q priority %q", step, e.Type, e.Reason, e.Priority)
			}
		}

		Apply(&status, d)
		status = roundTrip(t, status)
		merge = ranActions(merge, d)
		checkIdempotent(t, func() Input { x := in; x.Previous = *status.DeepCopy(); x.Merge = merge; return x }())
		if len(status.Messages.Pending) > maxPending {
			t.Fatalf("step %d: %d pending messages", step, len(status.Messages.Pending))
		}
		if r.chance(2) && len(status.Messages.Pending) > 0 {
			// The controller delivered the oldest message.
			status.Messages.Delivered = append(status.Messages.Delivered, status.Messages.Pending[0].ID)
			status.Messages.Pending = status.Messages.Pending[1:]
		}
	}
}

// FuzzLifecycle checks the engine's invariants over random evidence sequences: no panic; the
// same input gives the same decision; only transitions of the table happen; terminal phases
// stay terminal unless restored; attempts never decrease within an episode; an episode
// escalates at most once and a head commit is merged at most once; a decision is a fixed
// point. The seed corpus runs with every `go test`; `go test -fuzz FuzzLifecycle` explores.
func FuzzLifecycle(f *testing.F) {
	// Hand-written seeds walk the main paths; random ones add breadth.
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{1, 200, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7})
	f.Add([]byte{2, 255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		b := make([]byte, 200+rng.IntN(1800))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(runSequence)
}
