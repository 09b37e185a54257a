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
