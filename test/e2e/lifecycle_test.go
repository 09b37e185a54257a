package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// sessionRun is one play of the scenario (test/scenario) on the local cluster: what the specs
// assert on.
type sessionRun struct {
	ns      string
	key     client.ObjectKey
	forge   scenario.Forge
	model   *modelserver.Server
	notices *scenario.Receiver
	res     *scenario.Result
	// custom: the agent was the custom script, which calls no model.
	custom bool
}

// playOptions vary the scenario between the specs.
type playOptions struct {
	// pollInterval is the Project's scm.pollInterval.
	pollInterval time.Duration
	// stepTimeout bounds each wait of the play.
	stepTimeout time.Duration
	// afterCIFailed runs while the agent works on the CI fix.
	afterCIFailed func(context.Context) error
	// afterPullRequest runs once the pull request is open, the agent between turns.
	afterPullRequest func(context.Context, *sessionRun) error
	// agent, when set, runs that real CLI from its image instead of Claude Code; mode, when set,
	// is the Project's workspace mode; project changes the rendered Project further.
	agent   *realAgent
	mode    agentsv1alpha1.WorkspaceMode
	project func(*agentsv1alpha1.ProjectSpec)
	// custom runs test/customagent/agent.sh as a custom agent instead (it calls no model).
	custom bool
	// namespace, when set, is the existing namespace the session runs in (a new one otherwise);
	// managerNamespace, when set, is where the manager that serves it runs (a shard's release
	// namespace; shepherd-system otherwise).
	namespace, managerNamespace string
}

// playScenario serves the scripted model and a notification receiver on the node IP, applies
// config/samples/demo for forge in a new restricted namespace, and plays the session to its merge.
// The forge is the caller's (started with the webhooks Service as its target).
func playScenario(ctx context.Context, c *cluster, forge scenario.Forge, opts playOptions) *sessionRun {
	GinkgoHelper()
	host := nodeIP(ctx, c)

	By("serving the scripted model (one commit per turn) and a notification receiver on the node IP")
	script := scenario.Script()
	if a := opts.agent; a != nil {
		script = scenario.ScriptWith(func(command, _ string) modelserver.Reply { return a.shell(command) })
	}
	model, err := scenario.StartModelWith(host, script)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(model.Close)
	notices, err := scenario.StartReceiver(host, nil)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(notices.Close)

	By("applying config/samples/demo (Secrets, Project) for " + forge.Name())
	var ns *corev1.Namespace
	if opts.namespace != "" {
		ns = &corev1.Namespace{}
		Expect(c.client.Get(ctx, client.ObjectKey{Name: opts.namespace}, ns)).To(Succeed())
	} else {
		ns = restrictedNamespace(ctx, c, "e2e-session-")
		// Best effort: after a failure the suite's AfterAll may already have stopped the cluster.
		DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	}
	m, err := scenario.Render(filepath.Join(repoRoot(), "config", "samples", "demo"), ns.Name,
		scenario.ValuesFor(forge, model.URL(), notices.URL(), host, opts.pollInterval))
	Expect(err).NotTo(HaveOccurred())
	if a := opts.agent; a != nil {
		// As a team switches the demo to another CLI: its type, its image, the model API it
		// speaks and the model it needs; the rest of the Project is the demo's.
		m.Project.Spec.Agent.Type, m.Project.Spec.Agent.Image, m.Project.Spec.Agent.Model = a.typ, a.image, a.model
		m.Project.Spec.Agent.ModelAPI.API = a.api
	}
	if opts.mode != "" {
		m.Project.Spec.Workspace.Mode = opts.mode
	}
	if opts.custom {
		// A team's own agent: the script, run by the bash of an image that has it and git.
		script, err := os.ReadFile(filepath.Join(repoRoot(), "test", "customagent", "agent.sh"))
		Expect(err).NotTo(HaveOccurred())
		m.Project.Spec.Agent = agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentCustom, Image: claudeCodeAgent.image,
			PermissionMode: agentsv1alpha1.PermissionBypass,
			Custom:         &agentsv1alpha1.CustomAgentSpec{Command: []string{"bash", "-c", string(script), "custom-agent"}}}
	}
	if opts.project != nil {
		opts.project(&m.Project.Spec)
	}
	managerNS := scenario.ManagerNamespace
	if opts.managerNamespace != "" {
		managerNS = opts.managerNamespace
	}
	webhookURL, err := scenario.WebhookURLIn(ctx, c.client, managerNS, client.ObjectKeyFromObject(m.Project))
	Expect(err).NotTo(HaveOccurred())
	Expect(forge.HookTo(ctx, webhookURL)).To(Succeed())
	Expect(m.ApplySetup(ctx, c.client)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(m.Project), time.Minute)).To(Succeed())

	By("creating the session for the issue and playing CI and the reviewer until the merge")
	wc, err := client.NewWithWatch(c.cfg, client.Options{Scheme: c.client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	run := &sessionRun{ns: ns.Name, key: client.ObjectKeyFromObject(m.Session), forge: forge, model: model, notices: notices, custom: opts.custom}
	pctx, stop := context.WithCancel(ctx)
	DeferCleanup(stop)
	play := &scenario.Play{
		Client: wc, Forge: forge, Session: run.key, StepTimeout: opts.stepTimeout,
		Logf: func(format string, args ...any) { fmt.Fprintf(GinkgoWriter, format+"\n", args...) },
		OnTransition: func(t scenario.Transition, _ *scenario.Transition) {
			fmt.Fprintf(GinkgoWriter, "phase %-16s at %s\n", t.Phase, t.At.Format("15:04:05.000"))
		},
		AfterCIFailed: opts.afterCIFailed,
	}
	if opts.afterPullRequest != nil {
		play.AfterPullRequest = func(ctx context.Context) error { return opts.afterPullRequest(ctx, run) }
	}
	run.res, err = play.Run(pctx, func(ctx context.Context) error { return m.CreateSession(ctx, c.client) })
	if err != nil {
		// What a reader of CI's output needs to tell why: the session as the manager left it,
		// and the last lines of the agent's and the manager's logs.
		err = fmt.Errorf("%w\n%s", err, diagnose(ctx, c, run.key))
	}
	Expect(err).NotTo(HaveOccurred())
	report := fmt.Sprintf("phases of %s on %s:\n%sreactions:\n", run.key, forge.Name(), run.res.Phases)
	for _, s := range run.res.Steps {
		report += fmt.Sprintf("  %-52s %5.1fs\n", s.Name, s.Took.Seconds())
	}
	fmt.Fprint(GinkgoWriter, report)
	AddReportEntry("whole session on "+forge.Name(), report)
	return run
}

// checkSessionEnd asserts what every forge's whole session must end with: the pull request
// merged through each stage, nothing duplicated or lost, the agent saw the failure and the
// review, the pod gone, the Worktree removed per the Project's policy, the events, and each
// signed notification delivered once.
func checkSessionEnd(ctx context.Context, c *cluster, run *sessionRun) {
	GinkgoHelper()
	res := run.res
	Expect(res.PullRequest.Merged).To(BeTrue(), "the forge has the pull request merged")
	Expect(res.Branch).To(HavePrefix(fmt.Sprintf("shepherd/%d-", run.forge.Issue())))
	Expect(res.Phases.Phases()).To(ContainElements(agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseCIFailed,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseMerged), "the lifecycle passed through each stage")

	By("nothing was duplicated: one pull request, each message once, three commits")
	prs, err := run.forge.PullRequestsFor(ctx, res.Branch)
	Expect(err).NotTo(HaveOccurred())
	Expect(prs).To(HaveLen(1), "one pull request for the branch")
	Expect(res.Session.Status.Messages.Pending).To(BeEmpty())
	Expect(res.Commits).To(HaveLen(3), "the task, the CI fix and the review fix: %v", res.Commits)
	Expect(res.Commits[len(res.Commits)-1].SHA).To(Equal(res.Heads[len(res.Heads)-1]))
	Expect(run.model.Problems()).To(BeEmpty(), "every model request was scripted; nothing tried to leave")
	var failureTurns, reviewTurns int
	if run.custom {
		// The custom script writes each prompt it gets to notes-<turn>.txt on the branch.
		bare := run.forge.(*scenario.FakeGitHub).Server.GitDir(run.forge.(*scenario.FakeGitHub).Repo())
		if strings.Contains(gitOut(bare, "show", res.Branch+":notes-2.txt"), run.forge.FailureEvidence()) {
			failureTurns++
		}
		if strings.Contains(gitOut(bare, "show", res.Branch+":notes-3.txt"), scenario.ReviewComment) {
			reviewTurns++
		}
	}
	for _, t := range run.model.Turns() {
		text := strings.Join(t.UserTexts(), "\n")
		if strings.Contains(text, run.forge.FailureEvidence()) {
			failureTurns++
		}
		if strings.Contains(text, scenario.ReviewComment) {
			reviewTurns++
		}
	}
	Expect(run.forge.FailureEvidence()).NotTo(BeEmpty())
	Expect(failureTurns).To(BeNumerically(">=", 1), "the CI failure reached the agent")
	Expect(reviewTurns).To(BeNumerically(">=", 1), "the review comment reached the agent")

	By("the pod is gone and the Worktree removed per the Project's policy")
	Eventually(func() error {
		return c.client.Get(ctx, client.ObjectKey{Namespace: run.ns, Name: run.key.Name + "-agent"}, &corev1.Pod{})
	}).WithTimeout(2 * time.Minute).Should(Satisfy(apierrors.IsNotFound))
	wt := &agentsv1alpha1.Worktree{}
	Eventually(func() agentsv1alpha1.WorktreePhase {
		_ = c.client.Get(ctx, client.ObjectKey{Namespace: run.ns, Name: run.key.Name}, wt)
		return wt.Status.Phase
	}).WithTimeout(2 * time.Minute).Should(Equal(agentsv1alpha1.WorktreeRemoved))

	By("the expected events were recorded")
	var events corev1.EventList
	Expect(c.client.List(ctx, &events, client.InNamespace(run.ns))).To(Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "AgentSession" {
			reasons = append(reasons, e.Reason)
		}
	}
	Expect(reasons).To(ContainElements(agentsv1alpha1.ReasonPullRequestOpened, agentsv1alpha1.ReasonChecksFailed, agentsv1alpha1.ReasonChecksPassed,
		agentsv1alpha1.ReasonChangesRequested, agentsv1alpha1.ReasonApproved, agentsv1alpha1.ReasonMergeCompleted, agentsv1alpha1.ReasonPullRequestMerged))

	By("the webhook notifier delivered signed notifications, each once")
	Eventually(run.notices.Types).WithTimeout(time.Minute).Should(ContainElement(string(agentsv1alpha1.EventPRMerged)))
	ids, _, bad := run.notices.Snapshot()
	Expect(bad).To(BeZero())
	for id, n := range ids {
		Expect(n).To(Equal(1), "notification %s delivered once", id)
	}
}

// wholeSession runs one session from a GitHub issue to its merge on the local cluster: the
// manager in the cluster, real pods, the real Claude Code against the scripted model server,
// real git against the fake GitHub, which the scenario drives as CI and as a reviewer. It kills
// the manager in the middle and checks that nothing was duplicated or lost.
func wholeSession(ctx context.Context, c *cluster) {
	By("serving the fake GitHub on the node IP, with webhooks to the manager's Service")
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)

	run := playScenario(ctx, c, gh, playOptions{
		pollInterval: time.Minute,
		afterCIFailed: func(ctx context.Context) error {
			By("killing the manager while the agent works on the fix")
			killManager(ctx, c)
			return nil
		},
	})
	checkSessionEnd(ctx, c, run)
	Expect(gh.Server.Stats().ByRoute).To(HaveKeyWithValue("PUT /repos/{o}/{r}/pulls/{x}/merge", 1), "one merge call")
}

// killManager deletes the manager pod and waits for its replacement to be Ready.
func killManager(ctx context.Context, c *cluster) {
	GinkgoHelper()
	old := managerPod(ctx, c)
	Expect(c.client.Delete(ctx, old, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func(g Gomega) {
		ready, _ := readyManagers(ctx, g, c, old.UID)
		g.Expect(ready).To(Equal(1))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// diagnose describes a session that did not go as scripted: its status (phase, conditions,
// activity, messages, pull request) and the last lines of its agent pod's and the manager's logs.
func diagnose(ctx context.Context, c *cluster, key client.ObjectKey) string {
	var b strings.Builder
	s := &agentsv1alpha1.AgentSession{}
	if err := c.client.Get(ctx, key, s); err != nil {
		fmt.Fprintf(&b, "session %s: %v\n", key, err)
	} else {
		st := s.Status
		fmt.Fprintf(&b, "session %s: phase %s\n", key, st.Phase)
		for _, cond := range st.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		if st.Activity != nil {
			fmt.Fprintf(&b, "  activity %s since %s: %s\n", st.Activity.State, st.Activity.LastActivityTime, st.Activity.Message)
		}
		fmt.Fprintf(&b, "  messages %+v\n", st.Messages)
		if st.PullRequest != nil {
			fmt.Fprintf(&b, "  pull request %+v\n", *st.PullRequest)
		}
	}
	const tail = 60
	pod := &corev1.Pod{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-agent"}, pod); err == nil {
		fmt.Fprintf(&b, "agent pod %s (phase %s), last %d lines per container:\n%s", pod.Name, pod.Status.Phase, tail, podLogsTail(ctx, c, pod, tail))
	} else {
		fmt.Fprintf(&b, "agent pod: %v\n", err)
	}
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(managerNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"}); err == nil {
		for i := range pods.Items {
			fmt.Fprintf(&b, "manager pod %s, last %d lines:\n%s", pods.Items[i].Name, tail, podLogsTail(ctx, c, &pods.Items[i], tail))
		}
	}
	return b.String()
}

// agentWholeSession plays the whole session with the real CLI of a from its agent image, in
// mode, configured only through the Project as a user would: its agent type, image, model API
// and model. While the pull request waits for CI the agent's pod is deleted: the CI failure
// brings a new pod, and the fix is a turn of the same conversation in it (the CLI's conversation
// files live on the session's volume, where the new pod finds them).
func agentWholeSession(ctx context.Context, c *cluster, a realAgent, mode agentsv1alpha1.WorkspaceMode) {
	By("serving the fake GitHub on the node IP, with webhooks to the manager's Service")
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	var firstPod types.UID
	run := playScenario(ctx, c, gh, playOptions{
		pollInterval: time.Minute, agent: &a, mode: mode,
		project: func(s *agentsv1alpha1.ProjectSpec) {
			// A deleted pod is replaced after the grace: short here, so the spec does not wait.
			s.Activity = &agentsv1alpha1.ActivitySpec{GracePeriod: &metav1.Duration{Duration: 10 * time.Second}, GraceObservations: ptr.To(int32(1))}
		},
		afterPullRequest: func(ctx context.Context, run *sessionRun) error {
			By("deleting the agent's pod between turns: under an open pull request the next message brings a new one")
			key := client.ObjectKey{Namespace: run.ns, Name: run.key.Name + "-agent"}
			pod := &corev1.Pod{}
			if err := c.client.Get(ctx, key, pod); err != nil {
				return fmt.Errorf("the agent pod: %w", err)
			}
			firstPod = pod.UID
			if err := c.client.Delete(ctx, pod); err != nil {
				return err
			}
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				p := &corev1.Pod{}
				if err := c.client.Get(ctx, key, p); apierrors.IsNotFound(err) || err == nil && p.UID != firstPod {
					return nil
				}
				time.Sleep(500 * time.Millisecond)
			}
			return fmt.Errorf("the agent pod was not gone within 2m\n%s", diagnose(ctx, c, run.key))
		},
	})
	Expect(firstPod).NotTo(BeEmpty())
	checkSessionEnd(ctx, c, run)
	Expect(gh.Server.Stats().ByRoute).To(HaveKeyWithValue("PUT /repos/{o}/{r}/pulls/{x}/merge", 1), "one merge call")

	By("the CI fix, in the new pod, continued the conversation of the first turn")
	var first, fix string
	for _, t := range run.model.Turns() {
		text := strings.Join(t.UserTexts(), "\n")
		if first == "" && a.conversation != "" {
			first = t.Header.Get(a.conversation)
		}
		if fix == "" && strings.Contains(text, run.forge.FailureEvidence()) {
			fix = "seen"
			if a.conversation != "" {
				fix = t.Header.Get(a.conversation)
			}
			Expect(strings.Join(t.AssistantTexts(), "\n")).To(ContainSubstring(scenario.TaskSummary), "the model saw the first turn")
		}
	}
	Expect(fix).NotTo(BeEmpty(), "the CI failure reached the agent")
	if a.conversation == "" {
		return // its requests name no conversation: what the model saw (above) is the proof
	}
	Expect(first).NotTo(BeEmpty(), "the CLI names its conversation in %s", a.conversation)
	Expect(fix).To(Equal(first), "the fix is a turn of the same conversation")
}

// customWholeSession plays the whole session with a custom agent: test/customagent/agent.sh, a
// shell script speaking Shepherd's JSON-lines protocol, run from an image that has bash and git
// (as a team's own image would), configured only through the Project (type custom, image,
// command). Each prompt it gets (the issue, the CI failure, the review) becomes a commit.
func customWholeSession(ctx context.Context, c *cluster) {
	By("serving the fake GitHub on the node IP, with webhooks to the manager's Service")
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	run := playScenario(ctx, c, gh, playOptions{pollInterval: time.Minute, custom: true})
	checkSessionEnd(ctx, c, run)
	Expect(run.model.Requests()).To(BeEmpty(), "the script calls no model")
	Expect(run.res.Session.Status.Agent.SessionID).To(HavePrefix("conv-"), "the conversation id the script reported")
}
