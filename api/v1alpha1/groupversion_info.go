// Package v1alpha1 contains the Shepherd API: Project, Worktree, AgentSession, BudgetPolicy and AgentTask.
//
// The package depends only on k8s.io/apimachinery so that clients can import it without pulling
// in controller-runtime (enforced by depguard in .golangci.yml).
//
// +kubebuilder:object:generate=true
// +groupName=agents.shepherd.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every Shepherd kind.
	GroupVersion = schema.GroupVersion{Group: "agents.shepherd.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Shepherd kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Shepherd kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Project{}, &ProjectList{},
		&Worktree{}, &WorktreeList{},
		&AgentSession{}, &AgentSessionList{},
		&BudgetPolicy{}, &BudgetPolicyList{},
		&AgentTask{}, &AgentTaskList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
