// Package controller holds Shepherd's reconcilers: Project, Worktree, AgentSession, BudgetPolicy and AgentTask.
package controller

// The manager's ClusterRole is generated from these markers (make manifests → config/rbac/role.yaml).
// Each reconciler adds the markers for what it touches next to its code; this file holds what
// every reconciler needs. docs/rbac.md reviews the result.
//
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=projects;worktrees;agentsessions;budgetpolicies;agenttasks,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=projects/status;worktrees/status;agentsessions/status;budgetpolicies/status;agenttasks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
