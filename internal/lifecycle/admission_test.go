package lifecycle

import (
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// A restored session takes a new queue slot: its admission time dates from the restore, not from
// its first admission, and a restore that must wait in the queue holds no admission at all.
func TestRestoreIsAdmittedAnew(t *testing.T) {
	g := NewWithT(t)
	in := from(agentsv1alpha1.PhaseStopped)
	in.Pod, in.Runner = PodEvidence{}, RunnerEvidence{}
	d := Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseSpawning))
	g.Expect(d.AdmittedTime).NotTo(BeNil())
	g.Expect(d.AdmittedTime.Time).To(Equal(t0))

	in.Spec.Admitted = false
	d = Decide(in)
	g.Expect(d.Phase).To(Equal(agentsv1alpha1.PhaseQueued))
	g.Expect(d.AdmittedTime).To(BeNil())
}
