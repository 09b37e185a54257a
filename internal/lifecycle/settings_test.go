package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestResolveSettingsDefaults(t *testing.T) {
	g := NewWithT(t)
	s, err := ResolveSettings(nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Reactions).To(Equal(DefaultReactions()))
	g.Expect(s.IdleAfter).To(Equal(5 * time.Minute))
	g.Expect(s.StuckAfter).To(Equal(10 * time.Minute))
	g.Expect(s.GracePeriod).To(Equal(2 * time.Minute))
	g.Expect(s.GraceObservations).To(Equal(int32(3)))
	g.Expect(Settings{}.withDefaults()).To(Equal(s), "the zero Settings are the defaults")

	defs := DefaultReactions()
	g.Expect(defs[agentsv1alpha1.TriggerCIFailed]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(2))}))
	g.Expect(defs[agentsv1alpha1.TriggerChangesRequested]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 30 * time.Minute}))
	g.Expect(defs[agentsv1alpha1.TriggerMergeConflicts]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 15 * time.Minute}))
	for _, trig := range []agentsv1alpha1.ReactionTrigger{agentsv1alpha1.TriggerApprovedAndGreen, agentsv1alpha1.TriggerStuck, agentsv1alpha1.TriggerNeedsInput, agentsv1alpha1.TriggerExited} {
		g.Expect(defs[trig]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionNotify}), string(trig))
	}
	g.Expect(DefaultPriority(agentsv1alpha1.TriggerStuck, false)).To(Equal(agentsv1alpha1.PriorityUrgent))
	g.Expect(DefaultPriority(agentsv1alpha1.TriggerNeedsInput, false)).To(Equal(agentsv1alpha1.PriorityUrgent))
	g.Expect(DefaultPriority(agentsv1alpha1.TriggerApprovedAndGreen, false)).To(Equal(agentsv1alpha1.PriorityAction))
	g.Expect(DefaultPriority(agentsv1alpha1.TriggerCIFailed, false)).To(Equal(agentsv1alpha1.PriorityWarning))
}

func TestResolveSettingsInheritsUnsetFields(t *testing.T) {
	g := NewWithT(t)
	s, err := ResolveSettings(&agentsv1alpha1.ReactionsSpec{
		CIFailed:         &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionNotify, Priority: agentsv1alpha1.PriorityUrgent},
		ChangesRequested: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(4)), Message: "Fix: {{range .Threads}}{{.Body}}{{end}}"},
		ApprovedAndGreen: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge},
		Stuck:            &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionNone},
	}, &agentsv1alpha1.ActivitySpec{
		IdleAfter: &metav1.Duration{Duration: time.Minute}, StuckAfter: &metav1.Duration{Duration: 20 * time.Minute},
		GracePeriod: &metav1.Duration{Duration: 30 * time.Second}, GraceObservations: ptr(int32(5)),
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Reactions[agentsv1alpha1.TriggerCIFailed]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionNotify, Retries: ptr(int32(2)), Priority: agentsv1alpha1.PriorityUrgent}))
	g.Expect(s.Reactions[agentsv1alpha1.TriggerChangesRequested]).To(Equal(Reaction{
		Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(4)), EscalateAfter: 30 * time.Minute, Message: "Fix: {{range .Threads}}{{.Body}}{{end}}",
	}))
	g.Expect(s.Reactions[agentsv1alpha1.TriggerApprovedAndGreen]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionMerge, MergeMethod: agentsv1alpha1.MergeSquash}))
	g.Expect(s.Reactions[agentsv1alpha1.TriggerStuck].Action).To(Equal(agentsv1alpha1.ReactionNone))
	g.Expect(s.Reactions[agentsv1alpha1.TriggerExited]).To(Equal(Reaction{Action: agentsv1alpha1.ReactionNotify}))
	g.Expect([]any{s.IdleAfter, s.StuckAfter, s.GracePeriod, s.GraceObservations}).To(Equal([]any{time.Minute, 20 * time.Minute, 30 * time.Second, int32(5)}))
}

func TestResolveSettingsRefusesWhatCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reactions *agentsv1alpha1.ReactionsSpec
		activity  *agentsv1alpha1.ActivitySpec
		want      string
	}{
		{"merge on ciFailed", &agentsv1alpha1.ReactionsSpec{CIFailed: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge}}, nil, "action Merge is only valid for approvedAndGreen"},
		{"send to an exited agent", &agentsv1alpha1.ReactionsSpec{Exited: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent}}, nil, "cannot reach an agent that has exited"},
		{"unknown action", &agentsv1alpha1.ReactionsSpec{Stuck: &agentsv1alpha1.Reaction{Action: "Page"}}, nil, `unknown action "Page"`},
		{"template that does not parse", &agentsv1alpha1.ReactionsSpec{CIFailed: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{.Checks"}}, nil, "parse message template"},
		{"template naming a missing field", &agentsv1alpha1.ReactionsSpec{CIFailed: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionSendToAgent, Message: "{{.Logs}}"}}, nil, "render message template"},
		{"idle not before stuck", nil, &agentsv1alpha1.ActivitySpec{IdleAfter: &metav1.Duration{Duration: time.Hour}}, "idleAfter (1h0m0s) must be shorter than stuckAfter (10m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ResolveSettings(tc.reactions, tc.activity)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			if tc.reactions != nil {
				g.Expect(err).To(MatchError(ErrInvalidReaction))
			}
		})
	}
}

func TestApply(t *testing.T) {
	g := NewWithT(t)
	status := agentsv1alpha1.AgentSessionStatus{
		Agent:    agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode, SessionID: "conv-0"},
		Branch:   "shepherd/42",
		PodName:  "s-agent",
		Messages: agentsv1alpha1.MessagesStatus{Delivered: []string{"old"}, Pending: []agentsv1alpha1.OutboxMessage{{ID: "m1", Source: agentsv1alpha1.MessageFromUser}}},
		Restores: 1,
	}
	in := withPR(t0, failing(openPR(), shaA))
	in.Previous = *status.DeepCopy()
	in.Previous.Phase = agentsv1alpha1.PhaseWorking
	in.Runner.AgentSessionID = ""
	in.Runner.Summary = "Fixed the login handler"
	in.Runner.Usage = &agentsv1alpha1.UsageStatus{CostUSD: "1.25", Turns: 3}
	in.Spec.Messages = []agentsv1alpha1.Message{{ID: "m1", Text: "queued already"}, {ID: "m2", Text: "new"}}
	d := Decide(in)
	d.Restored = true
	Apply(&status, d)

	g.Expect(status.Phase).To(Equal(agentsv1alpha1.PhaseCIFailed))
	g.Expect(status.ObservedGeneration).To(Equal(in.Generation))
	g.Expect(status.PhaseTransitionTime.Time).To(BeTemporally("==", t0))
	g.Expect(status.PullRequest).To(HaveField("Number", int64(12)))
	g.Expect(status.PullRequest.FailedChecks).To(ConsistOf(agentsv1alpha1.CheckRef{Name: "unit-tests", URL: "https://ci.example/run/7"}))
	g.Expect(status.PullRequest.ChecksSummary).To(Equal("2/3 passed, 1 failed"))
	g.Expect(status.Reactions).To(ConsistOf(HaveField("Trigger", agentsv1alpha1.TriggerCIFailed)))
	g.Expect(status.Messages.Pending).To(HaveExactElements(HaveField("ID", "m1"), HaveField("ID", "m2"), HaveField("Trigger", agentsv1alpha1.TriggerCIFailed)))
	g.Expect(status.Messages.Delivered).To(Equal([]string{"old"}), "delivery is the controller's")
	g.Expect(status.Agent).To(Equal(agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode, SessionID: "conv-0"}), "an empty report never clears the conversation id")
	g.Expect(status.Summary).To(Equal("Fixed the login handler"))
	g.Expect(status.Usage.CostUSD).To(Equal("1.25"))
	g.Expect(status.Branch).To(Equal("shepherd/42"))
	g.Expect(status.PodName).To(Equal("s-agent"))
	g.Expect(status.Restores).To(Equal(int32(2)))
	g.Expect(status.Conditions).To(HaveLen(len(d.Conditions)))
}
