package kubectlplugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

var tasksGVR = agentsv1alpha1.GroupVersion.WithResource("agenttasks")

// Pick chooses an AgentTask's attempt for a person (the plugin and the dashboard): it sets the
// task's spec.selection.pick by server-side apply, after checking what the manager would refuse
// (an attempt of another task, one without an open pull request, a task that already chose). An
// attempt may be named by its session's name or by its number ("2" is <task>-2). It returns
// what it did, in words.
func (e *env) Pick(ctx context.Context, task, attempt string, force bool) (string, error) {
	if err := e.requireNamespace(); err != nil {
		return "", err
	}
	live, err := e.dyn.Resource(tasksGVR).Namespace(e.ns).Get(ctx, task, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	t := &agentsv1alpha1.AgentTask{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, t); err != nil {
		return "", err
	}
	if _, err := strconv.Atoi(attempt); err == nil {
		attempt = task + "-" + attempt
	}
	if t.Status.Chosen != "" {
		if t.Status.Chosen == attempt {
			return fmt.Sprintf("task %s already chose %s", task, attempt), nil
		}
		return "", fmt.Errorf("task %s already chose %s (%s): a choice is final", task, t.Status.Chosen, t.Status.ChosenBy)
	}
	var names []string
	found := false
	for _, a := range t.Status.Attempts {
		names = append(names, a.Name)
		if a.Name != attempt {
			continue
		}
		found = true
		if a.PullRequest == 0 {
			return "", fmt.Errorf("attempt %s has no pull request yet: only an attempt with an open pull request can be picked", attempt)
		}
	}
	if !found {
		return "", fmt.Errorf("%s is not an attempt of task %s (its attempts: %s)", attempt, task, strings.Join(names, ", "))
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentsv1alpha1.GroupVersion.String(), "kind": "AgentTask",
		"metadata": map[string]any{"name": task, "namespace": e.ns},
		"spec":     map[string]any{"selection": map[string]any{"pick": attempt}},
	}}
	_, err = e.dyn.Resource(tasksGVR).Namespace(e.ns).Apply(ctx, task, obj, metav1.ApplyOptions{FieldManager: e.manager(), Force: force})
	if apierrors.IsConflict(err) {
		return "", fmt.Errorf("%w: %s\nspec.selection.pick is declared by another manager (GitOps keeps it in Git): change it there, or pass --force", ErrConflict, conflictFields(err))
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("task %s: picked %s; its pull request goes forward, the other attempts stop", task, attempt), nil
}

func newPick(o *Options) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "pick TASK ATTEMPT",
		Short: "Choose an AgentTask's attempt: its pull request goes forward, the others are closed",
		Long: `pick sets the AgentTask's spec.selection.pick (under any selection policy). The attempt is its
AgentSession's name or its number (2 is TASK-2) and needs an open pull request. Shepherd then
marks that pull request ready for review, closes the other attempts' pull requests with a comment
linking it, and releases their Worktrees. A choice is final.`,
		Example: `  kubectl shepherd pick fix-login 2`,
		Args:    cobra.ExactArgs(2),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			msg, err := e.Pick(ctx, args[0], args[1], force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.out, msg)
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "Take spec.selection.pick over from another field manager.")
	return cmd
}
