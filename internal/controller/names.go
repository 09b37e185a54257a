package controller

import (
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// Child names are deterministic, so that a reconcile that restarts at any line finds what the
// previous one created instead of creating it twice. Object names are DNS labels of at most 63
// characters (the CRDs enforce it), so every name below stays a valid DNS subdomain.

func agentServiceAccountName(project string) string { return project + "-agent" }
func workspaceClaimName(project string) string      { return project + "-workspace" }
func egressPolicyName(project string) string        { return project + "-agent-egress" }
func checkoutClaimName(worktree string) string      { return worktree + "-checkout" }
func worktreePodName(worktree string) string        { return worktree + "-worktree" }
func agentPodName(session string) string            { return session + "-agent" }

// PodNames is the controllers' pod naming, which the runner channel checks its callers against.
var PodNames = runnerapi.PodNames{AgentPod: agentPodName, CheckoutPod: worktreePodName, ServiceAccount: agentServiceAccountName}

// componentLabel is the label that says what a child is.
const componentLabel = agentsv1alpha1.LabelComponent

// Container names of agent pods.
const (
	containerRunner  = "runner"
	containerPrepare = "prepare"
	containerAgent   = "agent"
)

// Component label values.
const (
	componentAgent    = "agent"
	componentWorktree = "worktree"
	componentVolume   = "workspace"
)

// Paths inside pods. The Project's workspace volume holds the mirror and the worktrees that hang
// off it, mounted at the same path in every pod (a worktree's .git file names its admin
// directory in the mirror by absolute path).
const (
	workspaceMount = "/shepherd/workspace"
	mirrorPath     = workspaceMount + "/mirror.git"
	// projectMount is where a clone-mode pod mounts the Project's workspace volume when the
	// Project has shared paths (its own checkout volume is at workspaceMount).
	projectMount = "/shepherd/project"
	binMount     = "/shepherd/bin"
	runnerBinary = binMount + "/runner"
	// agentGitConfig is the agent containers' system git configuration (runner.AgentGitConfig),
	// written by the runner before it serves.
	agentGitConfig = binMount + "/gitconfig"
	tokenMount     = "/var/run/secrets/shepherd"
	tokenFile      = tokenMount + "/token"
)

// checkoutPath is where a Worktree's checkout lives in its volume.
func checkoutPath(mode agentsv1alpha1.WorkspaceMode, worktree string) string {
	if mode == agentsv1alpha1.WorkspaceClone {
		return workspaceMount + "/checkout"
	}
	return workspaceMount + "/worktrees/" + worktree
}

// forgeCallTimeout bounds every call the controllers make to a forge or a tracker (a merge, a
// pull request's creation, an access check, a backlog query): one setting, so that a slow
// forge holds a reconcile no longer than this anywhere.
const forgeCallTimeout = 30 * time.Second

// Requeue delays.
const (
	minRequeue = 5 * time.Second
	forgeRetry = 30 * time.Second
)

// timeUntil is the time from now to t (negative when t passed).
func timeUntil(t time.Time) time.Duration { return time.Until(t) }

// managedLabels are the labels every child carries; the manager's caches select on them.
func managedLabels(project string) map[string]string {
	return map[string]string{
		agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue,
		agentsv1alpha1.LabelProject:   project,
	}
}
