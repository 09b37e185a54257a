package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// podGone is a working session whose pod has vanished, observed at now.
func podGone(now time.Time) Input {
	in := running()
	in.Now = now
	in.Pod = PodEvidence{}
	return in
}

func TestOneMissingObservationDoesNotDeclareTheAgentGone(t *testing.T) {
	g := NewWithT(t)
	d := Decide(podGone(t0))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSignalGrace))
	g.Expect(d.Grace).To(Equal(&agentsv1alpha1.GraceStatus{Signal: signalPod, Since: mt(t0), Observations: 1}))
	g.Expect(d.Events).To(BeEmpty())
	g.Expect(edge(d)).To(BeEmpty())
	g.Expect(d.RequeueAfter).To(Equal(40*time.Second), "the next observation slot of 2m/3")
	running, _ := cond(d, agentsv1alpha1.ConditionAgentRunning)
	g.Expect(running.Status).To(BeEquivalentTo("Unknown"))
	rec, _ := cond(d, agentsv1alpha1.ConditionReconciling)
	g.Expect(rec.Reason).To(Equal(agentsv1alpha1.ReasonSignalGrace))
}

func TestGraceNeedsObservationsAndTime(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

	for _, step := range []struct {
		sec   int
		obs   int32
		phase agentsv1alpha1.SessionPhase
	}{
		{0, 1, agentsv1alpha1.PhaseWorking},
		{20, 1, agentsv1alpha1.PhaseWorking}, // same slot: not a new observation
		{40, 2, agentsv1alpha1.PhaseWorking},
		{80, 3, agentsv1alpha1.PhaseWorking}, // enough observations, not enough time
		{100, 3, agentsv1alpha1.PhaseWorking},
	} {
		d := s.step(podGone(at(step.sec)))
		g.Expect(d.Phase).To(Equal(step.phase), "at %ds", step.sec)
		g.Expect(d.Grace.Observations).To(Equal(step.obs), "at %ds", step.sec)
		g.Expect(d.Events).To(BeEmpty(), "at %ds", step.sec)
	}
	d := s.step(podGone(at(120)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
	g.Expect(d.Grace).To(BeNil(), "the grace is spent once the agent is declared gone")
	g.Expect(d.Restored).To(BeTrue(), "a respawn counts in status.restores")
	ev, ok := findEvent(d, agentsv1alpha1.EventSessionKilled)
	g.Expect(ok).To(BeTrue())
	g.Expect(ev).To(And(HaveField("Priority", agentsv1alpha1.PriorityWarning), HaveField("Reason", agentsv1alpha1.ReasonPodMissing)))
	g.Expect(ev.Message).To(ContainSubstring("the agent pod is missing"))
}

func TestGraceBurstCountsOnce(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(podGone(t0))
	for range 10 {
		s.step(podGone(t0.Add(45 * time.Second)))
	}
	g.Expect(s.status.Grace.Observations).To(Equal(int32(2)))
	g.Expect(s.status.Phase).To(Equal(agentsv1alpha1.PhaseWorking))
}

func TestGraceSlidesAfterAPause(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(podGone(t0))
	// The manager was down for ten minutes: that is one observation, not proof.
	d := s.step(podGone(t0.Add(10 * time.Minute)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	g.Expect(d.Grace.Observations).To(Equal(int32(2)))
	g.Expect(d.Grace.Since.Time).To(BeTemporally("==", t0.Add(10*time.Minute-40*time.Second)))
	d = s.step(podGone(t0.Add(10*time.Minute + 40*time.Second)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	d = s.step(podGone(t0.Add(10*time.Minute + 80*time.Second)))
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
}

func TestGraceRestartsWhenTheSignalChangesAndEndsWhenItReturns(t *testing.T) {
	g := NewWithT(t)
	s := newSim(running().Previous)
	s.step(podGone(t0))
	s.step(podGone(t0.Add(40 * time.Second)))
	g.Expect(s.status.Grace.Observations).To(Equal(int32(2)))

	// A new pod runs but its runner has not reported: another signal, a new grace.
	in := running()
	in.Now = t0.Add(80 * time.Second)
	in.Pod.UID = "pod-2"
	d := s.step(in)
	g.Expect(d.Grace).To(Equal(&agentsv1alpha1.GraceStatus{Signal: signalRunner, Since: mt(in.Now), Observations: 1}))

	// It reports: the grace ends.
	in.Runner.PodUID = "pod-2"
	in.Now = t0.Add(90 * time.Second)
	d = s.step(in)
	g.Expect(d.Grace).To(BeNil())
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	g.Expect(d.Events).To(BeEmpty(), "nothing happened as far as anyone can tell")
}

func TestGraceIsConfigurable(t *testing.T) {
	g := NewWithT(t)
	settings := Settings{GracePeriod: 30 * time.Second, GraceObservations: 1}
	s := newSim(running().Previous)
	in := podGone(t0)
	in.Settings = settings
	g.Expect(s.step(in).Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	in.Now = t0.Add(29 * time.Second)
	g.Expect(s.step(in).Phase).To(Equal(agentsv1alpha1.PhaseWorking))
	in.Now = t0.Add(30 * time.Second)
	g.Expect(s.step(in).Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
}

func TestStuckThresholds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		silence time.Duration
		state   agentsv1alpha1.ActivityState
		pr      bool
		want    agentsv1alpha1.SessionPhase
		reason  string
		requeue time.Duration
	}{
		{"active and recent", time.Minute, agentsv1alpha1.ActivityActive, false, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentActive, 9 * time.Minute},
		{"active, idle past idleAfter", 6 * time.Minute, agentsv1alpha1.ActivityActive, false, agentsv1alpha1.PhaseWorking, agentsv1alpha1.ReasonAgentIdle, 4 * time.Minute},
		{"active past stuckAfter", 10 * time.Minute, agentsv1alpha1.ActivityActive, false, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck, 0},
		{"active past stuckAfter with a PR", 10 * time.Minute, agentsv1alpha1.ActivityActive, true, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck, 0},
		{"ready past stuckAfter without a PR", 10 * time.Minute, agentsv1alpha1.ActivityReady, false, agentsv1alpha1.PhaseStuck, agentsv1alpha1.ReasonAgentStuck, 0},
		{"ready for hours with a PR waiting for review", 5 * time.Hour, agentsv1alpha1.ActivityReady, true, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.ReasonReviewRequired, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := running()
			in.Runner.State = tc.state
			in.Runner.LastActivityTime = t0.Add(-tc.silence)
			if tc.pr {
				in.PullRequest = openPR()
				steady(&in, t0.Add(-tc.silence))
			}
			d := Decide(in)
			g.Expect(d.Phase).To(Equal(tc.want))
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.RequeueAfter).To(Equal(tc.requeue))
		})
	}
}

func TestStuckThresholdsAreConfigurable(t *testing.T) {
	g := NewWithT(t)
	in := running()
	in.Settings = Settings{IdleAfter: 30 * time.Second, StuckAfter: 2 * time.Minute}
	in.Runner.LastActivityTime = t0.Add(-2 * time.Minute)
	g.Expect(Decide(in).Phase).To(Equal(agentsv1alpha1.PhaseStuck))
}

// A runner reports as soon as its pod runs: within one grace slot of its agent container's start
// its silence is not a signal (no grace is written into the status of a session that is only
// starting), and the decision is due again at the slot's end; after it, the grace starts.
func TestARunnerHasOneSlotForItsFirstReport(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseSpawning)
	in.Previous.StartTime = nil
	in.Runner = RunnerEvidence{}
	in.Pod.Started = t0.Add(-10 * time.Second)
	d := Decide(in)
	g.Expect(d.Grace).To(BeNil(), "no grace while the runner has its first slot")
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSpawning), d.Message)
	slot := DefaultGracePeriod / time.Duration(DefaultGraceObservations)
	g.Expect(d.RequeueAfter).To(Equal(slot-10*time.Second), "due again when the slot ends")

	in.Now = in.Pod.Started.Add(slot)
	d = Decide(in)
	g.Expect(d.Grace).To(Equal(&agentsv1alpha1.GraceStatus{Signal: signalRunner, Since: mt(in.Now), Observations: 1}))
	g.Expect(d.Reason).To(Equal(agentsv1alpha1.ReasonSignalGrace))
}
