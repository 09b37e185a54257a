package ui_test

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
)

// golden compares got with testdata/<name>.golden; UPDATE=1 rewrites it.
func golden(name, got string) {
	GinkgoHelper()
	p := filepath.Join("testdata", name+".golden")
	if os.Getenv("UPDATE") == "1" {
		Expect(os.MkdirAll("testdata", 0o755)).To(Succeed())
		Expect(os.WriteFile(p, []byte(got), 0o644)).To(Succeed())
	}
	want, err := os.ReadFile(p)
	Expect(err).NotTo(HaveOccurred(), "UPDATE=1 writes it")
	Expect(got).To(Equal(string(want)), "%s differs (UPDATE=1 rewrites it)", p)
}

// kubectl shepherd batch: the manager lists the Project's tracker issues (the plugin holds no
// forge credential), the plugin starts one session per issue with server-side apply.
var _ = Describe("kubectl shepherd batch, through the API server", func() {
	It("starts a session on each open issue with the label, once, and refuses whoever may not", func() {
		ctx := context.Background()
		DeferCleanup(func() {
			for _, n := range []string{"widgets-1", "widgets-3"} {
				_ = adm.Delete(ctx, &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: n}})
			}
		})
		before := issues.calls.Load()

		By("--dry-run lists the issues and the sessions it would start, and starts none")
		out, err := plugin("alice", "-n", "team-a", "batch", "widgets", "--label", "agent", "--dry-run")
		Expect(err).NotTo(HaveOccurred(), out)
		golden("batch-dry-run", out)
		s := &agentsv1alpha1.AgentSession{}
		Expect(adm.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "widgets-1"}, s)).NotTo(Succeed())

		By("batch starts them: spec.issue set, written by the plugin's field manager with server-side apply")
		out, err = plugin("alice", "-n", "team-a", "batch", "widgets", "--label", "agent")
		Expect(err).NotTo(HaveOccurred(), out)
		golden("batch", out)
		for n, issue := range map[string]string{"widgets-1": "1", "widgets-3": "3"} {
			Expect(adm.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: n}, s)).To(Succeed())
			Expect(s.Spec.Issue).To(Equal(issue))
			Expect(s.Spec.ProjectRef.Name).To(Equal("widgets"))
			Expect(s.ManagedFields).To(ContainElement(And(HaveField("Manager", kubectlplugin.FieldManager),
				HaveField("Operation", metav1.ManagedFieldsOperationApply))))
		}

		By("again: nothing starts twice; the manager answered all three runs with one tracker query")
		out, err = plugin("alice", "-n", "team-a", "batch", "widgets", "--label", "agent")
		Expect(err).NotTo(HaveOccurred(), out)
		golden("batch-again", out)
		var list agentsv1alpha1.AgentSessionList
		Expect(adm.List(ctx, &list, client.InNamespace("team-a"))).To(Succeed())
		byIssue := map[string]int{}
		for _, it := range list.Items {
			byIssue[it.Spec.Issue]++
		}
		Expect(byIssue).To(HaveKeyWithValue("1", 1))
		Expect(byIssue).To(HaveKeyWithValue("3", 1), "one session per issue")
		Expect(issues.calls.Load()-before).To(Equal(int32(1)), "cached for the same Project, labels and limit")

		By("two labels: only the issues that carry both")
		out, err = plugin("alice", "-n", "team-a", "batch", "widgets", "--label", "agent", "--label", "docs", "--dry-run")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("widgets-3"))
		Expect(out).NotTo(ContainSubstring("widgets-1 "))

		By("bob, the viewer, a Project without a tracker, no label, a hostile label")
		out, err = plugin("bob", "-n", "team-a", "batch", "widgets", "--label", "agent")
		Expect(err).To(MatchError(ContainSubstring("forbidden: you may not list the issues of Project widgets in namespace team-a")), out)
		out, err = plugin("viewer", "-n", "team-a", "batch", "widgets", "--label", "agent")
		Expect(err).To(MatchError(ContainSubstring("forbidden")), "a viewer reads sessions, not the tracker through the Project's credentials: %s", out)
		_, err = plugin("alice", "-n", "team-a", "batch", "plain", "--label", "agent")
		Expect(err).To(MatchError(ContainSubstring("Project plain has no spec.tracker")))
		_, err = plugin("alice", "-n", "team-a", "batch", "nope", "--label", "agent")
		Expect(err).To(MatchError(ContainSubstring("project nope in namespace team-a not found")))
		_, err = plugin("alice", "-n", "team-a", "batch", "widgets")
		Expect(err).To(MatchError(ContainSubstring("pass at least one --label")))
		code, body := get("alice", kubectlplugin.IssuesPath("team-a", "widgets")+"?label=a%01b")
		Expect(code).To(Equal(400), body)
		code, body = get("alice", kubectlplugin.IssuesPath("team-a", "widgets")+"?label=agent&limit=100000")
		Expect(code).To(Equal(400), body)
	})
})
