package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// Each real CLI runs through the controllers, as a team runs it: a Project whose agent talks to
// the scripted model server through the runner's model proxy (agent.modelAPI: the key in the
// runner's container, a placeholder in the agent's), an AgentSession with a prompt, the agent
// pod the manager makes, the fake GitHub on the node IP as the forge. The model edits a file
// and commits with the CLI's own shell tool; the runner pushes through the manager; the manager
// opens the pull request.
const (
	// agentCommitMsg is the commit the model makes with the CLI's shell tool.
	agentCommitMsg = "Note the agent user in the README"
	// agentModelKey is the Project's model API key, which only the runner's container holds.
	agentModelKey = "sk-ant-e2e-model-key-only-the-runner-reads"
)

// realAgent is what differs between the real CLIs: the image, the model API it speaks and its
// model, the CLI's shell tool and how the model calls it, and what the CLI shows of its
// conversation.
type realAgent struct {
	name  string // in the README line the agent writes
	typ   agentsv1alpha1.AgentType
	image string
	// api is the model API the CLI speaks; model the Project's agent.model ("": the CLI's own).
	api   agentsv1alpha1.ModelAPIKind
	model string
	// tool is the tool the model calls; shell the reply that runs command with it.
	tool  string
	shell func(command string) modelserver.Reply
	// conversation is the header naming the CLI's conversation in its model requests.
	conversation string
	// requestModel is the model every conversational request names ("": not checked).
	requestModel string
	// reportsModel says the CLI prints the model it uses (Claude Code's system/init); Codex's and
	// OpenCode's JSON output names none. cost is "printed", "none" or "" (not checked: OpenCode
	// prints the cost of the models its configuration prices, and the proxy's names none).
	reportsModel bool
	cost         string
	// transcriptTool is the shell tool as the CLI's output names it, and so the transcript.
	transcriptTool string
}

var (
	claudeCodeAgent = realAgent{
		name: "Claude Code", typ: agentsv1alpha1.AgentClaudeCode, image: "shepherd-agent-claude-code:latest",
		api:  agentsv1alpha1.ModelAPIAnthropic,
		tool: "Bash",
		shell: func(command string) modelserver.Reply {
			return modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{"command": command, "description": "Edit README.md and commit"}})
		},
		conversation: "X-Claude-Code-Session-Id",
		reportsModel: true, cost: "printed",
		transcriptTool: "Bash",
	}
	// Codex: the adapter's provider for the runner's proxy (-c; the image's config.toml has none).
	// Not its default model, so that the Project's model is seen to reach `-m`; one Codex knows,
	// so that it runs its tools as for the default: through the free-form "exec" tool, JavaScript
	// that awaits the nested exec_command (test/realagents).
	codexAgent = realAgent{
		name: "Codex", typ: agentsv1alpha1.AgentCodex, image: "shepherd-agent-codex:latest",
		api: agentsv1alpha1.ModelAPIOpenAI, model: "gpt-6.2-astra",
		tool: "exec",
		shell: func(command string) modelserver.Reply {
			js := fmt.Sprintf("const r = await tools.exec_command({cmd: %s});\ntext(r.output);\n", jsonString(command))
			return modelserver.Tools(modelserver.ToolCall{Name: "exec", Input: js})
		},
		conversation:   "Thread-Id",
		requestModel:   "gpt-6.2-astra",
		cost:           "none",
		transcriptTool: "command_execution",
	}
	// OpenCode: the adapter's provider for the runner's proxy in OPENCODE_CONFIG_CONTENT, on
	// @ai-sdk/anthropic (bundled in the binary), with the Project's model, which OpenCode needs.
	openCodeAgent = realAgent{
		name: "OpenCode", typ: agentsv1alpha1.AgentOpenCode, image: "shepherd-agent-opencode:latest",
		api: agentsv1alpha1.ModelAPIAnthropic, model: "claude-sonnet-4-5",
		tool: "bash",
		shell: func(command string) modelserver.Reply {
			return modelserver.Tools(modelserver.ToolCall{Name: "bash", Input: map[string]any{"command": command, "description": "Edit README.md and commit"}})
		},
		conversation:   "X-Session-Id",
		requestModel:   "claude-sonnet-4-5",
		transcriptTool: "bash",
	}
	// Gemini CLI: its image's /etc/gemini-cli/settings.json picks the API-key login and keeps
	// it offline; its requests name no conversation (the resumed one shows in what the model
	// sees). A model, so that it does not first ask a small one to route the task.
	geminiAgent = realAgent{
		name: "Gemini CLI", typ: agentsv1alpha1.AgentGemini, image: "shepherd-agent-gemini:latest",
		api: agentsv1alpha1.ModelAPIGemini, model: "gemini-2.5-pro",
		tool: "run_shell_command",
		shell: func(command string) modelserver.Reply {
			return modelserver.Tools(modelserver.ToolCall{Name: "run_shell_command", Input: map[string]any{"command": command, "description": "Edit and commit"}})
		},
		reportsModel:   true,
		transcriptTool: "run_shell_command",
	}
)

// agentProject is a Project on the fake GitHub whose agent reaches the scripted model server
// through the runner's model proxy, in a restricted namespace of its own.
type agentProject struct {
	ns    string
	name  string
	gh    *scenario.FakeGitHub
	model *modelserver.Server
}

// newAgentProject serves the fake GitHub (webhooks to the manager's Service) and the scripted
// model on the node IP, and applies the Secrets and the Project for a; mutate changes the spec.
func newAgentProject(ctx context.Context, c *cluster, a realAgent, prefix string, mutate func(*agentsv1alpha1.ProjectSpec)) *agentProject {
	GinkgoHelper()
	host := nodeIP(ctx, c)
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: host, Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	ms := modelserver.New(nil)
	Expect(ms.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(ms.Close)

	ns := restrictedNamespace(ctx, c, prefix)
	// Best effort: after a failure the suite's AfterAll may already have stopped the cluster.
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	webhookURL, err := scenario.WebhookURL(ctx, c.client, types.NamespacedName{Namespace: ns.Name, Name: "widgets"})
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.HookTo(ctx, webhookURL)).To(Succeed())
	for name, data := range map[string]map[string]string{
		"forge": {"token": gh.Token(), "webhook-secret": gh.WebhookSecret()},
		"model": {"api-key": agentModelKey},
	} {
		Expect(c.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}, StringData: data})).To(Succeed())
	}
	p := &agentsv1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: ns.Name},
		Spec: agentsv1alpha1.ProjectSpec{
			Repository: agentsv1alpha1.RepositorySpec{URL: agentsv1alpha1.RepositoryURL(gh.CloneURL()), DefaultBranch: "main",
				Credentials: &agentsv1alpha1.RepositoryCredentials{SecretRef: &agentsv1alpha1.SecretKeyRef{Name: "forge", Key: "token"}}},
			SCM: agentsv1alpha1.SCMSpec{Provider: agentsv1alpha1.SCMGitHub, APIURL: agentsv1alpha1.HTTPURL(gh.APIURL()),
				WebhookSecretRef: &agentsv1alpha1.SecretKeyRef{Name: "forge", Key: "webhook-secret"}},
			Agent: agentsv1alpha1.AgentSpec{Type: a.typ, Model: a.model, PermissionMode: agentsv1alpha1.PermissionBypass,
				ModelAPI: &agentsv1alpha1.ModelAPISpec{API: a.api, URL: agentsv1alpha1.HTTPURL(ms.URL()),
					KeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "model", Key: "api-key"}}},
		},
	}
	if mutate != nil {
		mutate(&p.Spec)
	}
	Expect(c.client.Create(ctx, p)).To(Succeed())
	Expect(scenario.WaitProjectReady(ctx, c.client, client.ObjectKeyFromObject(p), time.Minute)).To(Succeed())
	return &agentProject{ns: ns.Name, name: p.Name, gh: gh, model: ms}
}

// session creates an AgentSession with prompt and waits for its pull request to open; it
// returns the session, its branch and the pull request.
func (p *agentProject) session(ctx context.Context, c *cluster, name, prompt string) (*agentsv1alpha1.AgentSession, scenario.PullRequest) {
	GinkgoHelper()
	s := &agentsv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.ns},
		Spec:       agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: p.name}, Prompt: prompt},
	}
	Expect(c.client.Create(ctx, s)).To(Succeed())
	key := client.ObjectKeyFromObject(s)
	var pr scenario.PullRequest
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, key, s)).To(Succeed())
		g.Expect(s.Status.Phase).NotTo(BeElementOf(agentsv1alpha1.PhaseErrored, agentsv1alpha1.PhaseStopped, agentsv1alpha1.PhaseDone), "%s", diagnose(ctx, c, key))
		g.Expect(s.Status.Branch).NotTo(BeEmpty())
		prs, err := p.gh.PullRequestsFor(ctx, s.Status.Branch)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(prs).To(HaveLen(1), "session %s: phase %s", name, s.Status.Phase)
		pr = prs[0]
	}).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(Succeed(), func() string { return diagnose(ctx, c, key) })
	return s, pr
}

// realAgentSession runs the real CLI of a from its agent image through the controllers: the
// model edits a file and commits with the CLI's own shell tool; the runner pushes the branch
// through the manager to the forge and the manager opens the pull request. Every model request
// reaches the model with the Project's key; the agent's container holds a placeholder.
func realAgentSession(ctx context.Context, c *cluster, a realAgent, steer steerFunc) {
	By("serving the fake GitHub and the scripted model on the node IP; a Project whose agent uses the model through the runner's proxy")
	p := newAgentProject(ctx, c, a, "e2e-"+string(a.typ)+"-", nil)
	const prompt = "Note in README.md which user you run as, and commit it."
	const summary = "Noted the user in README.md and committed it."
	p.model.Append(
		a.shell(fmt.Sprintf(`echo "Edited by %s running as uid $(id -u)." >> README.md && git commit -am '%s'`, a.name, agentCommitMsg)),
		modelserver.Text(summary),
	)

	By(fmt.Sprintf("an AgentSession with a prompt: the manager's pod runs %s, the pull request opens", a.name))
	started := time.Now()
	s, pr := p.session(ctx, c, "fix-widgets", prompt)
	took := time.Since(started).Round(100 * time.Millisecond)
	fmt.Fprintf(GinkgoWriter, "%s: pull request opened %s after the session was created\n", a.name, took)
	AddReportEntry(a.name+": session created → pull request opened", took.String())
	bare := p.gh.Server.GitDir(p.gh.Repo())
	Expect(gitOut(bare, "log", "--format=%s", "main.."+s.Status.Branch)).To(Equal(agentCommitMsg), "one commit, the agent's")
	Expect(gitOut(bare, "rev-parse", s.Status.Branch)).To(Equal(pr.HeadSHA))
	Expect(gitOut(bare, "show", s.Status.Branch+":README.md")).To(HaveSuffix("Edited by "+a.name+" running as uid 65532."),
		"%s's shell tool ran as the pod's non-root user", a.name)
	Expect(gitOut(bare, "log", "-1", "--format=%an <%ae>", s.Status.Branch)).To(Equal("Shepherd agent (fix-widgets) <fix-widgets@agents.shepherd.dev>"))

	By(fmt.Sprintf("the session's status reports the turn from %s's own output", a.name))
	key := client.ObjectKeyFromObject(s)
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, key, s)).To(Succeed())
		g.Expect(s.Status.Activity).To(HaveField("State", agentsv1alpha1.ActivityReady))
		g.Expect(s.Status.Usage).NotTo(BeNil())
		g.Expect(s.Status.Usage.Turns).To(Equal(int32(1)))
		g.Expect(s.Status.Usage.InputTokens).To(BeNumerically(">", 0))
		g.Expect(s.Status.Usage.OutputTokens).To(BeNumerically(">", 0))
		// The runner's model proxy counted the turn; the CLI's own report is kept beside it.
		g.Expect(s.Status.Usage.Source).To(Equal(agentsv1alpha1.UsageFromProxy))
		g.Expect(s.Status.Usage.Requests).To(BeNumerically(">", 0))
		g.Expect(s.Status.Usage.Agent).NotTo(BeNil(), "the CLI's own report")
		switch a.cost {
		case "printed":
			g.Expect(s.Status.Usage.Agent.CostUSD).NotTo(BeEmpty(), "the cost the CLI printed")
		case "none":
			g.Expect(s.Status.Usage.Agent.CostUSD).To(BeEmpty(), "the CLI prints no cost")
		}
	}).WithTimeout(time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), func() string { return diagnose(ctx, c, key) })
	turns := p.model.Turns()
	Expect(turns).To(HaveLen(2), "a tool call and the summary")
	Expect(strings.Join(turns[0].UserTexts(), "\n")).To(ContainSubstring(prompt), "the prompt reached the model")
	Expect(turns[0].ToolNames()).To(ContainElement(a.tool))
	Expect(strings.Join(turns[1].ToolResults(), "\n")).To(ContainSubstring(agentCommitMsg), "git commit's output went back to the model")
	conversation := turns[0].Header.Get(a.conversation)
	Expect(conversation).NotTo(BeEmpty(), "the CLI names its conversation in its requests (%s)", a.conversation)
	for _, r := range turns {
		Expect(r.Header.Get(a.conversation)).To(Equal(conversation), "one conversation")
		if a.requestModel != "" {
			Expect(r.Model()).To(Equal(a.requestModel), "the Project's model reached the CLI")
		}
	}
	Expect(s.Status.Agent).NotTo(BeNil())
	Expect(s.Status.Agent.SessionID).To(Equal(conversation), "the id the CLI printed is the one it sends")
	if a.reportsModel {
		Expect(s.Status.Agent.Model).NotTo(BeEmpty())
	}
	By("every model request came through the runner's proxy with the Project's key, none with the placeholder")
	for _, r := range p.model.Requests() {
		creds := r.Header.Get("X-Api-Key") + " " + r.Header.Get("Authorization")
		Expect(creds).To(ContainSubstring(agentModelKey), "request %d (%s)", r.Seq, r.Path)
		Expect(creds).NotTo(ContainSubstring(agent.PlaceholderKey))
	}
	Expect(p.model.Problems()).To(BeEmpty(), "no request past the script")

	By("the turn's transcript through the API server (Shepherd's aggregated API) and, readable, in the pod's log")
	var entries []transcript.Entry
	Eventually(func(g Gomega) {
		entries = sessionTranscript(ctx, g, c, p.ns, s.Name)
		g.Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindTurnEnded), HaveField("Text", summary))))
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindTurnStarted), HaveField("Text", ContainSubstring(prompt)))))
	Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindNote),
		HaveField("Text", HavePrefix("conversation "+s.Status.Agent.SessionID)))), "the CLI's conversation")
	Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindToolCall), HaveField("Tool", a.transcriptTool),
		HaveField("Text", ContainSubstring(agentCommitMsg)))), "the shell tool's command")
	Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindToolResult), HaveField("Tool", a.transcriptTool))), "its output")
	Expect(entries).To(ContainElement(And(HaveField("Kind", transcript.KindNote), HaveField("Text", HavePrefix("pushed ")))), "the runner's push")
	for i, e := range entries {
		Expect(e.Seq).To(Equal(uint64(i+1)), "numbered from 1, none lost")
	}
	pod := &corev1.Pod{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: s.Name + "-agent"}, pod)).To(Succeed())
	log := podLog(ctx, c, pod, "runner")
	for _, line := range []string{"── turn 1 ── ", "· conversation " + s.Status.Agent.SessionID, "→ " + a.transcriptTool + " ",
		"← " + a.transcriptTool + ": ", "· pushed ", "✓ turn 1 ended: " + summary} {
		Expect(log).To(ContainSubstring(line))
	}
	Expect(log).NotTo(ContainSubstring(`{"type":`), "the pod's log is the readable transcript, not the CLI's JSON")
	if steer != nil {
		steer(ctx, c, p, s)
	}

	By("deleting the session: the pod goes")
	Expect(c.client.Delete(ctx, s)).To(Succeed())
	waitGone(ctx, c, pod)
}

// jsonString is v as JSON (a JavaScript literal for Codex's exec tool, OpenCode's inline config).
func jsonString(v any) string {
	raw, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(raw)
}

// gitOut runs git with args in dir (the host's git) and returns its trimmed output.
func gitOut(dir string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		Fail(fmt.Sprintf("git %s: %v: %s", strings.Join(args, " "), err, ee.Stderr))
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(string(out))
}

// sessionTranscript reads a session's transcript as `kubectl shepherd logs` does: from the
// API server, which proxies to the manager's aggregated API.
func sessionTranscript(ctx context.Context, g Gomega, c *cluster, ns, name string) []transcript.Entry {
	raw, err := c.clientset.RESTClient().Get().AbsPath(kubectlplugin.TranscriptPath(ns, name)).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "%s", raw)
	var list struct {
		Entries []transcript.Entry `json:"entries"`
	}
	g.Expect(json.Unmarshal(raw, &list)).To(Succeed())
	return list.Entries
}
