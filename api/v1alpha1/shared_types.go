package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// BranchName is a git branch name. The rules are those of `git check-ref-format --branch`; the
// Go twin used by the runner lives in internal/gitref and is tested against the same table.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=255
// +kubebuilder:validation:XValidation:rule=`!self.startsWith('-')`,message="branch name must not start with '-'"
// +kubebuilder:validation:XValidation:rule=`!self.contains('..')`,message="branch name must not contain '..'"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\x00-\x20\x7f]')`,message="branch name must not contain spaces or control characters"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[~^:?*\[\\]')`,message="branch name must not contain any of ~ ^ : ? * [ \\"
// +kubebuilder:validation:XValidation:rule=`!self.contains('@{')`,message="branch name must not contain '@{'"
// +kubebuilder:validation:XValidation:rule=`self != '@' && self != 'HEAD'`,message="branch name must not be '@' or 'HEAD'"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(^|/)\.')`,message="no '/'-separated part of a branch name may start with '.'"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'\.lock(/|$)')`,message="no '/'-separated part of a branch name may end with '.lock'"
// +kubebuilder:validation:XValidation:rule=`!self.startsWith('/') && !self.endsWith('/') && !self.contains('//')`,message="branch name must not start or end with '/' or contain '//'"
// +kubebuilder:validation:XValidation:rule=`!self.endsWith('.')`,message="branch name must not end with '.'"
type BranchName string

// GitRef names a commit-ish the checkout starts from: a branch, a tag or a full commit SHA. It
// follows the same reference-name rules as BranchName.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=255
// +kubebuilder:validation:XValidation:rule=`!self.startsWith('-')`,message="ref must not start with '-'"
// +kubebuilder:validation:XValidation:rule=`!self.contains('..')`,message="ref must not contain '..'"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\x00-\x20\x7f~^:?*\[\\]')`,message="ref must not contain spaces, control characters or any of ~ ^ : ? * [ \\"
// +kubebuilder:validation:XValidation:rule=`!self.contains('@{') && self != '@'`,message="ref must not contain '@{' or be '@'"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(^|/)\.') && !self.matches(r'\.lock(/|$)') && !self.endsWith('.')`,message="no '/'-separated part of a ref may start with '.' or end with '.lock', and a ref must not end with '.'"
// +kubebuilder:validation:XValidation:rule=`!self.startsWith('/') && !self.endsWith('/') && !self.contains('//')`,message="ref must not start or end with '/' or contain '//'"
type GitRef string

// RepositoryURL is the address git clones from: https:// (or http:// for in-cluster servers),
// ssh://, or the scp-like form user@host:path.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^(https?|ssh)://[^\s/?#]+/\S+$') || self.matches(r'^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s/-]\S*$')`,message="repository URL must be https://host/owner/repo, http://host/owner/repo, ssh://host/owner/repo or scp-like user@host:owner/repo"
// +kubebuilder:validation:XValidation:rule=`!self.matches(r'^https?://[^/]*@')`,message="repository URL must not embed credentials; put the token in a Secret and reference it from spec.repository.credentials"
type RepositoryURL string

// HTTPURL is an http:// or https:// endpoint.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^https?://[^\s/?#]+(/\S*)?$')`,message="must be an http:// or https:// URL"
type HTTPURL string

// SecretKeyRef selects one key of a Secret in the object's own namespace.
type SecretKeyRef struct {
	// Name of the Secret, in the same namespace as the object that references it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key inside the Secret's data that holds the value.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// LocalObjectReference names an object of a known kind in the same namespace.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// AgentType names a supported coding agent CLI.
// +kubebuilder:validation:Enum=claude-code;codex;aider;opencode
type AgentType string

// The supported agents. Each has an adapter in internal/agent/<type>.
const (
	AgentClaudeCode AgentType = "claude-code"
	AgentCodex      AgentType = "codex"
	AgentAider      AgentType = "aider"
	AgentOpenCode   AgentType = "opencode"
)

// PermissionMode says how much the agent may do without asking. Agents run headless in a pod
// that is their sandbox, so nobody is there to answer a permission prompt: the modes map to each
// CLI's non-interactive equivalent.
// +kubebuilder:validation:Enum=Bypass;AcceptEdits;ReadOnly
type PermissionMode string

const (
	// PermissionBypass lets the agent edit files and run commands (the pod is the sandbox).
	PermissionBypass PermissionMode = "Bypass"
	// PermissionAcceptEdits lets the agent edit files; commands that need approval are refused.
	PermissionAcceptEdits PermissionMode = "AcceptEdits"
	// PermissionReadOnly lets the agent read and plan but not change the checkout.
	PermissionReadOnly PermissionMode = "ReadOnly"
)

// EnvVar is a plain, non-secret environment variable for the agent container. Secrets go in
// AgentSpec.Credentials so that they never appear in the pod spec.
type EnvVar struct {
	// Name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// Value of the variable.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value,omitempty"`
}

// AgentCredential exposes one Secret key to the agent as an environment variable, for example
// ANTHROPIC_API_KEY. The pod references the Secret; the value never appears in any spec.
type AgentCredential struct {
	// EnvName is the environment variable the agent reads.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	EnvName string `json:"envName"`

	// SecretRef selects the Secret key that holds the value.
	// +required
	SecretRef SecretKeyRef `json:"secretRef"`
}

// AgentSpec configures the coding agent. On a Project it holds the defaults for every session;
// on an AgentSession each field set overrides the Project's.
type AgentSpec struct {
	// Type of agent CLI to run. Required on a Project.
	// +optional
	Type AgentType `json:"type,omitempty"`

	// Image of the agent container. It must contain the agent CLI and git; the runner binary is
	// copied in at start. Defaults to the manager's built-in image for the agent type.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Model passed to the agent CLI (for example "claude-sonnet-4-5"). Empty uses the CLI's default.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/@-]*$`
	Model string `json:"model,omitempty"`

	// PermissionMode: Bypass (default), AcceptEdits or ReadOnly.
	// +optional
	PermissionMode PermissionMode `json:"permissionMode,omitempty"`

	// Credentials are Secret keys exposed to the agent as environment variables.
	// +optional
	// +listType=map
	// +listMapKey=envName
	// +kubebuilder:validation:MaxItems=16
	Credentials []AgentCredential `json:"credentials,omitempty"`

	// Env holds non-secret environment variables for the agent (for example a model API base URL).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Env []EnvVar `json:"env,omitempty"`

	// ExtraArgs are appended to the agent CLI's argument list, unchanged and without a shell.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	ExtraArgs []string `json:"extraArgs,omitempty"`

	// ExtraInstructions are appended to every prompt the agent receives.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	ExtraInstructions string `json:"extraInstructions,omitempty"`

	// Resources of the agent container (and of the checkout's prepare step). Requests left unset
	// default to 250m CPU and 512Mi memory, never above a limit that is set.
	// +optional
	Resources *ResourceRequirements `json:"resources,omitempty"`
}

// ResourceRequirements are the CPU and memory requests and limits of the agent container.
type ResourceRequirements struct {
	// Requests is the amount reserved for the container.
	// +optional
	Requests ResourceList `json:"requests,omitempty"`
	// Limits is the most the container may use.
	// +optional
	Limits ResourceList `json:"limits,omitempty"`
}

// ResourceList holds CPU, memory and ephemeral-storage quantities.
type ResourceList struct {
	// CPU, for example "500m" or "2".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory, for example "2Gi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// EphemeralStorage, for example "10Gi".
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty"`
}
