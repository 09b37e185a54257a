package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func stalledCondition(d Decision) *metav1.Condition {
	for i := range d.Conditions {
		if d.Conditions[i].Type == agentsv1alpha1.ConditionStalled {
			return &d.Conditions[i]
		}
	}
	return nil
}

// A pod that does not start within activity.spawnDeadline of its creation makes the session
// Stalled, saying what holds it up; before the deadline the session waits and is due again at
// it; a pod whose runner reported has started, whatever its age.
func TestSpawnDeadline(t *testing.T) {
	const unschedulable = "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	pending := func(age time.Duration, mutate func(*PodEvidence)) func(in *Input) {
		return func(in *Input) {
			in.Runner = RunnerEvidence{}
			in.Pod = PodEvidence{Exists: true, UID: "pod-1", Phase: PodPending, Created: in.Now.Add(-age)}
			if mutate != nil {
				mutate(&in.Pod)
			}
		}
	}
	for _, tc := range []struct {
		name     string
		setup    func(in *Input)
		settings func(s *Settings)
		reason   string
		stalled  bool
		message  []string
		requeue  time.Duration // the decision is due again within this, 0: not asserted
	}{
		{name: "an unschedulable pod says why, before the deadline", setup: pending(3*time.Minute, func(p *PodEvidence) { p.Unschedulable = unschedulable }),
			reason: agentsv1alpha1.ReasonPodUnschedulable, message: []string{"cannot be scheduled", "3 Insufficient memory"}, requeue: 7 * time.Minute},
		{name: "an unschedulable pod past the deadline is Stalled with the scheduler's message", setup: pending(11*time.Minute, func(p *PodEvidence) { p.Unschedulable = unschedulable }),
			reason: agentsv1alpha1.ReasonSpawnDeadlineExceeded, stalled: true, message: []string{"spawnDeadline 10m0s", "3 Insufficient memory"}},
		{name: "a pod whose prepare never finishes is Stalled at the deadline", setup: pending(10*time.Minute, nil),
			reason: agentsv1alpha1.ReasonSpawnDeadlineExceeded, stalled: true, message: []string{"has not started within spawnDeadline"}},
		{name: "a container still being created past a shorter deadline is Stalled with the kubelet's words",
			setup: pending(2*time.Minute, func(p *PodEvidence) {
				p.WaitingReason, p.WaitingMessage = "ContainerCreating", "attaching volume pvc-1"
			}),
			settings: func(s *Settings) { s.SpawnDeadline = time.Minute },
			reason:   agentsv1alpha1.ReasonSpawnDeadlineExceeded, stalled: true, message: []string{"spawnDeadline 1m0s", "ContainerCreating", "attaching volume pvc-1"}},
		{name: "a pod whose runner reported has started, however old it is", setup: func(in *Input) {
			in.Pod.Created = in.Now.Add(-3 * time.Hour)
		}, reason: agentsv1alpha1.ReasonAgentActive},
		{name: "a pod without a creation time is not judged by age", setup: pending(0, func(p *PodEvidence) { p.Created = time.Time{} }),
			reason: agentsv1alpha1.ReasonSpawning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(agentsv1alpha1.PhaseSpawning)
			tc.setup(&in)
			if tc.settings != nil {
				tc.settings(&in.Settings)
			}
			d := Decide(in)
			g.Expect(d.Reason).To(Equal(tc.reason), d.Message)
			for _, m := range tc.message {
				g.Expect(d.Message).To(ContainSubstring(m))
			}
			c := stalledCondition(d)
			g.Expect(c != nil && c.Status == metav1.ConditionTrue).To(Equal(tc.stalled), "Stalled: %+v", c)
			if tc.stalled {
				g.Expect(c.Reason).To(Equal(agentsv1alpha1.ReasonSpawnDeadlineExceeded))
				g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning), "the pod is kept; the session may still start")
			}
			if tc.requeue > 0 {
				g.Expect(d.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", tc.requeue)))
			}
		})
	}
}

// Progress is not stuck: stuckAfter measures the time without agent activity *and* without a
// change of the pull request (a push, a check concluding, a review). An agent quiet while the
// checks of its pushed fix ran is not paged as stuck; silence with nothing moving still is.
func TestProgressIsNotStuck(t *testing.T) {
	quiet := func(in *Input) { in.Runner.LastActivityTime = in.Now.Add(-11 * time.Minute) }
	for _, tc := range []struct {
		name    string
		setup   func(in *Input)
		want    agentsv1alpha1.SessionPhase
		requeue time.Duration
	}{
		{"quiet, the pull request unchanged for as long: Stuck", func(in *Input) {
			in.PullRequest = openPR()
			quiet(in)
			steady(in, in.Now.Add(-11*time.Minute))
		}, agentsv1alpha1.PhaseStuck, 0},
		{"quiet, but the pull request changed 2m ago (a push, a check): not Stuck, due again when stillness would make it so", func(in *Input) {
			in.PullRequest = openPR()
			quiet(in)
			steady(in, in.Now.Add(-2*time.Minute))
		}, agentsv1alpha1.PhaseReviewPending, 8 * time.Minute},
		{"a pushed fix turning CI green takes a Stuck session out of Stuck", func(in *Input) {
			in.PullRequest = openPR()
			quiet(in)
			steady(in, in.Now.Add(-11*time.Minute))
			in.Previous.Phase = agentsv1alpha1.PhaseStuck
			in.PullRequest.HeadSHA = shaB // the new head, seen now
			in.PullRequest.Checks = ChecksEvidence{State: agentsv1alpha1.ChecksPassing, Passed: 3}
		}, agentsv1alpha1.PhaseReviewPending, 10 * time.Minute},
		{"quiet with no pull request: Stuck", quiet, agentsv1alpha1.PhaseStuck, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(agentsv1alpha1.PhaseWorking)
			in.Runner.State = agentsv1alpha1.ActivityActive
			tc.setup(&in)
			d := Decide(in)
			g.Expect(d.Phase).To(Equal(tc.want), "%s: %s", d.Reason, d.Message)
			if tc.want == agentsv1alpha1.PhaseStuck {
				// When the silence began, not how long it lasts: the message (and so the status)
				// does not change with every reconcile of a stuck session.
				g.Expect(d.Message).To(ContainSubstring("No agent activity or pull request change since " +
					in.Now.Add(-11*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339)))
			}
			if tc.requeue > 0 {
				g.Expect(d.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", tc.requeue)))
			}
		})
	}
}

// A pod being deleted on a lost node is force-deleted (its kubelet never confirms), once; a pod
// being deleted on a live node is left to its kubelet.
func TestTerminatingOnALostNodeIsForced(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseWorking)
	in.Pod.Deleting, in.Pod.NodeLost = true, true
	var force []Action
	for _, a := range Decide(in).Actions {
		if a.Type == ActionDeletePod {
			force = append(force, a)
		}
	}
	g.Expect(force).To(ConsistOf(And(HaveField("Force", true), HaveField("PodUID", in.Pod.UID), HaveField("ID", "pod.forcedelete."+in.Pod.UID))))

	in.Pod.NodeLost = false
	for _, a := range Decide(in).Actions {
		g.Expect(a.Type).NotTo(Equal(ActionDeletePod), "a live node's kubelet finishes the deletion")
	}
}

// TestVolumeHeldElsewhere: a scheduled pod waiting for a ReadWriteOnce volume still attached to
// another node says so in the phase's reason, and the spawn deadline keeps it in its message.
func TestVolumeHeldElsewhere(t *testing.T) {
	g := NewWithT(t)
	in := running()
	in.Pod = PodEvidence{Exists: true, UID: "p2", Phase: PodPending, Created: t0,
		VolumeHeld: "volume pv-1 (claim w, ReadWriteOnce) is still attached to node n1, which has not been Ready for 5m0s"}
	in.Previous.Phase, in.Previous.StartTime = agentsv1alpha1.PhaseSpawning, nil
	in.Now = t0.Add(time.Minute)
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonVolumeAttachedElsewhere))
	g.Expect(d.Message).To(ContainSubstring("still attached to node n1"))
	in.Now = t0.Add(DefaultSpawnDeadline + time.Second)
	d = Decide(in)
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSpawnDeadlineExceeded))
	g.Expect(d.Message).To(ContainSubstring("still attached to node n1"))
}

// TestSilenceDoesNotTick: an idle or stuck session decided again 30 s later (its runner's
// heartbeat brings a reconcile) says the same: the status is not written again for the passing
// of time alone.
func TestSilenceDoesNotTick(t *testing.T) {
	for _, c := range []struct {
		name    string
		silence time.Duration
		phase   agentsv1alpha1.SessionPhase
		reason  string
	}{
		{"idle", 6 * time.Minute, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentIdle},
		{"stuck", 11 * time.Minute, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			in := from(c.phase)
			in.Runner.State = agentsv1alpha1.ActivityActive
			in.Runner.LastActivityTime = in.Now.Add(-c.silence)
			first := Decide(in)
			g.Expect(first.Phase).To(Equal(c.phase), "%s: %s", first.Reason, first.Message)
			g.Expect(first.Reason).To(Equal(c.reason))
			Apply(&in.Previous, first)
			in.Now = in.Now.Add(30 * time.Second)
			again := Decide(in)
			g.Expect(again.Message).To(Equal(first.Message))
			for _, cond := range first.Conditions {
				g.Expect(again.Conditions).To(ContainElement(HaveField("Message", cond.Message)), "condition %s", cond.Type)
			}
		})
	}
}
