package controller

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/events"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestEmitPhaseEvent(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after agentsv1alpha1.WorktreePhase
		want          []string
	}{
		{"a new Worktree's first phase, Pending, is not news", "", agentsv1alpha1.WorktreePending, nil},
		{"Pending to Ready", agentsv1alpha1.WorktreePending, agentsv1alpha1.WorktreeReady, []string{"Normal PhaseReady phase Pending → Ready"}},
		{"a new adopted Worktree straight to Ready", "", agentsv1alpha1.WorktreeReady, []string{"Normal PhaseReady phase (none) → Ready"}},
		{"no change", agentsv1alpha1.WorktreeReady, agentsv1alpha1.WorktreeReady, nil},
		{"Ready to Missing", agentsv1alpha1.WorktreeReady, agentsv1alpha1.WorktreeMissing, []string{"Normal PhaseMissing phase Ready → Missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rec := events.NewFakeRecorder(4)
			emitPhaseEvent(rec, &agentsv1alpha1.Worktree{}, string(tc.before), string(tc.after))
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
