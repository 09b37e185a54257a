package validation

import (
	"io"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// kubectl runs the real kubectl from the envtest assets against the test API server.
func kubectl(args ...string) string {
	user, err := testEnv.AddUser(envtest.User{Name: "kubectl-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	k, err := user.Kubectl()
	Expect(err).NotTo(HaveOccurred())
	stdout, stderr, err := k.Run(args...)
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	Expect(err).NotTo(HaveOccurred(), "kubectl %v: %s", args, errOut)
	return string(out)
}

var _ = Describe("kubectl", func() {
	It("lists all four kinds with `kubectl get shepherd`", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, MakeProject("widgets", ns).Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, MakeWorktree("refactor", ns, "widgets", "shepherd/refactor").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, MakeSession("fix-42", ns, "widgets").Issue("42").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, &agentsv1alpha1.BudgetPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
			Spec: agentsv1alpha1.BudgetPolicySpec{Budget: agentsv1alpha1.BudgetSpec{DailyUSD: "50"}}})).To(Succeed())
		out := kubectl("get", "shepherd", "-n", ns)
		Expect(out).To(ContainSubstring("project.agents.shepherd.dev/widgets"))
		Expect(out).To(ContainSubstring("worktree.agents.shepherd.dev/refactor"))
		Expect(out).To(ContainSubstring("agentsession.agents.shepherd.dev/fix-42"))
		Expect(out).To(ContainSubstring("budgetpolicy.agents.shepherd.dev/team"))
		Expect(kubectl("get", "bp", "-n", ns)).To(MatchRegexp(`NAME\s+PROJECTS\s+TODAY\s+DAILY\s+MONTH\s+MONTHLY\s+BUDGET\s+AGE`))
	})

	It("shows the columns a user asks for first in `kubectl get agentsessions`", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, MakeSession("fix-42", ns, "widgets").Issue("42").Obj())).To(Succeed())
		out := kubectl("get", "agentsessions", "-n", ns)
		Expect(out).To(MatchRegexp(`NAME\s+PROJECT\s+AGENT\s+PHASE\s+REASON\s+PR\s+CI\s+REVIEW\s+COST\s+AGE`))
		Expect(kubectl("get", "as", "-n", ns, "-o", "name")).To(ContainSubstring("agentsession.agents.shepherd.dev/fix-42"))
	})

	It("explains agentsession.spec field by field", func() {
		out := kubectl("explain", "agentsession.spec")
		Expect(out).To(ContainSubstring("Spec is the task."))
		for _, field := range []string{"projectRef", "issue", "prompt", "messages", "worktreeRef", "worktree", "state", "agent"} {
			Expect(out).To(MatchRegexp(`(?m)^\s+%s\s`, field), "field %s is documented", field)
		}
		Expect(kubectl("explain", "agentsession.spec.issue")).To(ContainSubstring("Issue is the tracker issue to work on"))
		Expect(kubectl("explain", "project.spec.reactions.ciFailed.retries")).To(ContainSubstring("Retries is how many times the action runs"))
	})
})
