package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorktreeState is the desired state of a checkout.
// +kubebuilder:validation:Enum=Present;Absent
type WorktreeState string

const (
	// WorktreePresent keeps a usable checkout.
	WorktreePresent WorktreeState = "Present"
	// WorktreeAbsent removes the checkout but keeps the record and the branch; setting Present
	// again restores it from the branch.
	WorktreeAbsent WorktreeState = "Absent"
)

// WorktreeSpec is one isolated checkout on one branch.
// +kubebuilder:validation:XValidation:rule=`!has(oldSelf.mode) || (has(self.mode) && self.mode == oldSelf.mode)`,message="spec.mode cannot change once set; create a new Worktree"
type WorktreeSpec struct {
	// ProjectRef names the Project whose repository is checked out. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="spec.projectRef is immutable; create a new Worktree for another Project"
	ProjectRef LocalObjectReference `json:"projectRef"`

	// Branch checked out. Created from base when it does not exist. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule=`self == oldSelf`,message="spec.branch is immutable; create a new Worktree for another branch"
	Branch BranchName `json:"branch"`

	// Base is the commit-ish a new branch starts from. Defaults to the Project's default branch.
	// It is read only when the branch is created.
	// +optional
	Base GitRef `json:"base,omitempty"`

	// Mode: Worktree or Clone. Defaults to the Project's workspace mode; cannot change once set.
	// +optional
	Mode WorkspaceMode `json:"mode,omitempty"`

	// State: Present (default) or Absent. Absent removes the checkout and keeps the record and
	// the branch.
	// +optional
	// +kubebuilder:default=Present
	State WorktreeState `json:"state,omitempty"`

	// Adopt takes over a branch that already exists on the remote (and its checkout when one is
	// found) instead of refusing to reuse it.
	// +optional
	Adopt bool `json:"adopt,omitempty"`

	// Storage overrides the Project's workspace storage for this checkout.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`
}

// WorktreePhase is the lifecycle of a checkout.
// +kubebuilder:validation:Enum=Pending;Ready;Failed;Missing;Removing;Removed
type WorktreePhase string

const (
	// WorktreePending: the checkout is being made.
	WorktreePending WorktreePhase = "Pending"
	// WorktreeReady: the checkout is usable (setup may still have failed; see SetupSucceeded).
	WorktreeReady WorktreePhase = "Ready"
	// WorktreeFailed: no usable checkout could be made; see the Stalled condition.
	WorktreeFailed WorktreePhase = "Failed"
	// WorktreeMissing: the checkout's volume vanished (deleted, or recreated empty); the record
	// and the branch stay, and the next prepare restores the checkout from the branch. A checkout
	// directory deleted inside a volume that is still there is recreated by the next prepare.
	WorktreeMissing WorktreePhase = "Missing"
	// WorktreeRemoving: the checkout is being removed.
	WorktreeRemoving WorktreePhase = "Removing"
	// WorktreeRemoved: the checkout is gone (state Absent); the branch is kept.
	WorktreeRemoved WorktreePhase = "Removed"
)

// SetupState is the outcome of the setup commands. There is no Running: they run inside the
// prepare step, which reports once it is done, so Shepherd never observes them running and does
// not claim it (Pending covers "not finished yet").
// +kubebuilder:validation:Enum=Pending;Succeeded;Failed
type SetupState string

const (
	SetupPending   SetupState = "Pending"
	SetupSucceeded SetupState = "Succeeded"
	SetupFailed    SetupState = "Failed"
)

// SetupStatus reports the setup commands, apart from the checkout's lifecycle.
type SetupStatus struct {
	// State of the setup commands.
	// +optional
	State SetupState `json:"state,omitempty"`
	// FailedCommand names the command that failed.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	FailedCommand string `json:"failedCommand,omitempty"`
	// Error is the failure and the last lines of its output.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`
	// CompletionTime is when setup finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// WorktreeStatus is what the Worktree controller observed.
type WorktreeStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase of the checkout.
	// +optional
	Phase WorktreePhase `json:"phase,omitempty"`

	// Conditions: Ready, Reconciling, Stalled, SetupSucceeded, DeletionBlocked.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Mode in effect (the spec's, or the Project's default).
	// +optional
	Mode WorkspaceMode `json:"mode,omitempty"`

	// ClaimName is the PersistentVolumeClaim that holds the checkout.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// Path of the checkout inside the volume.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`

	// Head is the commit checked out.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Head string `json:"head,omitempty"`

	// UnpushedCommits counts commits on the branch that the remote does not have.
	// +optional
	UnpushedCommits int32 `json:"unpushedCommits,omitempty"`

	// Dirty is true when the checkout has uncommitted changes.
	// +optional
	Dirty bool `json:"dirty,omitempty"`

	// LastObservedTime is when the facts above were read from the checkout.
	// +optional
	LastObservedTime *metav1.Time `json:"lastObservedTime,omitempty"`

	// Setup reports the setup commands.
	// +optional
	Setup SetupStatus `json:"setup,omitempty"`

	// BoundSessions are the AgentSessions using this Worktree.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	BoundSessions []string `json:"boundSessions,omitempty"`
}

// Worktree is one isolated checkout on one branch. It outlives the sessions that use it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.size() <= 63 && self.metadata.name.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="name must be a DNS label (at most 63 lowercase letters, digits and '-'): Shepherd uses it in labels and child names"
// +kubebuilder:resource:shortName=wt,categories=shepherd
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.spec.branch`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Setup",type=string,JSONPath=`.status.setup.state`
// +kubebuilder:printcolumn:name="Dirty",type=boolean,JSONPath=`.status.dirty`
// +kubebuilder:printcolumn:name="Unpushed",type=integer,JSONPath=`.status.unpushedCommits`
// +kubebuilder:printcolumn:name="Head",type=string,JSONPath=`.status.head`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Worktree struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired checkout.
	// +required
	Spec WorktreeSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status WorktreeStatus `json:"status,omitempty"`
}

// WorktreeList is a list of Worktrees.
//
// +kubebuilder:object:root=true
type WorktreeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Worktree `json:"items"`
}
