package controller_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

var _ = Describe("Prompt template", func() {
	It("turns an issue into the agent's first prompt with the Project's template", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) {
			s.Tracker.PromptTemplate = "Fix issue {{.Issue.ID}}: {{.Issue.Title}}\n{{.Issue.Body}}\n" +
				"Work on {{.Branch}} of {{.Project.Repository}}; labels {{join .Issue.Labels \",\"}}."
		}).Obj())
		id := w.issue("Crash on empty input", "bug", "parser")
		a := w.agent("templated")
		create(MakeSession(a.name, w.ns, "widgets").Issue(id).Obj())
		Eventually(sessionStatus(w.ns, a.name)).Should(HaveField("Branch", HavePrefix("shepherd/"+id+"-crash-on-empty-input")))
		a.br = a.status().Branch
		a.start()
		Expect(a.runner.task.Prompt).To(Equal(fmt.Sprintf("Fix issue %s: Crash on empty input\nPlease Crash on empty input\nWork on %s of %s; labels bug,parser.\n",
			id, a.br, w.full)))
		Expect(a.runner.task.Issue).To(HaveField("Title", "Crash on empty input"))
	})

	It("refuses a template that does not render on the Project, saying what to fix, and recovers when it is fixed", func() {
		w := newWorld()
		create(w.project().With(func(s *agentsv1alpha1.ProjectSpec) { s.Tracker.PromptTemplate = "Fix {{.Issue.Nope}}" }).Obj())
		Eventually(projectConditions(w.ns, "widgets")).Should(And(
			HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue, agentsv1alpha1.ReasonInvalidSpec),
			HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonInvalidSpec)))
		Expect(meta.FindStatusCondition(projectConditions(w.ns, "widgets")(), agentsv1alpha1.ConditionStalled).Message).To(And(
			HavePrefix("spec.tracker.promptTemplate: "), ContainSubstring("Nope"), ContainSubstring("fix the template")))

		update(&agentsv1alpha1.Project{ObjectMeta: objMeta(w.ns, "widgets")}, func(p *agentsv1alpha1.Project) {
			p.Spec.Tracker.PromptTemplate = "Fix {{.Issue.Title}}"
		})
		Eventually(projectConditions(w.ns, "widgets")).Should(And(
			HaveCondition(agentsv1alpha1.ConditionReady, metav1.ConditionTrue),
			Not(HaveCondition(agentsv1alpha1.ConditionStalled, metav1.ConditionTrue))))
	})
})
