package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BudgetPolicySpec caps the spend of several Projects of a namespace together.
type BudgetPolicySpec struct {
	// ProjectSelector selects the Projects of this namespace the policy covers, by their labels.
	// Empty or absent covers every Project of the namespace, including those created later: the
	// only cap a user who may edit Projects (and so their labels) cannot step out of.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))`,message="each matchExpressions entry needs operator In or NotIn with values, or Exists or DoesNotExist without"
	ProjectSelector *metav1.LabelSelector `json:"projectSelector,omitempty"`

	// Budget is the shared cap, with the same fields as a Project's spec.budget: the covered
	// Projects' spend is summed against it. A Project is held by the tightest of its own budget
	// and every policy that covers it. Projects covered by the policy that have a budget of their
	// own must count days in the same timeZone (a Project in another zone is held, and the
	// policy's status says which).
	// +required
	Budget BudgetSpec `json:"budget"`
}

// BudgetPolicyStatus is what the controller summed.
type BudgetPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (kstatus) and BudgetAvailable (WithinBudget, BudgetExhausted).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Spend is the covered Projects' spend in the current day and month, in spec.budget.timeZone:
	// the sum of their status.spend, split by agent and by model.
	// +optional
	Spend *SpendStatus `json:"spend,omitempty"`

	// ProjectCount is how many Projects the policy covers.
	// +optional
	ProjectCount int32 `json:"projectCount,omitempty"`

	// Projects lists the covered Projects with their share (the first 64 by name).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Projects []PolicyProject `json:"projects,omitempty"`
}

// PolicyProject is one covered Project's share of a BudgetPolicy's windows.
type PolicyProject struct {
	// Name of the Project.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// DayCostUSD and MonthCostUSD are the Project's spend in the policy's current day and month.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	DayCostUSD string `json:"dayCostUSD,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=32
	MonthCostUSD string `json:"monthCostUSD,omitempty"`
	// +optional
	DayTokens int64 `json:"dayTokens,omitempty"`
	// +optional
	MonthTokens int64 `json:"monthTokens,omitempty"`
	// TimeZoneMismatch is set when the Project's own budget counts days in another zone: its
	// spend cannot be summed, so the Project is held until the zones agree.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZoneMismatch string `json:"timeZoneMismatch,omitempty"`
}

// BudgetPolicy caps the spend of a group of Projects together: a team's daily and monthly
// budget across its repositories. It is a namespace object apart from the Projects, so that the
// namespace's admins can set it while the people who edit Projects cannot change it (the
// aggregated "admin" role may write it, "edit" may only read it).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bp,categories=shepherd
// +kubebuilder:printcolumn:name="Projects",type=integer,JSONPath=`.status.projectCount`
// +kubebuilder:printcolumn:name="Today",type=string,JSONPath=`.status.spend.day.costUSD`,description="US dollars the covered Projects spent today (metered)"
// +kubebuilder:printcolumn:name="Daily",type=string,JSONPath=`.spec.budget.dailyUSD`,description="The daily cap in US dollars"
// +kubebuilder:printcolumn:name="Month",type=string,JSONPath=`.status.spend.month.costUSD`,description="US dollars the covered Projects spent this month (metered)"
// +kubebuilder:printcolumn:name="Monthly",type=string,JSONPath=`.spec.budget.monthlyUSD`,description="The monthly cap in US dollars"
// +kubebuilder:printcolumn:name="Budget",type=string,JSONPath=`.status.conditions[?(@.type=="BudgetAvailable")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BudgetPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the shared cap and the Projects it covers.
	// +required
	Spec BudgetPolicySpec `json:"spec"`

	// Status is what the controller summed.
	// +optional
	Status BudgetPolicyStatus `json:"status,omitempty"`
}

// BudgetPolicyList is a list of BudgetPolicies.
//
// +kubebuilder:object:root=true
type BudgetPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BudgetPolicy `json:"items"`
}
