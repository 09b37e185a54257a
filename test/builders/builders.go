// Package builders makes Shepherd objects for tests: MakeSession("x").Issue("42").Obj().
// Each builder starts from a valid object, so a test changes only what it is about.
package builders

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// ProjectBuilder builds a Project.
type ProjectBuilder struct{ p agentsv1alpha1.Project }

// MakeProject returns a valid Project: a GitHub repository and a claude-code agent.
func MakeProject(name, namespace string) *ProjectBuilder {
	return &ProjectBuilder{p: agentsv1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: agentsv1alpha1.ProjectSpec{
			Repository: agentsv1alpha1.RepositorySpec{URL: "https://github.com/acme/widgets.git"},
			Agent:      agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentClaudeCode},
		},
	}}
}

// URL sets the repository URL.
func (b *ProjectBuilder) URL(u string) *ProjectBuilder {
	b.p.Spec.Repository.URL = agentsv1alpha1.RepositoryURL(u)
	return b
}

// DefaultBranch sets the default branch.
func (b *ProjectBuilder) DefaultBranch(br string) *ProjectBuilder {
	b.p.Spec.Repository.DefaultBranch = agentsv1alpha1.BranchName(br)
	return b
}

// TokenSecret authenticates with a token in Secret name, key.
func (b *ProjectBuilder) TokenSecret(name, key string) *ProjectBuilder {
	b.p.Spec.Repository.Credentials = &agentsv1alpha1.RepositoryCredentials{
		SecretRef: &agentsv1alpha1.SecretKeyRef{Name: name, Key: key},
	}
	return b
}

// Agent sets the agent type.
func (b *ProjectBuilder) Agent(t agentsv1alpha1.AgentType) *ProjectBuilder {
	b.p.Spec.Agent.Type = t
	return b
}

// MaxConcurrent sets limits.maxConcurrentSessions.
func (b *ProjectBuilder) MaxConcurrent(n int32) *ProjectBuilder {
	b.p.Spec.Limits = &agentsv1alpha1.LimitsSpec{MaxConcurrentSessions: &n}
	return b
}

// Reaction sets one trigger's reaction.
func (b *ProjectBuilder) Reaction(t agentsv1alpha1.ReactionTrigger, r agentsv1alpha1.Reaction) *ProjectBuilder {
	if b.p.Spec.Reactions == nil {
		b.p.Spec.Reactions = &agentsv1alpha1.ReactionsSpec{}
	}
	rs := b.p.Spec.Reactions
	switch t {
	case agentsv1alpha1.TriggerCIFailed:
		rs.CIFailed = &r
	case agentsv1alpha1.TriggerChangesRequested:
		rs.ChangesRequested = &r
	case agentsv1alpha1.TriggerMergeConflicts:
		rs.MergeConflicts = &r
	case agentsv1alpha1.TriggerApprovedAndGreen:
		rs.ApprovedAndGreen = &r
	case agentsv1alpha1.TriggerStuck:
		rs.Stuck = &r
	case agentsv1alpha1.TriggerNeedsInput:
		rs.NeedsInput = &r
	case agentsv1alpha1.TriggerExited:
		rs.Exited = &r
	}
	return b
}

// With applies any change to the spec.
func (b *ProjectBuilder) With(f func(*agentsv1alpha1.ProjectSpec)) *ProjectBuilder {
	f(&b.p.Spec)
	return b
}

// Obj returns the Project.
func (b *ProjectBuilder) Obj() *agentsv1alpha1.Project { return b.p.DeepCopy() }

// WorktreeBuilder builds a Worktree.
type WorktreeBuilder struct{ w agentsv1alpha1.Worktree }

// MakeWorktree returns a valid Worktree of project on branch.
func MakeWorktree(name, namespace, project, branch string) *WorktreeBuilder {
	return &WorktreeBuilder{w: agentsv1alpha1.Worktree{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: agentsv1alpha1.WorktreeSpec{
			ProjectRef: agentsv1alpha1.LocalObjectReference{Name: project},
			Branch:     agentsv1alpha1.BranchName(branch),
		},
	}}
}

// Base sets the base ref.
func (b *WorktreeBuilder) Base(ref string) *WorktreeBuilder {
	b.w.Spec.Base = agentsv1alpha1.GitRef(ref)
	return b
}

// Mode sets the workspace mode.
func (b *WorktreeBuilder) Mode(m agentsv1alpha1.WorkspaceMode) *WorktreeBuilder {
	b.w.Spec.Mode = m
	return b
}

// State sets the desired state.
func (b *WorktreeBuilder) State(s agentsv1alpha1.WorktreeState) *WorktreeBuilder {
	b.w.Spec.State = s
	return b
}

// With applies any change to the spec.
func (b *WorktreeBuilder) With(f func(*agentsv1alpha1.WorktreeSpec)) *WorktreeBuilder {
	f(&b.w.Spec)
	return b
}

// Obj returns the Worktree.
func (b *WorktreeBuilder) Obj() *agentsv1alpha1.Worktree { return b.w.DeepCopy() }

// SessionBuilder builds an AgentSession.
type SessionBuilder struct{ s agentsv1alpha1.AgentSession }

// MakeSession returns an AgentSession of project with no task yet: call Issue or Prompt.
func MakeSession(name, namespace, project string) *SessionBuilder {
	return &SessionBuilder{s: agentsv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: agentsv1alpha1.AgentSessionSpec{
			ProjectRef: agentsv1alpha1.LocalObjectReference{Name: project},
		},
	}}
}

// Issue sets the task to a tracker issue.
func (b *SessionBuilder) Issue(id string) *SessionBuilder {
	b.s.Spec.Issue = id
	return b
}

// Prompt sets the task to a prompt.
func (b *SessionBuilder) Prompt(p string) *SessionBuilder {
	b.s.Spec.Prompt = p
	return b
}

// WorktreeRef reuses an existing Worktree.
func (b *SessionBuilder) WorktreeRef(name string) *SessionBuilder {
	b.s.Spec.WorktreeRef = &agentsv1alpha1.LocalObjectReference{Name: name}
	return b
}

// Branch sets the branch of the session's own Worktree.
func (b *SessionBuilder) Branch(br string) *SessionBuilder {
	if b.s.Spec.Worktree == nil {
		b.s.Spec.Worktree = &agentsv1alpha1.WorktreeTemplate{}
	}
	b.s.Spec.Worktree.Branch = agentsv1alpha1.BranchName(br)
	return b
}

// Agent overrides the agent type.
func (b *SessionBuilder) Agent(t agentsv1alpha1.AgentType) *SessionBuilder {
	if b.s.Spec.Agent == nil {
		b.s.Spec.Agent = &agentsv1alpha1.AgentSpec{}
	}
	b.s.Spec.Agent.Type = t
	return b
}

// Message appends a follow-up message.
func (b *SessionBuilder) Message(id, text string) *SessionBuilder {
	b.s.Spec.Messages = append(b.s.Spec.Messages, agentsv1alpha1.Message{ID: id, Text: text})
	return b
}

// State sets the desired state.
func (b *SessionBuilder) State(s agentsv1alpha1.SessionState) *SessionBuilder {
	b.s.Spec.State = s
	return b
}

// Created sets the creation timestamp (for pure tests; the API server ignores it).
func (b *SessionBuilder) Created(t time.Time) *SessionBuilder {
	b.s.CreationTimestamp = metav1.NewTime(t)
	return b
}

// With applies any change to the spec.
func (b *SessionBuilder) With(f func(*agentsv1alpha1.AgentSessionSpec)) *SessionBuilder {
	f(&b.s.Spec)
	return b
}

// Obj returns the AgentSession.
func (b *SessionBuilder) Obj() *agentsv1alpha1.AgentSession { return b.s.DeepCopy() }
