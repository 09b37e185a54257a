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
// +kubebuilder:validation:Enum=claude-code;codex;aider;opencode;gemini;custom
type AgentType string

// The supported agents. Each has an adapter in internal/agent/<type>.
const (
	AgentClaudeCode AgentType = "claude-code"
	AgentCodex      AgentType = "codex"
	AgentAider      AgentType = "aider"
	AgentOpenCode   AgentType = "opencode"
	// AgentGemini is Google's Gemini CLI.
	AgentGemini AgentType = "gemini"
	// AgentCustom runs a CLI Shepherd has no adapter for: spec.agent.image and
	// spec.agent.custom say what to run and how it reports (docs/adding-an-agent.md).
	AgentCustom AgentType = "custom"
)

// CustomOutput is the format a custom agent's command prints.
// +kubebuilder:validation:Enum=Shepherd;ClaudeCode;Codex;OpenCode;Gemini
type CustomOutput string

const (
	// CustomOutputShepherd is Shepherd's JSON-lines agent protocol (docs/adding-an-agent.md).
	CustomOutputShepherd CustomOutput = "Shepherd"
	// CustomOutputClaudeCode is Claude Code's --output-format stream-json.
	CustomOutputClaudeCode CustomOutput = "ClaudeCode"
	// CustomOutputCodex is codex exec --json.
	CustomOutputCodex CustomOutput = "Codex"
	// CustomOutputOpenCode is opencode run --format json.
	CustomOutputOpenCode CustomOutput = "OpenCode"
	// CustomOutputGemini is gemini --output-format stream-json.
	CustomOutputGemini CustomOutput = "Gemini"
)

// CustomAgentSpec is what a custom agent runs and how it reports.
type CustomAgentSpec struct {
	// Command is the program and its arguments, run for every turn in the checkout, without a
	// shell, in the agent's image. The prompt arrives on standard input; the environment says
	// the rest (SHEPHERD_RESUME, SHEPHERD_SESSION_ID, SHEPHERD_MODEL, SHEPHERD_PERMISSION_MODE,
	// and with a model proxy SHEPHERD_MODEL_API, SHEPHERD_MODEL_BASE_URL, SHEPHERD_MODEL_API_KEY).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command"`

	// Output is the format the command prints on standard output: Shepherd (default, the
	// JSON-lines protocol of docs/adding-an-agent.md) or the output format of a CLI Shepherd
	// drives (ClaudeCode, Codex, OpenCode, Gemini), for a wrapper around one of them.
	// +optional
	// +kubebuilder:default=Shepherd
	Output CustomOutput `json:"output,omitempty"`
}

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
// AgentSpec.Credentials so that they never appear in the pod spec. Names Shepherd sets itself,
// and names that would redirect git or the network (SHEPHERD_*, GIT_*, HOME, the proxy
// variables), are reserved.
// +kubebuilder:validation:XValidation:rule=`!self.name.startsWith('SHEPHERD_') && !self.name.startsWith('GIT_') && self.name != 'HOME' && !(self.name.upperAscii() in ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY', 'FTP_PROXY'])`,message="env name is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ALL_PROXY) are set by Shepherd; set the git identity with agent.gitAuthor and allowed hosts with spec.network.egress.hosts"
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

// AgentCredential exposes one Secret key to the agent as an environment variable. The pod
// references the Secret, so the value never appears in any spec; but the agent, and whoever
// steers it, can read it. Model API keys do not belong here: agent.modelAPI.keySecretRef keeps
// them in the runner's model proxy, out of the agent's reach.
// +kubebuilder:validation:XValidation:rule=`!self.envName.startsWith('SHEPHERD_') && !self.envName.startsWith('GIT_') && self.envName != 'HOME' && !(self.envName.upperAscii() in ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY', 'FTP_PROXY'])`,message="credential envName is reserved: SHEPHERD_*, GIT_*, HOME and the proxy variables are set by Shepherd"
// +kubebuilder:validation:XValidation:rule=`!(self.envName in ['ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN', 'OPENAI_API_KEY', 'CODEX_API_KEY', 'GEMINI_API_KEY', 'GOOGLE_API_KEY'])`,message="a model API key must not be in the agent's environment, where a steered agent can read it: reference it from agent.modelAPI.keySecretRef and the runner's model proxy adds it to each request"
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
// +kubebuilder:validation:XValidation:rule=`!has(self.custom) || !has(self.type) || self.type == 'custom'`,message="agent.custom is for type custom only: remove it, or set type: custom"
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
	// default to 250m CPU and 512Mi memory, and limits to 4Gi memory and 8Gi ephemeral storage,
	// never below a request that is set.
	// +optional
	Resources *ResourceRequirements `json:"resources,omitempty"`

	// ModelAPI is the model API the agent's CLI calls. The CLI is pointed at the runner's model
	// proxy inside the pod, with a placeholder key; the proxy adds the real key (from
	// keySecretRef, mounted only in the runner's container), forwards to url, and counts every
	// request and token. Without it, the CLI is left to its own configuration (agent.env).
	// +optional
	ModelAPI *ModelAPISpec `json:"modelAPI,omitempty"`

	// GitAuthor names the commits the agent makes. Defaults to "Shepherd agent (<session>)"
	// <session>@agents.shepherd.dev.
	// +optional
	GitAuthor *GitAuthor `json:"gitAuthor,omitempty"`

	// Custom says what a custom agent (type custom) runs and how it reports; the image is
	// spec.agent.image, which a custom agent must set.
	// +optional
	Custom *CustomAgentSpec `json:"custom,omitempty"`
}

// ModelAPIKind names the wire protocol of a model API.
// +kubebuilder:validation:Enum=Anthropic;OpenAI;Gemini
type ModelAPIKind string

const (
	// ModelAPIAnthropic is Anthropic's Messages API (Claude Code, OpenCode, Aider).
	ModelAPIAnthropic ModelAPIKind = "Anthropic"
	// ModelAPIOpenAI is OpenAI's Responses and Chat Completions APIs (Codex, OpenCode, Aider).
	ModelAPIOpenAI ModelAPIKind = "OpenAI"
	// ModelAPIGemini is Google's Gemini API (generateContent and streamGenerateContent; Gemini
	// CLI).
	ModelAPIGemini ModelAPIKind = "Gemini"
)

// DefaultURL is the API's upstream when agent.modelAPI.url is empty: the provider's own.
func (k ModelAPIKind) DefaultURL() string {
	switch k {
	case ModelAPIOpenAI:
		return "https://api.openai.com"
	case ModelAPIGemini:
		return "https://generativelanguage.googleapis.com"
	}
	return "https://api.anthropic.com"
}

// ModelAPISpec is the upstream model API of a Project's agents and the key to call it with.
type ModelAPISpec struct {
	// API is the wire protocol: Anthropic (Messages) or OpenAI (Responses, Chat Completions).
	// +required
	API ModelAPIKind `json:"api"`

	// URL of the upstream API, without the version path: https://api.anthropic.com (the default
	// for Anthropic) or https://api.openai.com (the default for OpenAI), or a gateway's base. The
	// proxy appends what the CLI asks for (/v1/messages, /v1/responses).
	// +optional
	URL HTTPURL `json:"url,omitempty"`

	// KeySecretRef selects the Secret key holding the API key. It is mounted only in the
	// runner's container; the agent's environment holds a placeholder.
	// +optional
	KeySecretRef *SecretKeyRef `json:"keySecretRef,omitempty"`

	// Limits cut a session off once it has made this many model requests or used this many
	// tokens (input, output, cache reads and writes, as the upstream reports them); further
	// requests are refused by the proxy with 403 and "do not retry", in the API's own error
	// shape, and the session shows why. Unset: no limit.
	// +optional
	Limits *ModelLimits `json:"limits,omitempty"`
}

// ModelLimits bound one session's use of the model API.
type ModelLimits struct {
	// MaxRequests is the most model requests one session may make. 1..1000000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxRequests *int64 `json:"maxRequests,omitempty"`

	// MaxTokens is the most tokens (input, output, cache reads and writes) one session may
	// use; requests already under way when it is reached still finish. 1..10000000000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000000
	MaxTokens *int64 `json:"maxTokens,omitempty"`
}

// GitAuthor is the name and email on the agent's commits.
type GitAuthor struct {
	// Name of the author and committer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[<>\x00-\x1f]')`,message="gitAuthor.name must not contain '<', '>' or control characters"
	Name string `json:"name"`

	// Email of the author and committer.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:Pattern=`^[^\s<>@]+@[^\s<>@]+$`
	Email string `json:"email"`
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
