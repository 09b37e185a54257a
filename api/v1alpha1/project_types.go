package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProjectSpec is what every session of one repository shares.
// +kubebuilder:validation:XValidation:rule=`!has(self.backlog) || has(self.tracker)`,message="spec.backlog needs spec.tracker: set the tracker whose issues the backlog is read from"
// +kubebuilder:validation:XValidation:rule=`!has(self.backlog) || !has(self.limits) || !has(self.limits.maxConcurrentSessions) || self.backlog.maxConcurrent <= self.limits.maxConcurrentSessions`,message="spec.backlog.maxConcurrent must not exceed spec.limits.maxConcurrentSessions"
type ProjectSpec struct {
	// Repository is the git repository the agents work on.
	// +required
	Repository RepositorySpec `json:"repository"`

	// SCM is the forge that hosts pull requests, CI results and reviews.
	// +optional
	SCM SCMSpec `json:"scm,omitempty"`

	// Tracker turns an issue id into a title, a body, a branch name and a prompt. When absent,
	// sessions must carry a prompt.
	// +optional
	Tracker *TrackerSpec `json:"tracker,omitempty"`

	// Agent holds the defaults for every session's agent. type is required.
	// +required
	// +kubebuilder:validation:XValidation:rule=`has(self.type)`,message="spec.agent.type is required: one of claude-code, codex, aider, opencode, gemini, custom"
	Agent AgentSpec `json:"agent"`

	// Workspace says how checkouts are made and stored.
	// +optional
	Workspace WorkspaceSpec `json:"workspace,omitempty"`

	// Reactions say what Shepherd does when a session's pull request or agent needs something.
	// A trigger left out keeps its default (see docs/reactions.md).
	// +optional
	Reactions *ReactionsSpec `json:"reactions,omitempty"`

	// Notifications route events by priority. Kubernetes Events are always emitted.
	// +optional
	Notifications *NotificationsSpec `json:"notifications,omitempty"`

	// Limits bound what the Project may run at once.
	// +optional
	Limits *LimitsSpec `json:"limits,omitempty"`

	// Activity holds the thresholds that turn agent silence into Idle, Stuck or gone.
	// +optional
	Activity *ActivitySpec `json:"activity,omitempty"`

	// Cleanup says what happens to a session's children once it has finished.
	// +optional
	Cleanup *CleanupSpec `json:"cleanup,omitempty"`

	// Backlog lets the Project spawn a session for every tracker issue that matches a query.
	// +optional
	Backlog *BacklogSpec `json:"backlog,omitempty"`

	// Network restricts where agent pods may connect.
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// Scheduling places every pod Shepherd creates for the Project (agent and checkout pods):
	// a node pool for agents, tolerations for its taints, a priority class.
	// +optional
	Scheduling *SchedulingSpec `json:"scheduling,omitempty"`

	// TrustedAuthors says whose issue comments and review comments reach the agent's prompts.
	// Anyone who can comment can try to steer an agent (prompt injection), so by default only the
	// repository's owners, members and collaborators are heard; the rest are left out (the
	// prompt says how many). The issue itself, and the session's own prompt, are always used:
	// whoever labels or assigns an issue to Shepherd vouches for it.
	// +optional
	TrustedAuthors *TrustedAuthorsSpec `json:"trustedAuthors,omitempty"`

	// Feedback shapes how the pull request's conversation reaches the agent (the commented
	// reaction): an optional command prefix, and how much of each comment is forwarded. Whose
	// comments count is trustedAuthors' say (list a code-review bot's login there).
	// +optional
	Feedback *FeedbackSpec `json:"feedback,omitempty"`

	// Selection is the default of the Project's AgentTasks' spec.selection (docs/best-of-n.md):
	// the policy and the Score weights.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`!has(self.pick)`,message="spec.selection.pick belongs on an AgentTask, not a Project"
	Selection *SelectionSpec `json:"selection,omitempty"`

	// Budget caps what the Project's sessions may spend per day and per month (docs/cost.md).
	// Spend is what the model proxy metered at the price table's prices: sessions without a
	// model proxy are not counted.
	// +optional
	Budget *BudgetSpec `json:"budget,omitempty"`

	// Events says which Kubernetes Events Shepherd records for the Project's sessions and
	// Worktrees (docs/project.md). By default every one; a Project that fans out thousands of
	// sessions can leave out the routine ones.
	// +optional
	Events *EventsSpec `json:"events,omitempty"`
}

// EventsSpec quiets routine Kubernetes Events.
type EventsSpec struct {
	// Routine says whether the events of routine steps are recorded: Record (the default) or
	// Omit. Routine are a session's Normal events of priority info (the table in
	// docs/reactions.md: session.queued, session.spawned, session.working, a clean
	// session.exited, session.done, pr.created, ci.passing, review.comments_sent, ...) and a
	// Worktree's phase changes but for those to or from Failed and Missing. Warnings, the
	// events that ask a human to act (priority action or urgent) and every other event are
	// always recorded, and the status says the same either way; notifications follow
	// spec.notifications, apart from this. A session writes two routine events on its way to
	// Working: 20,000 API writes in a fan-out of 10,000.
	// +optional
	Routine RoutineEvents `json:"routine,omitempty"`
}

// RoutineEvents says whether routine Kubernetes Events are recorded.
// +kubebuilder:validation:Enum=Record;Omit
type RoutineEvents string

const (
	// RoutineEventsRecord records routine events (the default).
	RoutineEventsRecord RoutineEvents = "Record"
	// RoutineEventsOmit leaves routine events out.
	RoutineEventsOmit RoutineEvents = "Omit"
)

// OmitsRoutineEvents reports whether the Project leaves routine Kubernetes Events out.
func (p *Project) OmitsRoutineEvents() bool {
	return p != nil && p.Spec.Events != nil && p.Spec.Events.Routine == RoutineEventsOmit
}

// BudgetExhaustedPolicy says what running sessions do when the budget is spent.
// +kubebuilder:validation:Enum=FinishTurn;Continue
type BudgetExhaustedPolicy string

const (
	// BudgetFinishTurn: a running session finishes its agent's current turn, then waits Queued
	// (BudgetExhausted) until the window resets; its conversation is kept and resumed.
	BudgetFinishTurn BudgetExhaustedPolicy = "FinishTurn"
	// BudgetContinue: running sessions go on; only new sessions wait.
	BudgetContinue BudgetExhaustedPolicy = "Continue"
)

// BudgetSpec caps a Project's spend.
// +kubebuilder:validation:XValidation:rule="has(self.dailyUSD) || has(self.monthlyUSD) || has(self.dailyTokens) || has(self.monthlyTokens)",message="a budget needs at least one cap: dailyUSD, monthlyUSD, dailyTokens or monthlyTokens"
type BudgetSpec struct {
	// DailyUSD caps the spend of each calendar day in timeZone, in US dollars ("50", "12.5").
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	DailyUSD string `json:"dailyUSD,omitempty"`
	// MonthlyUSD caps the spend of each calendar month in timeZone, in US dollars.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	MonthlyUSD string `json:"monthlyUSD,omitempty"`
	// DailyTokens caps the tokens of each day (input, output, cache reads and writes), for
	// providers billed by the token or models without a price.
	// +optional
	// +kubebuilder:validation:Minimum=1
	DailyTokens *int64 `json:"dailyTokens,omitempty"`
	// MonthlyTokens caps the tokens of each month.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MonthlyTokens *int64 `json:"monthlyTokens,omitempty"`
	// TimeZone the days and months are counted in, an IANA name ("Europe/Berlin"). Default UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:default=UTC
	TimeZone string `json:"timeZone,omitempty"`
	// OnExhausted says what running sessions do at the cap: FinishTurn (default) or Continue.
	// New sessions wait Queued (BudgetExhausted) either way, and resume when the window resets.
	// +optional
	// +kubebuilder:default=FinishTurn
	OnExhausted BudgetExhaustedPolicy `json:"onExhausted,omitempty"`
	// NotifyAtPercent sends one action-priority notification per window when spend reaches this
	// share of a cap. Default 80.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	NotifyAtPercent *int32 `json:"notifyAtPercent,omitempty"`
}

// DefaultBudgetNotifyPercent is NotifyAtPercent's default.
const DefaultBudgetNotifyPercent = 80

// DefaultMaxCommentBytes bounds each forwarded comment when a Project sets no
// feedback.maxCommentBytes.
const DefaultMaxCommentBytes = 2000

// FeedbackSpec shapes the feedback forwarded to agents.
type FeedbackSpec struct {
	// CommandPrefix, when set, forwards a conversation comment only when it starts with the prefix
	// (case-insensitive, then a space or a line break), without it: "/shepherd fix the tests".
	// Everything else in the conversation stays between humans. Review threads and review
	// summaries are feedback on the code by nature and need no prefix.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`!self.matches('\\s')`,message="commandPrefix must be one word without spaces, such as /shepherd"
	CommandPrefix string `json:"commandPrefix,omitempty"`

	// MaxCommentBytes bounds the text of each comment, review and thread forwarded to the agent;
	// a longer one is cut and says so. Default 2000.
	// +optional
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=8000
	MaxCommentBytes *int32 `json:"maxCommentBytes,omitempty"`
}

// AuthorAssociation is an author's relation to the repository, in GitHub's terms
// (author_association). Gitea has no such field; Shepherd asks Gitea for the author's
// permission on the repository (see docs/security.md). Linear comments are Member.
// +kubebuilder:validation:Enum=Owner;Member;Collaborator;Contributor;FirstTimeContributor;FirstTimer;Mannequin;None
type AuthorAssociation string

const (
	AssociationOwner                AuthorAssociation = "Owner"
	AssociationMember               AuthorAssociation = "Member"
	AssociationCollaborator         AuthorAssociation = "Collaborator"
	AssociationContributor          AuthorAssociation = "Contributor"
	AssociationFirstTimeContributor AuthorAssociation = "FirstTimeContributor"
	AssociationFirstTimer           AuthorAssociation = "FirstTimer"
	AssociationMannequin            AuthorAssociation = "Mannequin"
	AssociationNone                 AuthorAssociation = "None"
)

// DefaultTrustedAssociations are heard when a Project sets no trustedAuthors.
var DefaultTrustedAssociations = []AuthorAssociation{AssociationOwner, AssociationMember, AssociationCollaborator}

// TrustedAuthorsSpec lists whose comments reach the agent.
type TrustedAuthorsSpec struct {
	// Associations whose comments are heard. Absent: Owner, Member and Collaborator. An empty
	// list hears only the logins below.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:default={Owner,Member,Collaborator}
	Associations []AuthorAssociation `json:"associations"`

	// Logins heard whatever their association, for example a bot that posts review findings
	// ("renovate[bot]"). Compared without regard to case, as the forges do.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	Logins []string `json:"logins,omitempty"`
}

// RepositorySpec locates the repository and says how to authenticate to it.
type RepositorySpec struct {
	// URL git clones from.
	// +required
	URL RepositoryURL `json:"url"`

	// DefaultBranch is the base of new branches and pull requests. Defaults to "main".
	// +optional
	// +kubebuilder:default=main
	DefaultBranch BranchName `json:"defaultBranch,omitempty"`

	// Credentials for git and the SCM API. Leave empty for a public repository that agents only
	// read (no pull requests can be opened without credentials).
	// +optional
	Credentials *RepositoryCredentials `json:"credentials,omitempty"`
}

// RepositoryCredentials holds exactly one way to authenticate.
// +kubebuilder:validation:XValidation:rule=`has(self.secretRef) != has(self.githubApp)`,message="set exactly one of credentials.secretRef (a token) or credentials.githubApp"
type RepositoryCredentials struct {
	// SecretRef selects a Secret key holding a personal or fine-grained access token.
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`

	// GitHubApp authenticates as a GitHub App installation. The manager mints short-lived,
	// repository-scoped tokens from it; the private key never reaches an agent pod.
	// +optional
	GitHubApp *GitHubAppCredentials `json:"githubApp,omitempty"`
}

// GitHubAppCredentials identifies a GitHub App installation.
type GitHubAppCredentials struct {
	// AppID is the numeric id of the GitHub App.
	// +required
	// +kubebuilder:validation:Minimum=1
	AppID int64 `json:"appID"`

	// InstallationID is the numeric id of the App's installation on the repository's owner.
	// +required
	// +kubebuilder:validation:Minimum=1
	InstallationID int64 `json:"installationID"`

	// PrivateKeySecretRef selects the Secret key holding the App's PEM private key.
	// +required
	PrivateKeySecretRef SecretKeyRef `json:"privateKeySecretRef"`
}

// SCMProvider names a supported forge.
// +kubebuilder:validation:Enum=github;gitea
type SCMProvider string

// The supported forges. Each has an adapter in internal/scm/<provider>.
const (
	SCMGitHub SCMProvider = "github"
	SCMGitea  SCMProvider = "gitea"
)

// SCMSpec configures the forge adapter.
// +kubebuilder:validation:XValidation:rule=`!has(self.webhookPollInterval) || !has(self.pollInterval) || duration(self.webhookPollInterval) >= duration(self.pollInterval)`,message="webhookPollInterval must not be shorter than pollInterval"
type SCMSpec struct {
	// Provider of the forge: github (default) or gitea.
	// +optional
	// +kubebuilder:default=github
	Provider SCMProvider `json:"provider,omitempty"`

	// APIURL is the forge's API base, for GitHub Enterprise or a self-hosted Gitea. Defaults to
	// https://api.github.com for github.
	// +optional
	APIURL HTTPURL `json:"apiURL,omitempty"`

	// WebhookSecretRef selects the Secret key holding the webhook signing secret. With webhooks
	// configured, changes land in seconds and polling is only a safety net.
	// +optional
	WebhookSecretRef *SecretKeyRef `json:"webhookSecretRef,omitempty"`

	// PollInterval is the longest any pull request's state may go unrefreshed while no webhooks
	// arrive from the repository. While verified webhooks arrive, changes land within seconds and
	// the safety-net poll relaxes to webhookPollInterval, returning to this interval when
	// webhooks fall silent for that long. Defaults to 1m; between 10s and 1h.
	// +optional
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('1h')`,message="pollInterval must be between 10s and 1h"
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`

	// WebhookPollInterval is the safety-net poll while verified webhooks arrive from the
	// repository (they bring each change within seconds; the poll catches lost deliveries).
	// Defaults to 10 times pollInterval, at most 1h. Set it equal to pollInterval to poll at
	// pollInterval whatever webhooks do. Between 10s and 1h, and not shorter than pollInterval.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('1h')`,message="webhookPollInterval must be between 10s and 1h"
	WebhookPollInterval *metav1.Duration `json:"webhookPollInterval,omitempty"`
}

// TrackerProvider names a supported issue tracker.
// +kubebuilder:validation:Enum=github;gitea;linear
type TrackerProvider string

// The supported trackers. Each has an adapter in internal/tracker/<provider>.
const (
	TrackerGitHub TrackerProvider = "github"
	TrackerGitea  TrackerProvider = "gitea"
	TrackerLinear TrackerProvider = "linear"
)

// TrackerSpec configures the issue tracker.
// +kubebuilder:validation:XValidation:rule=`self.provider != 'linear' || has(self.linear)`,message="tracker.linear is required when tracker.provider is linear"
// +kubebuilder:validation:XValidation:rule=`self.provider == 'linear' || !has(self.linear)`,message="tracker.linear is only valid when tracker.provider is linear"
type TrackerSpec struct {
	// Provider of the tracker: github and gitea use the repository's issues; linear needs
	// tracker.linear.
	// +required
	Provider TrackerProvider `json:"provider"`

	// Linear configures the Linear tracker.
	// +optional
	Linear *LinearSpec `json:"linear,omitempty"`

	// BranchPrefix starts every branch made from an issue. Defaults to "shepherd/".
	// +optional
	// +kubebuilder:default="shepherd/"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9][A-Za-z0-9._-]*/)*$`
	BranchPrefix string `json:"branchPrefix,omitempty"`

	// PromptTemplate is a Go text/template that turns an issue into the agent's first prompt. It
	// sees .Issue (ID, Title, Body, URL, Labels), .Project and .Branch. Empty uses the built-in
	// template.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	PromptTemplate string `json:"promptTemplate,omitempty"`

	// OnIssueClosed is what becomes of a session whose tracker issue is closed (done or
	// cancelled) while it works: Stop (the default) ends it Done with reason IssueClosed, its
	// pod deleted and its Worktree kept as after any Done; Ignore lets it go on.
	// +optional
	// +kubebuilder:default=Stop
	OnIssueClosed IssueClosedPolicy `json:"onIssueClosed,omitempty"`

	// IssuePollInterval is how often the issues of the Project's working sessions are checked
	// for closing: one tracker query for all of them (GitHub and Gitea list the issues closed
	// since the oldest session started; Linear asks for the issues by number). 1m..24h,
	// default 10m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('1m') && duration(self) <= duration('24h')`,message="issuePollInterval must be between 1m and 24h"
	IssuePollInterval *metav1.Duration `json:"issuePollInterval,omitempty"`
}

// IssueClosedPolicy says what a session does when its tracker issue closes.
// +kubebuilder:validation:Enum=Stop;Ignore
type IssueClosedPolicy string

const (
	// IssueClosedStop ends the session (Done, IssueClosed).
	IssueClosedStop IssueClosedPolicy = "Stop"
	// IssueClosedIgnore lets the session go on.
	IssueClosedIgnore IssueClosedPolicy = "Ignore"
)

// LinearSpec configures the Linear GraphQL API.
type LinearSpec struct {
	// TeamKey is the Linear team's key, the prefix of its issue ids (ENG in ENG-123).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Z0-9]*$`
	TeamKey string `json:"teamKey"`

	// APIKeySecretRef selects the Secret key holding a Linear API key.
	// +required
	APIKeySecretRef SecretKeyRef `json:"apiKeySecretRef"`

	// APIURL overrides the Linear GraphQL endpoint. Defaults to https://api.linear.app/graphql.
	// +optional
	APIURL HTTPURL `json:"apiURL,omitempty"`
}

// WorkspaceMode says how a checkout is made.
// +kubebuilder:validation:Enum=Worktree;Clone
type WorkspaceMode string

const (
	// WorkspaceWorktree adds a git worktree from the Project's mirror: fast and small, shares
	// history with the mirror on one volume.
	WorkspaceWorktree WorkspaceMode = "Worktree"
	// WorkspaceClone makes an independent clone, using the mirror as a reference when present.
	WorkspaceClone WorkspaceMode = "Clone"
)

// WorkspaceSpec says how checkouts are made and stored.
// +kubebuilder:validation:XValidation:rule=`!has(self.spareWorktrees) || self.spareWorktrees == 0 || !has(self.mode) || self.mode == 'Worktree'`,message="spareWorktrees needs mode Worktree: spares are worktrees of the Project's mirror"
type WorkspaceSpec struct {
	// Mode of new checkouts: Worktree (default) or Clone.
	// +optional
	// +kubebuilder:default=Worktree
	Mode WorkspaceMode `json:"mode,omitempty"`

	// Storage of the volumes that hold checkouts and the mirror.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`

	// SharedPaths are paths relative to the checkout root that are served from a per-Project cache
	// volume instead of each checkout (the cluster form of symlinking node_modules). Before the
	// setup commands run, each becomes a symlink to the directory "shared/<path>" of the Project's
	// workspace volume, ignored by git; files git tracks there make the prepare fail, anything
	// else found there is moved to the checkout's git dir. In clone mode the Project's workspace
	// volume is made for this cache and mounted in every pod of the Project beside its own.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:XValidation:rule=`self.all(p, !p.split('/').exists(s, s == '..' || s == '.' || s == '.git'))`,message="sharedPaths must stay inside the checkout: no '.', '..' or '.git' parts"
	// +kubebuilder:validation:XValidation:rule=`self.all(p, self.all(q, !p.startsWith(q + '/')))`,message="sharedPaths must not nest: list only the outer path (a path inside a shared path is already in the cache)"
	SharedPaths []string `json:"sharedPaths,omitempty"`

	// Setup commands run in the checkout after it is created, in order. A failure is reported
	// in the Worktree's status (SetupSucceeded=False) and leaves the checkout usable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Setup []SetupCommand `json:"setup,omitempty"`

	// SpareWorktrees is how many checkouts of the base branch (worktree mode only) are kept made
	// ahead of time on the Project's volume. A new session claims one (a rename on the volume
	// and a switch of its branch) instead of writing the whole tree, so its agent starts in about
	// the time of the fetch; the session's runner then makes a new spare in the background while
	// its agent works. Each spare costs the disk of one checkout. 0 (default) keeps none. Setup
	// commands still run in the claimed checkout.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=8
	SpareWorktrees int32 `json:"spareWorktrees,omitempty"`
}

// StorageSpec describes a volume.
type StorageSpec struct {
	// StorageClassName of the PersistentVolumeClaims. Empty uses the cluster's default class.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Size of each checkout volume. Defaults to 10Gi; at most 10Ti.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`quantity(string(self)).compareTo(quantity('10Ti')) <= 0 && quantity(string(self)).isGreaterThan(quantity('0'))`,message="storage size must be more than 0 and at most 10Ti"
	Size *resource.Quantity `json:"size,omitempty"`

	// AccessMode of the volumes. ReadWriteOnce (default) pins a checkout's sessions to one node;
	// ReadWriteMany lets sessions on different nodes share a Worktree.
	// +optional
	// +kubebuilder:default=ReadWriteOnce
	// +kubebuilder:validation:Enum=ReadWriteOnce;ReadWriteMany;ReadWriteOncePod
	AccessMode string `json:"accessMode,omitempty"`
}

// SetupCommand is one command run in a fresh checkout. It is an argument list, never a shell
// string; write ["sh", "-c", "..."] to use a shell on purpose.
type SetupCommand struct {
	// Name identifies the command in status and logs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Command is the program and its arguments.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command"`

	// Timeout of the command. Defaults to 10m; between 1s and 2h.
	// +optional
	// +kubebuilder:default="10m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('1s') && duration(self) <= duration('2h')`,message="setup timeout must be between 1s and 2h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// ReactionAction is what a reaction does.
// +kubebuilder:validation:Enum=SendToAgent;Notify;Merge;None
type ReactionAction string

const (
	// ReactionSendToAgent sends a rendered message to the agent as a new turn.
	ReactionSendToAgent ReactionAction = "SendToAgent"
	// ReactionNotify notifies humans through the Project's notification routes.
	ReactionNotify ReactionAction = "Notify"
	// ReactionMerge merges the pull request, guarded by the head commit that was approved.
	ReactionMerge ReactionAction = "Merge"
	// ReactionNone turns the trigger off; the phase and condition still show it.
	ReactionNone ReactionAction = "None"
)

// MergeMethod is how a pull request is merged.
// +kubebuilder:validation:Enum=squash;merge;rebase
type MergeMethod string

const (
	MergeSquash MergeMethod = "squash"
	MergeMerge  MergeMethod = "merge"
	MergeRebase MergeMethod = "rebase"
)

// Priority orders notifications.
// +kubebuilder:validation:Enum=urgent;action;warning;info
type Priority string

const (
	// PriorityUrgent needs a human now: stuck, needs input, errored, escalations.
	PriorityUrgent Priority = "urgent"
	// PriorityAction asks a human to act: approved, merged.
	PriorityAction Priority = "action"
	// PriorityWarning reports trouble Shepherd is handling: CI failed, changes requested.
	PriorityWarning Priority = "warning"
	// PriorityInfo is for the record.
	PriorityInfo Priority = "info"
)

// Reaction configures what happens on one trigger.
// +kubebuilder:validation:XValidation:rule=`self.action == 'Merge' || !has(self.mergeMethod)`,message="mergeMethod is only valid with action Merge"
// +kubebuilder:validation:XValidation:rule=`self.action == 'SendToAgent' || !has(self.message)`,message="message is only valid with action SendToAgent"
// +kubebuilder:validation:XValidation:rule=`self.action == 'Merge' || (!has(self.mergeWithoutApproval) && !has(self.mergeWithoutChecks))`,message="mergeWithoutApproval and mergeWithoutChecks are only valid with action Merge"
type Reaction struct {
	// Action to take.
	// +required
	Action ReactionAction `json:"action"`

	// Retries is how many times the action runs in one episode (for example one failing head
	// commit, counted across new commits until CI passes) before Shepherd escalates. 0..20.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	Retries *int32 `json:"retries,omitempty"`

	// EscalateAfter escalates (once, at urgent priority) when the episode lasts longer than this,
	// whatever the attempt count. Between 1m and 168h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('1m') && duration(self) <= duration('168h')`,message="escalateAfter must be between 1m and 168h"
	EscalateAfter *metav1.Duration `json:"escalateAfter,omitempty"`

	// Message is a Go text/template rendered into the text sent to the agent. It sees the
	// failure's details (.Checks, .Threads, .PullRequest). Empty uses the built-in message.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Message string `json:"message,omitempty"`

	// Priority of the notification this reaction sends, overriding the trigger's default.
	// +optional
	Priority Priority `json:"priority,omitempty"`

	// MergeMethod for action Merge: squash (default), merge or rebase.
	// +optional
	MergeMethod MergeMethod `json:"mergeMethod,omitempty"`

	// MergeWithoutApproval, for action Merge, lets Shepherd merge a pull request that no trusted
	// reviewer approved at its current head commit. By default a Merge waits for an approval
	// given at the very head it merges: an approval of an earlier head does not count, whatever
	// the forge's own review decision says (a push after the approval needs a new one). Set it
	// only for a repository where no human review is wanted.
	// +optional
	MergeWithoutApproval bool `json:"mergeWithoutApproval,omitempty"`

	// MergeWithoutChecks, for action Merge, lets Shepherd merge a pull request whose head has no
	// checks. By default a Merge waits for checks that ran and passed at the head it merges.
	// +optional
	MergeWithoutChecks bool `json:"mergeWithoutChecks,omitempty"`
}

// ReactionsSpec holds one optional Reaction per trigger. Merge is only meaningful, and only
// accepted, for approvedAndGreen.
type ReactionsSpec struct {
	// CIFailed: a required check failed on the pull request's head commit. Default: SendToAgent,
	// 2 retries.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	CIFailed *Reaction `json:"ciFailed,omitempty"`

	// ChangesRequested: a reviewer requested changes or left unresolved threads. Default:
	// SendToAgent, escalate after 30m.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	ChangesRequested *Reaction `json:"changesRequested,omitempty"`

	// Commented: trusted people or bots commented on the pull request's conversation, or left a
	// review summary without requesting changes. Each comment is forwarded once; a question is
	// forwarded as a question, not as a change request. Default: SendToAgent. Set None to keep
	// the conversation between humans.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	Commented *Reaction `json:"commented,omitempty"`

	// MergeConflicts: the pull request conflicts with its base. Default: SendToAgent, escalate
	// after 15m.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	MergeConflicts *Reaction `json:"mergeConflicts,omitempty"`

	// ApprovedAndGreen: approved, checks passing, mergeable. Default: Notify.
	// +optional
	ApprovedAndGreen *Reaction `json:"approvedAndGreen,omitempty"`

	// Stuck: the agent has been idle past activity.stuckAfter. Default: Notify (urgent).
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	Stuck *Reaction `json:"stuck,omitempty"`

	// NeedsInput: the agent asked a question. Default: Notify (urgent).
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	NeedsInput *Reaction `json:"needsInput,omitempty"`

	// Exited: the agent process ended without a pull request. Default: Notify. SendToAgent is
	// refused: there is no agent left to send to (set the session Running again to restart it).
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.action != 'Merge'`,message="action Merge is only valid for approvedAndGreen"
	// +kubebuilder:validation:XValidation:rule=`self.action != 'SendToAgent'`,message="action SendToAgent is not valid for exited: the agent has exited; use Notify or None"
	Exited *Reaction `json:"exited,omitempty"`
}

// NotificationsSpec routes events by priority.
type NotificationsSpec struct {
	// Routes send events of the listed priorities to a webhook or Slack.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Routes []NotificationRoute `json:"routes,omitempty"`
}

// NotificationRoute sends events of some priorities to one destination.
// +kubebuilder:validation:XValidation:rule=`has(self.webhook) != has(self.slack)`,message="set exactly one of webhook or slack on each notification route"
type NotificationRoute struct {
	// Name identifies the route in status and events.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Priorities this route receives.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	Priorities []Priority `json:"priorities"`

	// Webhook posts a JSON body signed with HMAC-SHA256 (header X-Shepherd-Signature-256).
	// +optional
	Webhook *WebhookTarget `json:"webhook,omitempty"`

	// Slack posts to a Slack incoming webhook.
	// +optional
	Slack *SlackTarget `json:"slack,omitempty"`
}

// WebhookTarget is an HTTP endpoint that receives signed notifications.
type WebhookTarget struct {
	// URL that receives the POST.
	// +required
	URL HTTPURL `json:"url"`

	// SecretRef selects the Secret key holding the HMAC signing secret.
	// +required
	SecretRef SecretKeyRef `json:"secretRef"`
}

// SlackTarget is a Slack incoming webhook.
type SlackTarget struct {
	// WebhookURLSecretRef selects the Secret key holding the incoming-webhook URL (the URL is
	// itself a credential).
	// +required
	WebhookURLSecretRef SecretKeyRef `json:"webhookURLSecretRef"`
}

// LimitsSpec bounds what the Project may run at once.
type LimitsSpec struct {
	// MaxConcurrentSessions is the most sessions with a running agent; the rest wait as Queued,
	// oldest first. Unset means no limit. 1..10000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxConcurrentSessions *int32 `json:"maxConcurrentSessions,omitempty"`

	// SessionLimits are every session's maxDuration and maxTurns; a session's spec.limits
	// overrides each. Unset means none.
	SessionLimits `json:",inline"`
}

// ActivitySpec holds the thresholds that turn agent silence into a phase.
// +kubebuilder:validation:XValidation:rule=`!has(self.idleAfter) || !has(self.stuckAfter) || duration(self.idleAfter) < duration(self.stuckAfter)`,message="activity.idleAfter must be shorter than activity.stuckAfter"
type ActivitySpec struct {
	// IdleAfter: no agent activity for this long marks it idle. Default 5m; 10s..24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('24h')`,message="idleAfter must be between 10s and 24h"
	IdleAfter *metav1.Duration `json:"idleAfter,omitempty"`

	// StuckAfter: no agent activity for this long, with no pull request progress, makes the
	// session Stuck. Default 10m; 1m..72h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('1m') && duration(self) <= duration('72h')`,message="stuckAfter must be between 1m and 72h"
	StuckAfter *metav1.Duration `json:"stuckAfter,omitempty"`

	// GracePeriod: how long a missing or contradictory signal (pod gone, runner silent) is
	// tolerated before the agent is declared gone. Default 2m; 10s..1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('1h')`,message="gracePeriod must be between 10s and 1h"
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`

	// SpawnDeadline: how long an agent pod may take from its creation to its runner's first
	// report (scheduling, pulling images, preparing the checkout). Past it the session is
	// Stalled (reason SpawnDeadlineExceeded) with what holds the pod up, for example the
	// scheduler's message for an unschedulable pod; the pod is kept, and the session goes on
	// if it starts later. Default 10m; 10s..24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('24h')`,message="spawnDeadline must be between 10s and 24h"
	SpawnDeadline *metav1.Duration `json:"spawnDeadline,omitempty"`

	// GraceObservations: the number of consecutive observations a missing signal must persist,
	// in addition to gracePeriod, before it counts. Default 3; 1..100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	GraceObservations *int32 `json:"graceObservations,omitempty"`
}

// WorktreeDisposition is what happens to a session's own Worktree when the session ends.
// +kubebuilder:validation:Enum=Keep;Remove
type WorktreeDisposition string

const (
	// WorktreeKeep leaves the Worktree Present.
	WorktreeKeep WorktreeDisposition = "Keep"
	// WorktreeRemove sets the Worktree Absent: the checkout goes, the record and branch stay.
	WorktreeRemove WorktreeDisposition = "Remove"
)

// CleanupSpec says what happens once a session has finished. The agent pod is always removed
// when a session reaches a terminal phase.
type CleanupSpec struct {
	// WorktreeAfterMerge: Keep (default) or Remove the session's own Worktree after its pull
	// request merged. Worktrees named by worktreeRef are never touched.
	// +optional
	// +kubebuilder:default=Keep
	WorktreeAfterMerge WorktreeDisposition `json:"worktreeAfterMerge,omitempty"`
}

// BacklogSpec spawns a session for each tracker issue that matches a query.
// +kubebuilder:validation:XValidation:rule=`!has(self.claimedLabel) || !(self.claimedLabel in self.labels)`,message="backlog.claimedLabel must differ from the query labels, or claimed issues would be picked up again"
type BacklogSpec struct {
	// Labels an issue must all carry to be picked up.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	Labels []string `json:"labels"`

	// MaxConcurrent is the most backlog sessions not yet finished at once. 1..1000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxConcurrent int32 `json:"maxConcurrent"`

	// ClaimedLabel replaces the query labels when a session is created. Default "agent:claimed".
	// +optional
	// +kubebuilder:default="agent:claimed"
	// +kubebuilder:validation:MaxLength=100
	ClaimedLabel string `json:"claimedLabel,omitempty"`

	// InProgressLabel is added when the session's agent starts working. Default "agent:in-progress".
	// +optional
	// +kubebuilder:default="agent:in-progress"
	// +kubebuilder:validation:MaxLength=100
	InProgressLabel string `json:"inProgressLabel,omitempty"`

	// DoneLabel is added when the session's pull request merged. Default "agent:done".
	// +optional
	// +kubebuilder:default="agent:done"
	// +kubebuilder:validation:MaxLength=100
	DoneLabel string `json:"doneLabel,omitempty"`

	// Interval between tracker queries. Default 1m; 10s..24h.
	// +optional
	// +kubebuilder:default="1m0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule=`duration(self) >= duration('10s') && duration(self) <= duration('24h')`,message="backlog interval must be between 10s and 24h"
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// SchedulingSpec places the Project's pods. Pods already running keep their placement; new
// pods (a new session, a restore, a checkout pod) get the current one.
type SchedulingSpec struct {
	// NodeSelector: the pods run only on nodes with all these labels, for example
	// {"node-pool": "agents"}.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, size(k) <= 317 && size(self[k]) <= 63)`,message="nodeSelector keys must be at most 317 characters (prefix/name) and values at most 63"
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the pods run on nodes with matching taints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule=`self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])`,message="toleration operator must be Exists or Equal"
	// +kubebuilder:validation:XValidation:rule=`self.all(t, !has(t.effect) || t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])`,message="toleration effect must be NoSchedule, PreferNoSchedule, NoExecute, or empty for all effects"
	// +kubebuilder:validation:XValidation:rule=`self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')`,message="a toleration with operator Exists must not set a value"
	// +kubebuilder:validation:XValidation:rule=`self.all(t, has(t.key) && t.key != '' || has(t.operator) && t.operator == 'Exists')`,message="a toleration without a key must use operator Exists (it then tolerates every taint)"
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName of the pods; the PriorityClass must exist.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// RuntimeClassName runs the pods under a sandboxing runtime (gVisor, Kata Containers); the
	// RuntimeClass must exist. Empty uses the node's default runtime.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
}

// NetworkSpec says where agent pods may connect. Egress is closed by default: an agent pod
// reaches the cluster's DNS pods, the manager's runner channel and the egress proxy, and nothing
// else; the runner reaches the forge (through the manager) and the model API (through the egress
// proxy) on the agent's behalf.
type NetworkSpec struct {
	// Egress opens more destinations to the agent.
	// +optional
	Egress *EgressSpec `json:"egress,omitempty"`
}

// EgressSpec is an allowlist of destinations.
type EgressSpec struct {
	// Hosts are host names the agent may reach over HTTP and HTTPS through the egress proxy
	// (HTTP_PROXY and HTTPS_PROXY point at it): an exact name (registry.npmjs.org) or a wildcard
	// for its subdomains (*.example.org, which does not match example.org itself), optionally
	// with a port (example.org:8443; default ports 80 and 443). The proxy checks the name of
	// every request (HTTP CONNECT and the TLS server name), resolves it itself, and refuses
	// names that resolve to link-local, loopback or cluster addresses.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=260
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?$`
	Hosts []string `json:"hosts,omitempty"`

	// Allow lists networks the agent may reach directly, for traffic that is not HTTP(S) or
	// for in-cluster services. A network that contains the link-local range (cloud metadata) or
	// the cluster's pod and service ranges still excludes them unless it lies within them (name
	// them on purpose, for example 10.96.0.10/32).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Allow []EgressRule `json:"allow,omitempty"`
}

// EgressRule allows traffic to one network on some ports.
type EgressRule struct {
	// CIDR of the destination network, for example 140.82.112.0/20.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`isCIDR(self)`,message="cidr must be a CIDR such as 10.0.0.0/8 or 2001:db8::/32"
	CIDR string `json:"cidr"`

	// Ports allowed on that network. Empty allows every port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// ProjectStatus is what the Project controller observed.
type ProjectStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled, RepositoryReachable, CredentialsValid, MirrorReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// DefaultBranch is the repository's default branch as the forge reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	DefaultBranch string `json:"defaultBranch,omitempty"`

	// Mirror is the state of the repository mirror used by worktree mode.
	// +optional
	Mirror *MirrorStatus `json:"mirror,omitempty"`

	// Sessions counts this Project's sessions.
	// +optional
	Sessions SessionCounts `json:"sessions,omitempty"`

	// Notifications reports the state of each notification route.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Notifications []NotificationRouteStatus `json:"notifications,omitempty"`

	// Backlog reports the backlog query.
	// +optional
	Backlog *BacklogStatus `json:"backlog,omitempty"`

	// Webhook says where the forge delivers this Project's webhooks; set when
	// spec.scm.webhookSecretRef is.
	// +optional
	Webhook *WebhookStatus `json:"webhook,omitempty"`

	// Spend is what the Project's sessions spent in the current day and month (metered by the
	// model proxy), in spec.budget.timeZone (UTC without a budget).
	// +optional
	Spend *SpendStatus `json:"spend,omitempty"`
}

// SpendStatus is a Project's spend in its current windows.
type SpendStatus struct {
	// Day is the current calendar day's spend.
	// +optional
	Day SpendWindow `json:"day,omitempty"`
	// Month is the current calendar month's spend.
	// +optional
	Month SpendWindow `json:"month,omitempty"`
}

// SpendWindow is the spend of one day or month.
type SpendWindow struct {
	// Start names the window: a date ("2026-12-06") or a month ("2026-12").
	// +optional
	// +kubebuilder:validation:MaxLength=10
	Start string `json:"start,omitempty"`
	// CostUSD spent in the window.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
	// Tokens used in the window.
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
	// Notified is true once the window's notifyAtPercent notification went out (once a window).
	// +optional
	Notified bool `json:"notified,omitempty"`
	// ByAgent splits the window's spend by agent type.
	// +optional
	// +listType=map
	// +listMapKey=agent
	// +kubebuilder:validation:MaxItems=16
	ByAgent []AgentSpend `json:"byAgent,omitempty"`
	// ByModel splits the window's spend by model (as the requests named it).
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=33
	ByModel []ModelSpend `json:"byModel,omitempty"`
}

// ModelSpend is one model's share of a window.
type ModelSpend struct {
	// +required
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model"`
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
}

// AgentSpend is one agent type's share of a window.
type AgentSpend struct {
	// +required
	// +kubebuilder:validation:MaxLength=64
	Agent string `json:"agent"`
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostUSD string `json:"costUSD,omitempty"`
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
}

// WebhookStatus locates a Project's webhook receiver.
type WebhookStatus struct {
	// Path of the Project's deliveries on the manager's webhook receiver
	// (/hooks/<namespace>/<project>): the forge's webhook URL is the receiver's external address
	// followed by this path. Deliveries there are verified with this Project's secret alone.
	// +optional
	// +kubebuilder:validation:MaxLength=330
	Path string `json:"path,omitempty"`
}

// MirrorStatus describes the Project's mirror.
type MirrorStatus struct {
	// ClaimName is the PersistentVolumeClaim holding the mirror.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`
	// Path of the bare mirror inside the volume, as mounted in agent pods. Each session fetches
	// it (under a lock) before adding its worktree, so it is as fresh as the newest session.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`
	// LastFetchTime is when a prepare last fetched the mirror and added a checkout from it: the
	// newest Ready of the Project's worktree-mode Worktrees. Unset until the first.
	// +optional
	LastFetchTime *metav1.Time `json:"lastFetchTime,omitempty"`
}

// SessionCounts counts sessions by state.
type SessionCounts struct {
	// Total sessions of the Project.
	// +optional
	Total int32 `json:"total,omitempty"`
	// Active sessions: admitted and not terminal.
	// +optional
	Active int32 `json:"active,omitempty"`
	// Queued sessions waiting for a slot.
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// ByPhase counts sessions by phase.
	// +optional
	ByPhase map[string]int32 `json:"byPhase,omitempty"`
}

// NotificationRouteStatus reports one route.
type NotificationRouteStatus struct {
	// Name of the route.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Delivered counts notifications delivered.
	// +optional
	Delivered int64 `json:"delivered,omitempty"`
	// Failed counts notifications given up on.
	// +optional
	Failed int64 `json:"failed,omitempty"`
	// LastError is the last delivery error.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// LastFailureTime is when the last notification was given up on.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
}

// BacklogStatus reports the backlog query.
type BacklogStatus struct {
	// LastQueryTime is when the tracker was last queried.
	// +optional
	LastQueryTime *metav1.Time `json:"lastQueryTime,omitempty"`
	// Matching is the number of matching issues at the last query.
	// +optional
	Matching int32 `json:"matching,omitempty"`
	// Spawned counts sessions the backlog created.
	// +optional
	Spawned int32 `json:"spawned,omitempty"`
}

// Project is a repository and the defaults every session on it shares.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 63 && self.metadata.name.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="name must be a DNS label (at most 63 lowercase letters, digits and '-'): Shepherd uses it in labels and child names"
// +kubebuilder:resource:shortName=proj,categories=shepherd
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.repository.url`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agent.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.sessions.active`
// +kubebuilder:printcolumn:name="Queued",type=integer,JSONPath=`.status.sessions.queued`
// +kubebuilder:printcolumn:name="Today",type=string,JSONPath=`.status.spend.day.costUSD`,priority=1,description="US dollars the sessions spent today (metered)"
// +kubebuilder:printcolumn:name="Month",type=string,JSONPath=`.status.spend.month.costUSD`,priority=1,description="US dollars the sessions spent this month (metered)"
// +kubebuilder:printcolumn:name="Budget",type=string,JSONPath=`.status.conditions[?(@.type=="BudgetAvailable")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Project struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired configuration.
	// +required
	Spec ProjectSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status ProjectStatus `json:"status,omitempty"`
}

// ProjectList is a list of Projects.
//
// +kubebuilder:object:root=true
type ProjectList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Project `json:"items"`
}
