package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// status.chosen is written once and never changes: a later pick, or another attempt turning
// green first by the clock, leaves it, and the others are superseded by it.
func TestTaskChoiceIsFinal(t *testing.T) {
	attempt := func(name string, checks agentsv1alpha1.ChecksState) *agentsv1alpha1.AgentSession {
		s := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.Phase = agentsv1alpha1.PhasePROpen
		s.Status.PullRequest = &agentsv1alpha1.PullRequestStatus{Number: 1, State: agentsv1alpha1.PullRequestOpen, Checks: checks}
		return s
	}
	two := int32(2)
	task := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix"}, Spec: agentsv1alpha1.AgentTaskSpec{
		Attempts: &two, Selection: &agentsv1alpha1.SelectionSpec{Policy: agentsv1alpha1.SelectFirstGreen, Pick: "fix-1"}}}
	task.Status.Chosen, task.Status.ChosenBy = "fix-2", "FirstGreen: the first attempt whose checks passed"
	owned := map[string]*agentsv1alpha1.AgentSession{
		"fix-1": attempt("fix-1", agentsv1alpha1.ChecksPassing),
		"fix-2": attempt("fix-2", agentsv1alpha1.ChecksFailing),
	}
	out := taskStatus(task, &agentsv1alpha1.Project{}, owned)
	if task.Status.Chosen != "fix-2" || task.Status.Phase != agentsv1alpha1.TaskChosen {
		t.Fatalf("chosen %q phase %s: the choice must stay fix-2", task.Status.Chosen, task.Status.Phase)
	}
	if len(out.supersede) != 1 || out.supersede[0] != "fix-1" || len(out.create) != 0 {
		t.Fatalf("supersede %v create %d: fix-1 is superseded by the first choice, nothing is made", out.supersede, len(out.create))
	}
}

// A new task has failed at nothing: the attempts it is about to create are not "every attempt
// ended", so its first status says Running (a transient Failed turned Argo CD Degraded and sent
// a PhaseFailed event for every task). Without its Project it creates nothing and shows no
// phase yet: the Project's creation brings it back (SetupWithManager), Failed would have been
// for good.
func TestNewTaskIsNotFailed(t *testing.T) {
	three := int32(3)
	for _, tc := range []struct {
		name    string
		project *agentsv1alpha1.Project
		phase   agentsv1alpha1.TaskPhase
		create  int
	}{
		{"with its Project", &agentsv1alpha1.Project{}, agentsv1alpha1.TaskRunning, 3},
		{"before its Project", nil, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix"}, Spec: agentsv1alpha1.AgentTaskSpec{Attempts: &three}}
			out := taskStatus(task, tc.project, map[string]*agentsv1alpha1.AgentSession{})
			if task.Status.Phase != tc.phase || len(out.create) != tc.create {
				t.Fatalf("phase %q, %d to create; want %q, %d", task.Status.Phase, len(out.create), tc.phase, tc.create)
			}
			if task.Status.Progress != "3/3" {
				t.Fatalf("progress %q, want 3/3", task.Status.Progress)
			}
		})
	}
}
