package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

// bestOfThree runs an AgentTask with the real Claude Code, Codex and OpenCode as its three
// attempts, each on a scripted model server of its own (their requests interleave, so one
// script each), on the local cluster with the fake GitHub: each agent commits a change of its
// own size and the manager opens three drafts; CI fails Claude Code's and passes the other two;
// the Score policy chooses OpenCode's (green and the smallest); the chosen draft goes up for
// review, a reviewer approves, Shepherd merges it; the other two are closed with a comment
// linking it, and the task shows each attempt's cost.
func bestOfThree(ctx context.Context, c *cluster) {
	By("a Project (Claude Code by default) on the fake GitHub; a model server per attempt")
	p := newAgentProject(ctx, c, claudeCodeAgent, "e2e-bestof-", func(s *agentsv1alpha1.ProjectSpec) {
		s.Reactions = &agentsv1alpha1.ReactionsSpec{
			// The failing attempt is not sent its failure: the task chooses among what exists.
			CIFailed:         &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionNotify},
			ApprovedAndGreen: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge, MergeMethod: agentsv1alpha1.MergeSquash},
		}
	})
	host := nodeIP(ctx, c)
	models := map[string]*modelserver.Server{claudeCodeAgent.name: p.model}
	lines := map[string]int{claudeCodeAgent.name: 3, codexAgent.name: 40, openCodeAgent.name: 1}
	variants := make([]agentsv1alpha1.AttemptVariant, 0, 3)
	for _, a := range []realAgent{claudeCodeAgent, codexAgent, openCodeAgent} {
		ms := models[a.name]
		if ms == nil {
			ms = modelserver.New(nil)
			Expect(ms.Start(net.JoinHostPort(host, "0"))).To(Succeed())
			DeferCleanup(ms.Close)
			models[a.name] = ms
		}
		ms.Append(
			a.shell(fmt.Sprintf(`for i in $(seq %d); do echo "%s was here ($i)" >> NOTES.md; done && git add NOTES.md && git commit -m 'Notes by %s'`,
				lines[a.name], a.name, a.name)),
			modelserver.Text("Wrote the notes and committed them."),
		)
		variants = append(variants, agentsv1alpha1.AttemptVariant{Agent: agentsv1alpha1.AgentSpec{Type: a.typ, Image: a.image, Model: a.model,
			ModelAPI: &agentsv1alpha1.ModelAPISpec{API: a.api, URL: agentsv1alpha1.HTTPURL(ms.URL()),
				KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "model", Key: "api-key"}}}})
	}

	By("one AgentTask, three attempts: three agents work, three drafts open")
	task := &agentsv1alpha1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "notes", Namespace: p.ns}, Spec: agentsv1alpha1.AgentTaskSpec{
		ProjectRef: agentsv1alpha1.LocalObjectReference{Name: p.name}, Prompt: "Add notes to NOTES.md and commit them.",
		Attempts: ptr.To(int32(3)), Variants: variants, Selection: &agentsv1alpha1.SelectionSpec{Policy: agentsv1alpha1.SelectScore,
			// The size of the diff decides here: the costs and the times of two CLIs on a scripted
			// model are not what this run is about (the terms are internal/selection's tests).
			Weights: &agentsv1alpha1.ScoreWeights{Checks: ptr.To(int32(40)), Review: ptr.To(int32(0)), DiffSize: ptr.To(int32(50)),
				Cost: ptr.To(int32(0)), Time: ptr.To(int32(0)),
			}},
	}}
	Expect(c.client.Create(ctx, task)).To(Succeed())
	key := client.ObjectKeyFromObject(task)
	read := func() *agentsv1alpha1.AgentTask {
		t := &agentsv1alpha1.AgentTask{}
		Expect(c.client.Get(ctx, key, t)).To(Succeed())
		return t
	}
	prs := map[string]int{}
	heads := map[string]string{}
	Eventually(func(g Gomega) {
		for i, a := range []realAgent{claudeCodeAgent, codexAgent, openCodeAgent} {
			name := fmt.Sprintf("notes-%d", i+1)
			found, err := p.gh.PullRequestsFor(ctx, "shepherd/"+name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(HaveLen(1), "%s's (%s) pull request; task: %+v", name, a.name, read().Status.Attempts)
			info, err := p.gh.Server.PullRequest(p.gh.Repo(), found[0].Number)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(info.Draft).To(BeTrue(), "an attempt opens a draft")
			prs[a.name], heads[a.name] = found[0].Number, found[0].HeadSHA
		}
	}).WithTimeout(8*time.Minute).WithPolling(2*time.Second).Should(Succeed(), func() string {
		var out strings.Builder
		for i := 1; i <= 3; i++ {
			out.WriteString(diagnose(ctx, c, client.ObjectKey{Namespace: p.ns, Name: fmt.Sprintf("notes-%d", i)}))
		}
		return out.String()
	})
	Expect(read().Status.Progress).To(Equal("3/3"))

	By("CI fails Claude Code's attempt and passes Codex's and OpenCode's: Score chooses OpenCode's, green and the smallest")
	Expect(p.gh.ReportCI(ctx, heads[claudeCodeAgent.name], false)).To(Succeed())
	Expect(p.gh.ReportCI(ctx, heads[codexAgent.name], true)).To(Succeed())
	Expect(p.gh.ReportCI(ctx, heads[openCodeAgent.name], true)).To(Succeed())
	Eventually(func() string { return read().Status.Chosen }).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Equal("notes-3"),
		func() string { return fmt.Sprintf("%+v", read().Status) })
	st := read().Status
	Expect(st.ChosenBy).To(ContainSubstring("Score"))
	Eventually(func(g Gomega) {
		pr, err := p.gh.Server.PullRequest(p.gh.Repo(), prs[openCodeAgent.name])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pr.Draft).To(BeFalse(), "the chosen draft goes up for review")
		for _, a := range []realAgent{claudeCodeAgent, codexAgent} {
			info, err := p.gh.Server.PullRequest(p.gh.Repo(), prs[a.name])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(info.State).To(Equal("closed"), "%s's attempt is closed", a.name)
			g.Expect(info.Comments).To(ConsistOf(ContainSubstring("notes-3")), "once, linking the chosen one")
		}
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

	By("a reviewer approves the chosen pull request: Shepherd merges it, the task is Merged")
	Expect(p.gh.Approve(ctx, prs[openCodeAgent.name])).To(Succeed())
	Eventually(func() agentsv1alpha1.TaskPhase { return read().Status.Phase }).WithTimeout(3*time.Minute).WithPolling(time.Second).
		Should(Equal(agentsv1alpha1.TaskMerged), func() string {
			return fmt.Sprintf("%+v\n%s", read().Status, diagnose(ctx, c, client.ObjectKey{Namespace: p.ns, Name: "notes-3"}))
		})
	merged, err := p.gh.PullRequest(ctx, prs[openCodeAgent.name])
	Expect(err).NotTo(HaveOccurred())
	Expect(merged.Merged).To(BeTrue())
	st = read().Status
	Expect(st.CostUSD).NotTo(BeEmpty())
	for _, a := range st.Attempts {
		Expect(a.Agent).NotTo(BeEmpty(), "%s names its agent", a.Name)
		Expect(a.Score).NotTo(BeEmpty(), "%s has a score", a.Name)
	}
	Expect(st.Attempts[0].Phase).To(Equal(string(agentsv1alpha1.PhaseDone)))
	Expect(st.Attempts[2].Phase).To(Equal(string(agentsv1alpha1.PhaseMerged)))
	report := fmt.Sprintf("best of 3: chose %s (%s); cost together $%s; attempts %+v", st.Chosen, st.ChosenBy, st.CostUSD, st.Attempts)
	fmt.Fprintln(GinkgoWriter, report)
	AddReportEntry("best of 3", report)
}
