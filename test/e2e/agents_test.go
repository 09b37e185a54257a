package e2e

import (
	"context"
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
)

// The agent pod of this spec follows docs/runner.md's layout: the runner copied in from the
// runner image, the checkout prepared by an init container (here with the runner image's git; the
// controllers run prepare in the agent image, which has git too), the agent image running
// `runner run`, which runs the real CLI turn by turn and talks to the manager's channel with the
// pod's projected token.
const (
	claudeCodeImage = "shepherd-agent-claude-code:latest"
	podRunnerPath   = "/shepherd/bin/runner"
	podCheckoutPath = "/shepherd/checkout/repo"
	podTokenDir     = "/var/run/secrets/shepherd"
	claudeBranch    = "shepherd/e2e-claude-code"
	claudeRepo      = "acme/widgets"
	// scriptedAPIKey is what Claude Code sends the scripted model server, which accepts any.
	scriptedAPIKey = "sk-shepherd-e2e-scripted"
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

// claudeCodeSession runs the real Claude Code from the agent image in a pod as uid 65532 under
// the restricted Pod Security Standard, against the scripted model server: the model edits a
// file and commits with Claude Code's Bash tool, the runner pushes the branch to the git server
// on the host and asks the channel for the pull request.
func claudeCodeSession(ctx context.Context, c *cluster) {
	host := nodeIP(ctx, c)

	By("serving the scripted model API, a git server with credentials and the runner channel on the node IP")
	ms := modelserver.New(nil)
	Expect(ms.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(ms.Close)
	srv, err := gitserver.New(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	srv.Username, srv.Password = "shepherd-bot", "e2e-push-token"
	base, err := srv.Seed(claudeRepo, "main", map[string]string{"README.md": "# widgets\n"})
	Expect(err).NotTo(HaveOccurred())
	Expect(srv.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(srv.Close)
	repoURL := fmt.Sprintf("http://%s/%s.git", srv.Addr(), claudeRepo)
	ch := startRunnerChannel(c, host)

	ns := restrictedNamespace(ctx, c, "e2e-claude-")
	// Best effort: after a failure the suite's AfterAll may already have stopped the cluster
	// (with everything in it) when this runs.
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	session := types.NamespacedName{Namespace: ns.Name, Name: "fix-widgets"}
	const prompt = "Note in README.md which user you run as, and commit it."
	ch.backend.SetTask(session, runnerapi.Task{
		Agent:      runnerapi.AgentConfig{Type: agentsv1alpha1.AgentClaudeCode, PermissionMode: agentsv1alpha1.PermissionBypass},
		Prompt:     prompt,
		Title:      "Note the agent's user",
		Repository: repoURL, Branch: claudeBranch, BaseBranch: "main",
	})
	ch.backend.SetCredentials(srv.Addr(), runnerapi.Credentials{Username: srv.Username, Password: srv.Password, ExpiresAt: time.Now().Add(time.Hour)})

	// The model's side of the conversation: one Bash call that edits README.md and commits,
	// then the turn's summary.
	const summary = "Noted the user in README.md and committed it."
	ms.Append(
		modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{
			"command":     `echo "Edited by Claude Code running as uid $(id -u)." >> README.md && git commit -am 'Note the agent user in the README'`,
			"description": "Edit README.md and commit",
		}}),
		modelserver.Text(summary),
	)

	By("running the agent pod: runner copied in, checkout prepared, Claude Code under `runner run`")
	pod := claudeCodePod(ns.Name, session.Name, repoURL, ch.url, ms.URL(), host)
	Expect(c.client.Create(ctx, pod)).To(Succeed())
	started := time.Now()

	By("the agent's commit reaches the branch on the git server, and the pull request is asked for")
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			StopTrying(fmt.Sprintf("the agent pod ended (%s): %s", pod.Status.Phase, podLogs(ctx, c, pod))).Now()
		}
		g.Expect(ch.backend.PullRequests(session)).To(HaveLen(1), "pod %s: %s", pod.Status.Phase, describePending(ctx, c, pod))
	}).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
	fmt.Fprintf(GinkgoWriter, "pull request asked for %s after the pod was created\n", time.Since(started).Round(100*time.Millisecond))
	pr := ch.backend.PullRequests(session)[0]
	Expect(pr.Branch).To(Equal(claudeBranch))
	Expect(pr.Body).To(ContainSubstring(summary))
	Expect(srv.Ref(claudeRepo, "refs/heads/"+claudeBranch)).To(Equal(pr.Head), "the pushed head is the pull request's")
	Expect(srv.Ref(claudeRepo, "refs/heads/main")).To(Equal(base), "main is untouched")
	bare := srv.Path(claudeRepo)
	Expect(gitOut(bare, "log", "--format=%s", "main.."+claudeBranch)).To(Equal("Note the agent user in the README"), "one commit, the agent's")
	Expect(gitOut(bare, "rev-parse", claudeBranch+"^")).To(Equal(base), "on top of main")
	Expect(gitOut(bare, "show", claudeBranch+":README.md")).To(Equal("# widgets\nEdited by Claude Code running as uid 65532."),
		"Claude Code's Bash tool ran as the pod's non-root user")
	Expect(gitOut(bare, "log", "-1", "--format=%an <%ae>", claudeBranch)).To(Equal("Shepherd Agent <agent@shepherd.invalid>"))
	Expect(ch.backend.CredentialRequests()).To(BeNumerically(">=", 2), "the clone and the push authenticated through the runner's credential helper")

	By("the runner reports the turn from Claude Code's own output")
	Eventually(func() *runnerapi.ActivityReport { return ch.backend.Activity(session) }).
		WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(HaveField("State", agentsv1alpha1.ActivityReady))
	Expect(ch.backend.States(session)).To(HaveExactElements(agentsv1alpha1.ActivityActive, agentsv1alpha1.ActivityReady))
	turns := ms.Turns()
	Expect(turns).To(HaveLen(2), "a tool call and the summary")
	Expect(strings.Join(turns[0].UserTexts(), "\n")).To(ContainSubstring(prompt), "the prompt reached the model")
	Expect(turns[0].ToolNames()).To(ContainElement("Bash"))
	Expect(strings.Join(turns[1].ToolResults(), "\n")).To(ContainSubstring("Note the agent user in the README"), "git commit's output went back to the model")
	conversation := turns[0].Header.Get("X-Claude-Code-Session-Id")
	Expect(conversation).NotTo(BeEmpty())
	var sessionID, model string
	for _, r := range ch.backend.Reports(session) {
		if r.Agent != nil {
			sessionID, model = r.Agent.SessionID, r.Agent.Model
		}
	}
	Expect(sessionID).To(Equal(conversation))
	Expect(model).NotTo(BeEmpty())
	Expect(ms.Problems()).To(BeEmpty(), "no request past the script, and nothing tried to leave through the proxy")

	log := podLog(ctx, c, pod, "agent")
	Expect(log).To(ContainSubstring(`"permissionMode":"bypassPermissions"`), "Claude Code's init event: the adapter's argv, as a non-root user")
	Expect(log).To(ContainSubstring(`"claude_code_version":"`), "the real CLI printed it")

	By("stopping the pod: the runner stops and reports it")
	Expect(c.client.Delete(ctx, pod)).To(Succeed())
	Eventually(func() *runnerapi.ActivityReport { return ch.backend.Activity(session) }).
		WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(HaveField("State", agentsv1alpha1.ActivityExited))
	waitGone(ctx, c, pod)
	Expect(c.client.Delete(ctx, ns)).To(Succeed())
}

// claudeCodePod is an agent pod as docs/runner.md lays it out, under the restricted profile,
// as uid 65532: the runner copied from the runner image; the checkout cloned into an emptyDir
// by `runner prepare` with the runner image's git; `runner run` in the Claude Code image with
// the model API at modelURL. IS_SANDBOX is not set: Claude Code accepts bypassPermissions from
// a non-root user.
func claudeCodePod(ns, session, repoURL, channelURL, modelURL, host string) *corev1.Pod {
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
	// it and records a problem: the image's settings must keep Claude Code off the internet.
	direct := host + ",127.0.0.1,localhost"
	agentEnv := append([]corev1.EnvVar{
		{Name: "ANTHROPIC_BASE_URL", Value: modelURL},
		{Name: "ANTHROPIC_API_KEY", Value: scriptedAPIKey},
		{Name: "GIT_AUTHOR_NAME", Value: "Shepherd Agent"}, {Name: "GIT_AUTHOR_EMAIL", Value: "agent@shepherd.invalid"},
		{Name: "GIT_COMMITTER_NAME", Value: "Shepherd Agent"}, {Name: "GIT_COMMITTER_EMAIL", Value: "agent@shepherd.invalid"},
		{Name: "HTTP_PROXY", Value: modelURL}, {Name: "HTTPS_PROXY", Value: modelURL},
		{Name: "http_proxy", Value: modelURL}, {Name: "https_proxy", Value: modelURL},
		{Name: "NO_PROXY", Value: direct}, {Name: "no_proxy", Value: direct},
	}, channelEnv...)
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
						"--branch=" + claudeBranch, "--base=main", "--result-file=/dev/termination-log"},
					Env:             append([]corev1.EnvVar{{Name: "HOME", Value: "/tmp"}}, channelEnv...),
					VolumeMounts:    mounts,
					SecurityContext: sc,
				},
			},
			Containers: []corev1.Container{{
				Name: "agent", Image: claudeCodeImage, ImagePullPolicy: corev1.PullNever,
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
