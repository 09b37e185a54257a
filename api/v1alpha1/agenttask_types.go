package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SelectionPolicy is how an AgentTask chooses among its attempts.
// +kubebuilder:validation:Enum=FirstGreen;Score;Human
type SelectionPolicy string

const (
	// SelectFirstGreen chooses the first attempt whose pull request's checks pass.
	SelectFirstGreen SelectionPolicy = "FirstGreen"
	// SelectScore waits until every attempt has settled, then chooses the best score among the
	// attempts whose checks pass (docs/best-of-n.md).
	SelectScore SelectionPolicy = "Score"
	// SelectHuman waits for a person: kubectl shepherd pick, the dashboard, or spec.selection.pick.
	SelectHuman SelectionPolicy = "Human"
)

// TaskPhase is where an AgentTask is.
// +kubebuilder:validation:Enum=Running;WaitingForPick;Chosen;Merged;Failed
type TaskPhase string

const (
	// TaskRunning: the attempts work; none is chosen yet.
	TaskRunning TaskPhase = "Running"
	// TaskWaitingForPick: the policy needs a person (Human), or no attempt can be chosen
	// automatically while some can be picked by hand.
	TaskWaitingForPick TaskPhase = "WaitingForPick"
	// TaskChosen: one attempt was chosen; its pull request goes on to merge, the others stopped.
	TaskChosen TaskPhase = "Chosen"
	// TaskMerged: the chosen attempt's pull request merged.
	TaskMerged TaskPhase = "Merged"
	// TaskFailed: every attempt ended without a pull request that can be chosen, or the cost cap
	// stopped them first.
	TaskFailed TaskPhase = "Failed"
)

// IsTerminal reports whether nothing more happens to the task.
func (p TaskPhase) IsTerminal() bool { return p == TaskMerged || p == TaskFailed }

// AgentTaskSpec is one task given to several attempts; one attempt's pull request goes forward.
// +kubebuilder:validation:XValidation:rule=`has(self.issue) != has(self.prompt)`,message="set exactly one of spec.issue or spec.prompt"
// +kubebuilder:validation:XValidation:rule=`has(self.attempts) || has(self.variants)`,message="set spec.attempts (N of the same agent) or spec.variants (one attempt per variant)"
// +kubebuilder:validation:XValidation:rule=`!has(self.attempts) || !has(self.variants) || self.attempts == size(self.variants)`,message="spec.attempts must equal the number of spec.variants when both are set"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.issue) == has(self.issue) && (!has(self.issue) || self.issue == oldSelf.issue)`,message="spec.issue is immutable; create a new AgentTask for another issue"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.prompt) == has(self.prompt) && (!has(self.prompt) || self.prompt == oldSelf.prompt)`,message="spec.prompt is immutable"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.attempts) == has(self.attempts) && (!has(self.attempts) || self.attempts == oldSelf.attempts)`,message="spec.attempts is immutable"
// +kubebuilder:validation:XValidation:rule=`has(oldSelf.variants) == has(self.variants) && (!has(self.variants) || self.variants == oldSelf.variants)`,message="spec.variants is immutable"
type AgentTaskSpec struct {
	// ProjectRef names the Project every attempt works on. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="spec.projectRef is immutable"
	ProjectRef LocalObjectReference `json:"projectRef"`

	// Issue is the tracker issue every attempt works on (as AgentSession's spec.issue).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^(#?[1-9][0-9]{0,9}|[A-Z][A-Z0-9]{0,15}-[1-9][0-9]{0,9})$')`,message="issue must be an issue number such as 42 or #42, or a tracker key such as ENG-123"
	Issue string `json:"issue,omitempty"`

	// Prompt is the task in words (as AgentSession's spec.prompt).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Prompt string `json:"prompt,omitempty"`

	// Title of the pull requests when the task is a prompt.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`

	// Agent overrides the Project's agent for every attempt.
	// +optional
	Agent *AgentSpec `json:"agent,omitempty"`

	// Attempts is how many attempts run: N of the same agent, or the number of variants.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Attempts *int32 `json:"attempts,omitempty"`

	// Variants are one attempt each: an agent (type, model, image, extra instructions...) over
	// spec.agent and the Project's.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Variants []AttemptVariant `json:"variants,omitempty"`

	// Selection is how the attempt that goes forward is chosen. Defaults to the Project's
	// spec.selection, else FirstGreen.
	// +optional
	Selection *SelectionSpec `json:"selection,omitempty"`

	// MaxCostUSD caps the attempts' cost together, in US dollars ("5", "12.50"): when their sum
	// reaches it, the attempts still at work stop. Each attempt is also held to it alone.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[0-9]{1,6}(\.[0-9]{1,4})?$')`,message="maxCostUSD must be a dollar amount such as 5 or 12.50"
	MaxCostUSD string `json:"maxCostUSD,omitempty"`

	// Limits apply to each attempt (as AgentSession's spec.limits).
	// +optional
	Limits *SessionLimits `json:"limits,omitempty"`
}

// AttemptVariant is one attempt's agent.
type AttemptVariant struct {
	// Agent overrides spec.agent (and the Project's) for this attempt: type, model, image, extra
	// instructions.
	// +required
	Agent AgentSpec `json:"agent"`
}

// SelectionSpec chooses the attempt whose pull request goes forward.
type SelectionSpec struct {
	// Policy: FirstGreen (default), Score or Human. docs/best-of-n.md says what each costs.
	// +optional
	Policy SelectionPolicy `json:"policy,omitempty"`

	// Weights of the Score policy's terms, 0 to 100 each (defaults: checks 40, review 20,
	// diffSize 20, cost 10, time 10).
	// +optional
	Weights *ScoreWeights `json:"weights,omitempty"`

	// Pick is the attempt (its AgentSession's name) a person chose, under any policy: set by
	// `kubectl shepherd pick` or the dashboard. The attempt needs an open pull request.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Pick string `json:"pick,omitempty"`
}

// ScoreWeights weigh the Score policy's terms; each term is between 0 and 1.
type ScoreWeights struct {
	// Checks: 1 when the pull request's checks pass.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Checks *int32 `json:"checks,omitempty"`
	// Review: 1 approved, 0.5 no decision, 0 changes requested.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Review *int32 `json:"review,omitempty"`
	// DiffSize: the smallest diff among the attempts 1, the others by how much smaller than the
	// largest they are.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	DiffSize *int32 `json:"diffSize,omitempty"`
	// Cost: the cheapest attempt 1, the others by how much cheaper than the dearest.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Cost *int32 `json:"cost,omitempty"`
	// Time: the first to pass its checks 1, the others by how much sooner than the last.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Time *int32 `json:"time,omitempty"`
}

// AgentTaskStatus is what the controller observed and chose.
type AgentTaskStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase: Running, WaitingForPick, Chosen, Merged or Failed.
	// +optional
	Phase TaskPhase `json:"phase,omitempty"`

	// Conditions: Ready and Reconciling (kstatus).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Attempts are the attempts, in order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10
	Attempts []AttemptStatus `json:"attempts,omitempty"`

	// Progress is "<attempts at work>/<attempts>" (the ATTEMPTS column).
	// +optional
	// +kubebuilder:validation:MaxLength=8
	Progress string `json:"progress,omitempty"`

	// Leader is the attempt the policy ranks first so far.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Leader string `json:"leader,omitempty"`

	// Chosen is the attempt whose pull request goes forward, once chosen.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Chosen string `json:"chosen,omitempty"`

	// ChosenBy says how: the policy and why, or "pick" for a person's.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ChosenBy string `json:"chosenBy,omitempty"`

	// PullRequest is the chosen attempt's pull request.
	// +optional
	PullRequest *TaskPullRequest `json:"pullRequest,omitempty"`

	// CostUSD is the attempts' cost together.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	CostUSD string `json:"costUSD,omitempty"`
}

// AttemptStatus is one attempt as the task sees it.
type AttemptStatus struct {
	// Name of the attempt's AgentSession.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Agent type and Model of the attempt.
	// +optional
	Agent AgentType `json:"agent,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`
	// Phase of the attempt's session ("Deleted" when it is gone).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"`
	// PullRequest number, its checks, and its changed lines.
	// +optional
	PullRequest int64 `json:"pullRequest,omitempty"`
	// +optional
	Checks ChecksState `json:"checks,omitempty"`
	// +optional
	ChangedLines int32 `json:"changedLines,omitempty"`
	// CostUSD of the attempt.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	CostUSD string `json:"costUSD,omitempty"`
	// Score under the Score policy's weights, 0 to 100, once it has a pull request.
	// +optional
	// +kubebuilder:validation:MaxLength=8
	Score string `json:"score,omitempty"`
}

// TaskPullRequest is the task's pull request.
type TaskPullRequest struct {
	// +optional
	Number int64 `json:"number,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`
	// +optional
	State PullRequestState `json:"state,omitempty"`
}

// AgentTask gives one task to several agent attempts (the same agent N times, or different
// agents or models) and sends the best pull request forward: docs/best-of-n.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 56 && self.metadata.name.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="name must be a DNS label of at most 56 characters: each attempt is an AgentSession named <task>-<n>"
// +kubebuilder:resource:shortName=atask,categories=shepherd
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempts",type=string,JSONPath=`.status.progress`,description="attempts at work / attempts"
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="Chosen",type=string,JSONPath=`.status.chosen`
// +kubebuilder:printcolumn:name="PR",type=integer,JSONPath=`.status.pullRequest.number`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.costUSD`,description="US dollars the attempts spent together"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.selection.policy`,priority=1
type AgentTask struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AgentTaskSpec `json:"spec"`

	// +optional
	Status AgentTaskStatus `json:"status,omitempty"`
}

// AgentTaskList is a list of AgentTasks.
//
// +kubebuilder:object:root=true
type AgentTaskList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentTask `json:"items"`
}
