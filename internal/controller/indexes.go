package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Field indexes, so that no reconcile lists the whole cluster.
const (
	// indexProject indexes Worktrees and AgentSessions by spec.projectRef.name.
	indexProject = "spec.projectRef.name"
	// indexWorktree indexes AgentSessions by the Worktree they use (worktreeRef, or their own).
	indexWorktree = "shepherd.worktree"
	// indexSecret indexes Projects by every Secret they reference.
	indexSecret = "shepherd.secrets"
	// indexPodWorktree indexes pods by their Worktree label; indexTask indexes AgentSessions by
	// their task label. A label selector alone is matched against every object of the
	// namespace in the cache: with 10,000 sessions in one namespace, each Worktree reconcile
	// scanned 10,000 pods (issue 23's profile).
	indexPodWorktree = "shepherd.pod.worktree"
	indexTask        = "shepherd.task"
)

// labelIndex indexes objects by the value of one label (none: not indexed).
func labelIndex(key string) client.IndexerFunc {
	return func(o client.Object) []string {
		if v := o.GetLabels()[key]; v != "" {
			return []string{v}
		}
		return nil
	}
}

// sessionWorktree is the Worktree a session uses: the one it names, or its own (same name).
func sessionWorktree(s *agentsv1alpha1.AgentSession) string {
	if s.Spec.WorktreeRef != nil {
		return s.Spec.WorktreeRef.Name
	}
	return s.Name
}

// projectSecrets lists the Secrets a Project references.
func projectSecrets(p *agentsv1alpha1.Project) []string {
	var out []string
	add := func(ref *agentsv1alpha1.SecretKeyRef) {
		if ref != nil {
			out = append(out, ref.Name)
		}
	}
	if c := p.Spec.Repository.Credentials; c != nil {
		add(c.SecretRef)
		if c.GitHubApp != nil {
			add(&c.GitHubApp.PrivateKeySecretRef)
		}
	}
	add(p.Spec.SCM.WebhookSecretRef)
	if t := p.Spec.Tracker; t != nil && t.Linear != nil {
		add(&t.Linear.APIKeySecretRef)
	}
	for _, c := range p.Spec.Agent.Credentials {
		add(&c.SecretRef)
	}
	if n := p.Spec.Notifications; n != nil {
		for _, r := range n.Routes {
			if r.Webhook != nil {
				add(&r.Webhook.SecretRef)
			}
			if r.Slack != nil {
				add(&r.Slack.WebhookURLSecretRef)
			}
		}
	}
	return out
}

// SetupIndexes registers the field indexes every reconciler relies on.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &agentsv1alpha1.AgentSession{}, indexProject, func(o client.Object) []string {
		return []string{o.(*agentsv1alpha1.AgentSession).Spec.ProjectRef.Name}
	}); err != nil {
		return fmt.Errorf("index sessions by project: %w", err)
	}
	if err := idx.IndexField(ctx, &agentsv1alpha1.Worktree{}, indexProject, func(o client.Object) []string {
		return []string{o.(*agentsv1alpha1.Worktree).Spec.ProjectRef.Name}
	}); err != nil {
		return fmt.Errorf("index worktrees by project: %w", err)
	}
	if err := idx.IndexField(ctx, &agentsv1alpha1.AgentSession{}, indexWorktree, func(o client.Object) []string {
		return []string{sessionWorktree(o.(*agentsv1alpha1.AgentSession))}
	}); err != nil {
		return fmt.Errorf("index sessions by worktree: %w", err)
	}
	if err := idx.IndexField(ctx, &agentsv1alpha1.AgentTask{}, indexProject, func(o client.Object) []string {
		return []string{o.(*agentsv1alpha1.AgentTask).Spec.ProjectRef.Name}
	}); err != nil {
		return fmt.Errorf("index tasks by project: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodWorktree, labelIndex(agentsv1alpha1.LabelWorktree)); err != nil {
		return fmt.Errorf("index pods by worktree: %w", err)
	}
	if err := idx.IndexField(ctx, &agentsv1alpha1.AgentSession{}, indexTask, labelIndex(agentsv1alpha1.LabelTask)); err != nil {
		return fmt.Errorf("index sessions by task: %w", err)
	}
	if err := idx.IndexField(ctx, &agentsv1alpha1.Project{}, indexSecret, func(o client.Object) []string {
		return projectSecrets(o.(*agentsv1alpha1.Project))
	}); err != nil {
		return fmt.Errorf("index projects by secret: %w", err)
	}
	return nil
}
