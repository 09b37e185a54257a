package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
	"github.com/shepherd-dev/shepherd/test/gitserver"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/realagents"
)

// The agent pods of these specs follow docs/runner.md's layout: the runner copied in from the
// runner image, the checkout prepared by an init container (here with the runner image's git; the
// controllers run prepare in the agent image, which has git too), the agent image running
// `runner run`, which runs the real CLI turn by turn and talks to the manager's channel with the
// pod's projected token.
const (
	podRunnerPath   = "/shepherd/bin/runner"
	podCheckoutPath = "/shepherd/checkout/repo"
	podTokenDir     = "/var/run/secrets/shepherd"
	agentRepo       = "acme/widgets"
	// scriptedAPIKey is what the CLIs send the scripted model server, which accepts any.
	scriptedAPIKey = "sk-shepherd-e2e-scripted"
	// agentCommitMsg is the commit the model makes with the CLI's shell tool.
	agentCommitMsg = "Note the agent user in the README"
	// modelProvider is the scripted model server's id in Codex's and OpenCode's provider settings.
	modelProvider = "shepherd"
)

// realAgent is what differs between the real CLIs in their pods: the image, how the model API is
// configured (docs/agents.md, "Using them in a Project": env on the agent container, and the
// Task's extraArgs and model, which the runner passes to the adapter), the CLI's shell tool and
// how the model calls it, and what the CLI shows of its conversation.
type realAgent struct {
	name  string // in the README line the agent writes
	typ   agentsv1alpha1.AgentType
	image string
	// modelAPI is the model API's configuration for the server at url (http://host:port): the
	// agent container's env and the Task's agent settings.
	modelAPI func(url string) ([]corev1.EnvVar, runnerapi.AgentConfig)
	// tool is the tool the model calls; shell the reply that runs command with it.
	tool  string
	shell func(command string) modelserver.Reply
	// conversation is the header naming the CLI's conversation in its model requests.
	conversation string
	// requestModel is the model every conversational request names ("": not checked).
	requestModel string
	// reportsModel says the CLI prints the model it uses (Claude Code's system/init); Codex's and
	// OpenCode's JSON output names none. printsCost says it prints a cost (Codex: tokens only).
	reportsModel, printsCost bool
	// printed are pieces of the CLI's own output, which the runner passes to the pod's log.
	printed map[string]string
}

var (
	claudeCodeAgent = realAgent{
		name: "Claude Code", typ: agentsv1alpha1.AgentClaudeCode, image: "shepherd-agent-claude-code:latest",
		modelAPI: func(url string) ([]corev1.EnvVar, runnerapi.AgentConfig) {
			return []corev1.EnvVar{{Name: "ANTHROPIC_BASE_URL", Value: url}, {Name: "ANTHROPIC_API_KEY", Value: scriptedAPIKey}},
				runnerapi.AgentConfig{}
		},
		tool: "Bash",
		shell: func(command string) modelserver.Reply {
			return modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{"command": command, "description": "Edit README.md and commit"}})
		},
		conversation: "X-Claude-Code-Session-Id",
		reportsModel: true, printsCost: true,
		printed: map[string]string{
			`"permissionMode":"bypassPermissions"`: "Claude Code's init event: the adapter's argv, as a non-root user (no IS_SANDBOX)",
			`"claude_code_version":"`:              "the real CLI printed its init event",
		},
	}
	// Codex: the provider through -c (the image's config.toml has none), the key in the env. Not
	// its default model, so that the Task's model is seen to reach `-m`; one Codex knows, so that
	// it runs its tools as for the default: through the free-form "exec" tool, JavaScript that
	// awaits the nested exec_command (test/realagents).
	codexAgent = realAgent{
		name: "Codex", typ: agentsv1alpha1.AgentCodex, image: "shepherd-agent-codex:latest",
		modelAPI: func(url string) ([]corev1.EnvVar, runnerapi.AgentConfig) {
			return []corev1.EnvVar{{Name: "OPENAI_API_KEY", Value: scriptedAPIKey}},
				runnerapi.AgentConfig{Model: "gpt-6.2-astra", ExtraArgs: []string{
					"-c", fmt.Sprintf("model_provider=%q", modelProvider),
					"-c", fmt.Sprintf(`model_providers.%s={name="Scripted model server",base_url=%q,wire_api="responses",env_key="OPENAI_API_KEY"}`,
						modelProvider, url+"/v1"),
				}}
		},
		tool: "exec",
		shell: func(command string) modelserver.Reply {
			js := fmt.Sprintf("const r = await tools.exec_command({cmd: %s});\ntext(r.output);\n", jsonString(command))
			return modelserver.Tools(modelserver.ToolCall{Name: "exec", Input: js})
		},
		conversation: "Thread-Id",
		requestModel: "gpt-6.2-astra",
		printed: map[string]string{
			`"type":"thread.started"`:    "Codex's JSON events",
			`"type":"command_execution"`: "Codex ran the command with its shell tool",
		},
	}
	// OpenCode: the provider in OPENCODE_CONFIG_CONTENT (Bypass mode: the adapter leaves that
	// variable alone), @ai-sdk/anthropic, bundled in the binary. The Task's model (--model) is not
	// the configuration's default, so that it is seen to take effect.
	openCodeAgent = realAgent{
		name: "OpenCode", typ: agentsv1alpha1.AgentOpenCode, image: "shepherd-agent-opencode:latest",
		modelAPI: func(url string) ([]corev1.EnvVar, runnerapi.AgentConfig) {
			// The Task's model (sonnet) must override this default (haiku) for the check below.
			config := realagents.OpenCodeConfig(url, scriptedAPIKey, "claude-haiku-4-5")
			return []corev1.EnvVar{{Name: "OPENCODE_CONFIG_CONTENT", Value: jsonString(config)}},
				runnerapi.AgentConfig{Model: realagents.OpenCodeProvider + "/claude-sonnet-4-5"}
		},
		tool: "bash",
		shell: func(command string) modelserver.Reply {
			return modelserver.Tools(modelserver.ToolCall{Name: "bash", Input: map[string]any{"command": command, "description": "Edit README.md and commit"}})
		},
		conversation: "X-Session-Id",
		requestModel: "claude-sonnet-4-5",
		printsCost:   true,
		printed: map[string]string{
			`"tool":"bash"`:        "OpenCode's bash tool ran",
			`"type":"step_finish"`: "OpenCode's JSON events",
		},
	}
)

// runnerChannel is the manager's side of the runner channel, served from the test process on
// the node IP: the real runnerapi handler, reviewing the pod's projected token with the
// cluster's TokenReview API and reading the pod from the cluster, with the in-memory Backend.
type runnerChannel struct {
	backend *runnerapitest.MemoryBackend
	url     string
}

func startRunnerChannel(c *cluster, host string) *runnerChannel {
	backend := runnerapitest.NewMemoryBackend()
	h, err := runnerapi.NewHandler(runnerapi.HandlerOptions{
		Backend: backend, Reviewer: runnerapi.NewTokenReviewer(c.client), Pods: c.client, Log: GinkgoLogr,
	})
	Expect(err).NotTo(HaveOccurred())
	backend.OnMessage = h.Wake
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return &runnerChannel{backend: backend, url: "http://" + l.Addr().String()}
}

// realAgentSession runs the real CLI of a from its agent image in a pod as uid 65532 under the
// restricted Pod Security Standard, against the scripted model server: the model edits a file
// and commits with the CLI's own shell tool, the runner pushes the branch to the git server on
// the host and asks the channel for the pull request.
func realAgentSession(ctx context.Context, c *cluster, a realAgent) {
	host := nodeIP(ctx, c)
	branch := "shepherd/e2e-" + string(a.typ)

	By("serving the scripted model API, a git server with credentials and the runner channel on the node IP")
	ms := modelserver.New(nil)
	Expect(ms.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(ms.Close)
	srv, err := gitserver.New(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	srv.Username, srv.Password = "shepherd-bot", "e2e-push-token"
	base, err := srv.Seed(agentRepo, "main", map[string]string{"README.md": "# widgets\n"})
	Expect(err).NotTo(HaveOccurred())
	Expect(srv.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(srv.Close)
	repoURL := fmt.Sprintf("http://%s/%s.git", srv.Addr(), agentRepo)
	ch := startRunnerChannel(c, host)

	ns := restrictedNamespace(ctx, c, "e2e-"+string(a.typ)+"-")
	// Best effort: after a failure the suite's AfterAll may already have stopped the cluster
	// (with everything in it) when this runs.
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	session := types.NamespacedName{Namespace: ns.Name, Name: "fix-widgets"}
	const prompt = "Note in README.md which user you run as, and commit it."
	modelEnv, agentConfig := a.modelAPI(ms.URL())
	agentConfig.Type, agentConfig.PermissionMode = a.typ, agentsv1alpha1.PermissionBypass
	ch.backend.SetTask(session, runnerapi.Task{
		Agent:      agentConfig,
		Prompt:     prompt,
		Title:      "Note the agent's user",
		Repository: repoURL, Branch: branch, BaseBranch: "main",
	})
	ch.backend.SetGitRemote(repoURL, http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(srv.Username+":"+srv.Password))}})

	// The model's side of the conversation: one call of the CLI's shell tool that edits
	// README.md and commits, then the turn's summary.
	const summary = "Noted the user in README.md and committed it."
	ms.Append(
		a.shell(fmt.Sprintf(`echo "Edited by %s running as uid $(id -u)." >> README.md && git commit -am '%s'`, a.name, agentCommitMsg)),
		modelserver.Text(summary),
	)

	By(fmt.Sprintf("running the agent pod: runner copied in, checkout prepared, %s under `runner run`", a.name))
	pod := agentPod(ns.Name, session.Name, repoURL, branch, ch.url, ms.URL(), host, a.image, modelEnv)
	Expect(c.client.Create(ctx, pod)).To(Succeed())
	started := time.Now()

	By("the agent's commit reaches the branch on the git server, and the pull request is asked for")
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			StopTrying(fmt.Sprintf("the agent pod ended (%s): %s", pod.Status.Phase, podLogs(ctx, c, pod))).Now()
		}
		g.Expect(ch.backend.PullRequests(session)).To(HaveLen(1), "pod %s: %s", pod.Status.Phase, describePending(ctx, c, pod))
	}).WithTimeout(4*time.Minute).WithPolling(time.Second).Should(Succeed(), func() string { return podLogsTail(ctx, c, pod, 50) })
	took := time.Since(started).Round(100 * time.Millisecond)
	fmt.Fprintf(GinkgoWriter, "%s: pull request asked for %s after the pod was created\n", a.name, took)
	AddReportEntry(a.name+": pod created → pull request asked for", took.String())
	pr := ch.backend.PullRequests(session)[0]
	Expect(pr.Branch).To(Equal(branch))
	Expect(pr.Body).To(ContainSubstring(summary))
	Expect(srv.Ref(agentRepo, "refs/heads/"+branch)).To(Equal(pr.Head), "the pushed head is the pull request's")
	Expect(srv.Ref(agentRepo, "refs/heads/main")).To(Equal(base), "main is untouched")
	bare := srv.Path(agentRepo)
	Expect(gitOut(bare, "log", "--format=%s", "main.."+branch)).To(Equal(agentCommitMsg), "one commit, the agent's")
	Expect(gitOut(bare, "rev-parse", branch+"^")).To(Equal(base), "on top of main")
	Expect(gitOut(bare, "show", branch+":README.md")).To(Equal("# widgets\nEdited by "+a.name+" running as uid 65532."),
		"%s's shell tool ran as the pod's non-root user", a.name)
	Expect(gitOut(bare, "log", "-1", "--format=%an <%ae>", branch)).To(Equal("Shepherd Agent <agent@shepherd.invalid>"))
	Expect(ch.backend.GitRequests()).To(BeNumerically(">=", 2), "the clone and the push went through the channel's git endpoint")

	By(fmt.Sprintf("the runner reports the turn from %s's own output", a.name))
	Eventually(func() *runnerapi.ActivityReport { return ch.backend.Activity(session) }).
		WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(HaveField("State", agentsv1alpha1.ActivityReady))
	Expect(ch.backend.States(session)).To(HaveExactElements(agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityReady))
	turns := ms.Turns()
	Expect(turns).To(HaveLen(2), "a tool call and the summary")
	Expect(strings.Join(turns[0].UserTexts(), "\n")).To(ContainSubstring(prompt), "the prompt reached the model")
	Expect(turns[0].ToolNames()).To(ContainElement(a.tool))
	Expect(strings.Join(turns[1].ToolResults(), "\n")).To(ContainSubstring(agentCommitMsg), "git commit's output went back to the model")
	conversation := turns[0].Header.Get(a.conversation)
	Expect(conversation).NotTo(BeEmpty(), "the CLI names its conversation in its requests (%s)", a.conversation)
	for _, r := range turns {
		Expect(r.Header.Get(a.conversation)).To(Equal(conversation), "one conversation")
		if a.requestModel != "" {
			Expect(r.Model()).To(Equal(a.requestModel), "the Task's model reached the CLI")
		}
	}
	var sessionID, model string
	for _, r := range ch.backend.Reports(session) {
		if r.Agent != nil {
			sessionID, model = r.Agent.SessionID, r.Agent.Model
		}
	}
	Expect(sessionID).To(Equal(conversation), "the id the CLI printed is the one it sends")
	if a.reportsModel {
		Expect(model).NotTo(BeEmpty())
	} else {
		Expect(model).To(BeEmpty(), "the CLI prints no model")
	}
	Eventually(func(g Gomega) {
		var usage *runnerapi.Usage
		for _, r := range ch.backend.Reports(session) {
			if r.Usage != nil {
				usage = r.Usage
			}
		}
		g.Expect(usage).NotTo(BeNil())
		g.Expect(usage.Turns).To(Equal(int32(1)))
		g.Expect(usage.InputTokens).To(BeNumerically(">", 0))
		g.Expect(usage.OutputTokens).To(BeNumerically(">", 0))
		if a.printsCost {
			g.Expect(usage.CostUSD).NotTo(BeEmpty(), "the cost the CLI printed")
		} else {
			g.Expect(usage.CostUSD).To(BeEmpty(), "the CLI prints no cost")
		}
	}).WithTimeout(time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "the usage from the CLI's output")
	Expect(ms.Problems()).To(BeEmpty(), "no request past the script, and nothing tried to leave through the proxy")

	log := podLog(ctx, c, pod, "agent")
	for piece, why := range a.printed {
		Expect(log).To(ContainSubstring(piece), why)
	}

	By("stopping the pod: the runner stops and reports it")
	Expect(c.client.Delete(ctx, pod)).To(Succeed())
	Eventually(func() *runnerapi.ActivityReport { return ch.backend.Activity(session) }).
		WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(HaveField("State", agentsv1alpha1.ActivityExited))
	waitGone(ctx, c, pod)
	Expect(c.client.Delete(ctx, ns)).To(Succeed())
}

// agentPod is an agent pod as docs/runner.md lays it out, under the restricted profile, as uid
// 65532: the runner copied from the runner image; the checkout cloned into an emptyDir by
// `runner prepare` with the runner image's git; `runner run` in the agent image with modelEnv
// (the model API at modelURL). IS_SANDBOX is not set: Claude Code accepts bypassPermissions from
// a non-root user.
func agentPod(ns, session, repoURL, branch, channelURL, modelURL, host, image string, modelEnv []corev1.EnvVar) *corev1.Pod {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	channelEnv := []corev1.EnvVar{
		{Name: "SHEPHERD_MANAGER_URL", Value: channelURL},
		{Name: "SHEPHERD_TOKEN_FILE", Value: podTokenDir + "/token"},
	}
	mounts := []corev1.VolumeMount{
		{Name: "shepherd-bin", MountPath: "/shepherd/bin", ReadOnly: true},
		{Name: "checkout", MountPath: "/shepherd/checkout"},
		{Name: "runner-token", MountPath: podTokenDir, ReadOnly: true},
	}
	// Everything but the node's own services goes to the model server as a proxy, which refuses
	// it and records a problem: the image's settings must keep the CLI off the internet.
	direct := host + ",127.0.0.1,localhost"
	agentEnv := append(append(append([]corev1.EnvVar{}, modelEnv...),
		corev1.EnvVar{Name: "GIT_AUTHOR_NAME", Value: "Shepherd Agent"}, corev1.EnvVar{Name: "GIT_AUTHOR_EMAIL", Value: "agent@shepherd.invalid"},
		corev1.EnvVar{Name: "GIT_COMMITTER_NAME", Value: "Shepherd Agent"}, corev1.EnvVar{Name: "GIT_COMMITTER_EMAIL", Value: "agent@shepherd.invalid"},
		corev1.EnvVar{Name: "HTTP_PROXY", Value: modelURL}, corev1.EnvVar{Name: "HTTPS_PROXY", Value: modelURL},
		corev1.EnvVar{Name: "http_proxy", Value: modelURL}, corev1.EnvVar{Name: "https_proxy", Value: modelURL},
		corev1.EnvVar{Name: "NO_PROXY", Value: direct}, corev1.EnvVar{Name: "no_proxy", Value: direct},
	), channelEnv...)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: session + "-agent", Namespace: ns, Labels: map[string]string{
			agentsv1alpha1.LabelSession: session, agentsv1alpha1.LabelComponent: "agent",
		}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(agentUID),
				RunAsGroup:     ptr.To(agentUID),
				FSGroup:        ptr.To(agentUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{
				{
					Name: "copy-runner", Image: runnerImage, ImagePullPolicy: corev1.PullNever,
					Args:            []string{"copy-self", "--to=" + podRunnerPath},
					VolumeMounts:    []corev1.VolumeMount{{Name: "shepherd-bin", MountPath: "/shepherd/bin"}},
					SecurityContext: sc,
				},
				{
					// The runner image's git, the copied runner (git's credential helper must be
					// at the same path in prepare and run).
					Name: "prepare", Image: runnerImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{podRunnerPath},
					Args: []string{"prepare", "--mode=Clone", "--path=" + podCheckoutPath, "--remote-url=" + repoURL,
						"--branch=" + branch, "--base=main", "--result-file=/dev/termination-log"},
					Env:             append([]corev1.EnvVar{{Name: "HOME", Value: "/tmp"}}, channelEnv...),
					VolumeMounts:    mounts,
					SecurityContext: sc,
				},
			},
			Containers: []corev1.Container{{
				Name: "agent", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:         []string{podRunnerPath},
				Args:            []string{"run", "--workdir=" + podCheckoutPath, "--debounce=200ms"},
				WorkingDir:      podCheckoutPath,
				Env:             agentEnv,
				VolumeMounts:    mounts,
				SecurityContext: sc,
			}},
			Volumes: []corev1.Volume{
				{Name: "shepherd-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "checkout", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "runner-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: runnerapi.Audience, ExpirationSeconds: ptr.To(int64(3600)), Path: "token",
					}}},
				}}},
			},
		},
	}
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
