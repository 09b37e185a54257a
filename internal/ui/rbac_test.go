package ui_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authzv1 "k8s.io/api/authorization/v1"
)

// allowed asks the API server's authorizer (RBAC, with the roles config/rbac ships) whether
// user may verb resource of Shepherd's group in team-a.
func allowed(user, verb, resource string) bool {
	GinkgoHelper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "team-a", Verb: verb, Group: "agents.shepherd.dev", Resource: resource}}}
	Expect(adm.Create(context.Background(), sar)).To(Succeed())
	return sar.Status.Allowed
}

var _ = Describe("The shipped roles and BudgetPolicies", func() {
	It("let a namespace's admins write the shared cap, editors and viewers only read it", func() {
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			Expect(allowed("alice", verb, "budgetpolicies")).To(BeFalse(), "an editor cannot %s the cap that holds her Projects", verb)
			Expect(allowed("carol", verb, "budgetpolicies")).To(BeTrue(), "an admin can %s it", verb)
		}
		Expect(allowed("alice", "update", "projects")).To(BeTrue(), "an editor edits Projects")
		Expect(allowed("alice", "patch", "budgetpolicies/status")).To(BeFalse())
		for _, user := range []string{"alice", "viewer"} {
			Expect(allowed(user, "list", "budgetpolicies")).To(BeTrue(), "%s reads the caps (view)", user)
		}
		Expect(allowed("viewer", "create", "budgetpolicies")).To(BeFalse())
	})
})

var _ = Describe("The shipped roles and AgentTasks", func() {
	It("let editors write tasks (and pick an attempt), viewers only read them", func() {
		for _, verb := range []string{"create", "patch", "delete"} {
			Expect(allowed("alice", verb, "agenttasks")).To(BeTrue(), "an editor can %s a task", verb)
			Expect(allowed("viewer", verb, "agenttasks")).To(BeFalse(), "a viewer cannot %s a task", verb)
		}
		Expect(allowed("viewer", "list", "agenttasks")).To(BeTrue())
		Expect(allowed("alice", "patch", "agenttasks/status")).To(BeFalse(), "the status is the manager's")
	})
})
