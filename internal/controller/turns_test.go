package controller

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestWorktreeHolder(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	sess := func(name string, age time.Duration, mutate ...func(*agentsv1alpha1.AgentSession)) agentsv1alpha1.AgentSession {
		s := agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-age))}}
		for _, m := range mutate {
			m(&s)
		}
		return s
	}
	started := func(s *agentsv1alpha1.AgentSession) { s.Status.StartTime = &metav1.Time{Time: t0} }
	phase := func(p agentsv1alpha1.SessionPhase) func(*agentsv1alpha1.AgentSession) {
		return func(s *agentsv1alpha1.AgentSession) { s.Status.Phase = p }
	}
	stopped := func(s *agentsv1alpha1.AgentSession) { s.Spec.State = agentsv1alpha1.SessionStopped }
	for _, tc := range []struct {
		name   string
		me     agentsv1alpha1.AgentSession
		others []agentsv1alpha1.AgentSession
		pods   []string
		want   string
	}{
		{"alone", sess("me", time.Minute), nil, nil, ""},
		{"another's agent pod holds it, whatever the ages", sess("me", time.Hour), []agentsv1alpha1.AgentSession{sess("b", time.Minute)}, []string{"b"}, "b"},
		{"an older session that never ran comes first", sess("me", time.Minute), []agentsv1alpha1.AgentSession{sess("a", time.Hour)}, nil, "a"},
		{"a newer one waits for me", sess("me", time.Hour), []agentsv1alpha1.AgentSession{sess("b", time.Minute)}, nil, ""},
		{"same age: by name", sess("b", time.Minute), []agentsv1alpha1.AgentSession{sess("a", time.Minute)}, nil, "a"},
		{"one that ran and is between pods (a respawn) comes before one that never ran", sess("me", time.Hour),
			[]agentsv1alpha1.AgentSession{sess("b", time.Minute, started)}, nil, "b"},
		{"a session that ran is held only by a pod", sess("me", time.Minute, started),
			[]agentsv1alpha1.AgentSession{sess("a", time.Hour)}, nil, ""},
		{"ended, stopped and deleted sessions hold nothing", sess("me", time.Minute), []agentsv1alpha1.AgentSession{
			sess("done", time.Hour, phase(agentsv1alpha1.PhaseDone)), sess("merged", time.Hour, phase(agentsv1alpha1.PhaseMerged)),
			sess("stopped", time.Hour, stopped),
			sess("going", time.Hour, func(s *agentsv1alpha1.AgentSession) { s.DeletionTimestamp = &metav1.Time{Time: t0} }),
		}, []string{"stopped"}, ""},
		{"the list includes me", sess("me", time.Minute), []agentsv1alpha1.AgentSession{sess("me", time.Minute)}, []string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			pods := map[string]bool{}
			for _, p := range tc.pods {
				pods[p] = true
			}
			g.Expect(worktreeHolder(&tc.me, tc.others, func(n string) bool { return pods[n] })).To(Equal(tc.want))
		})
	}
}
