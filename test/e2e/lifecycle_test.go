package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

const (
	lifecycleRepo    = "acme/greeter"
	lifecycleToken   = "ghp_e2e_shepherd"
	reviewerToken    = "ghp_e2e_reviewer"
	webhooksService  = "shepherd-webhooks"
	lifecycleSession = "greeter-1"
)

// phaseLog records every phase a session passes through, with the time it was first seen.
type phaseLog struct {
	mu     sync.Mutex
	start  time.Time
	phases []agentsv1alpha1.SessionPhase
	at     []time.Duration
}

func (l *phaseLog) watch(ctx context.Context, c *cluster, key client.ObjectKey) {
	l.start = time.Now()
	go func() {
		defer GinkgoRecover()
		for ctx.Err() == nil {
			s := &agentsv1alpha1.AgentSession{}
			if err := c.client.Get(ctx, key, s); err == nil && s.Status.Phase != "" {
				l.mu.Lock()
				if n := len(l.phases); n == 0 || l.phases[n-1] != s.Status.Phase {
					l.phases = append(l.phases, s.Status.Phase)
					l.at = append(l.at, time.Since(l.start))
					fmt.Fprintf(GinkgoWriter, "phase %-16s at %6.1fs\n", s.Status.Phase, time.Since(l.start).Seconds())
				}
				l.mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (l *phaseLog) seen() []agentsv1alpha1.SessionPhase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]agentsv1alpha1.SessionPhase(nil), l.phases...)
}

func (l *phaseLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, p := range l.phases {
		fmt.Fprintf(&b, "  %-16s at %6.1fs\n", p, l.at[i].Seconds())
	}
	return b.String()
}

// signedReceiver is a notification webhook that checks every signature and counts each delivery
// id, so that duplicates show.
type signedReceiver struct {
	secret []byte
	mu     sync.Mutex
	byID   map[string]int
	types  []string
	bad    int
}

func (r *signedReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !notify.Verify(r.secret, body, req.Header.Get(notify.SignatureHeader)) {
		r.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var n notify.Notification
	_ = json.Unmarshal(body, &n)
	r.byID[req.Header.Get(notify.DeliveryHeader)]++
	r.types = append(r.types, n.Type)
	w.WriteHeader(http.StatusNoContent)
}

func (r *signedReceiver) snapshot() (map[string]int, []string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := map[string]int{}
	for k, v := range r.byID {
		ids[k] = v
	}
	return ids, append([]string(nil), r.types...), r.bad
}

// wholeSession runs one session from a GitHub issue to its merge on the local cluster: the
// manager in the cluster, real pods, the real Claude Code against the scripted model server,
// real git against the fake GitHub, which the test drives as CI and as a reviewer. It kills the
// manager in the middle and checks that nothing was duplicated or lost.
func wholeSession(ctx context.Context, c *cluster) {
	host := nodeIP(ctx, c)
	webhooks := &corev1.Service{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: webhooksService}, webhooks)).To(Succeed())
	webhookURL := fmt.Sprintf("http://%s/", net.JoinHostPort(webhooks.Spec.ClusterIP, strconv.Itoa(int(webhooks.Spec.Ports[0].Port))))

	By("serving the fake GitHub on the node IP, with webhooks to the manager's Service")
	hookSecret := []byte("e2e-webhook-secret")
	gh, err := fakegithub.New(fakegithub.Options{Dir: GinkgoT().TempDir(), WebhookURL: webhookURL, WebhookSecret: hookSecret})
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(gh.Close)
	gh.AddToken(lifecycleToken, "shepherd-bot")
	gh.AddToken(reviewerToken, "reviewer")
	_, err = gh.CreateRepo(lifecycleRepo, "main", map[string]string{
		"README.md": "# greeter\n", "greet.go": "package greeter\n\nfunc Greet() string { return \"hello\" }\n",
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.SetProtection(lifecycleRepo, fakegithub.Protection{RequiredChecks: []string{"test"}, RequiredApprovals: 1})).To(Succeed())
	issue, err := gh.CreateIssue(lifecycleRepo, fakegithub.Issue{Title: "Greet the world", Body: "Greet() should say hello, world.", User: "alice"})
	Expect(err).NotTo(HaveOccurred())

	By("scripting the model: one commit per turn (the task, the CI failure, the review)")
	ms := modelserver.New(nil)
	Expect(ms.Start(net.JoinHostPort(host, "0"))).To(Succeed())
	DeferCleanup(ms.Close)
	commit := func(content, message string) modelserver.Reply {
		return modelserver.Tools(modelserver.ToolCall{Name: "Bash", Input: map[string]any{
			"command":     fmt.Sprintf("printf '%%s\\n' %q > greet.go && git commit -am %q", content, message),
			"description": message,
		}})
	}
	ms.Append(
		commit(`package greeter; func Greet() string { return "hello, world" }`, "Greet the world"),
		modelserver.Text("Greet() now says hello, world."),
		commit(`package greeter; func Greet() string { return "hello, world" } // tested`, "Fix the failing test"),
		modelserver.Text("Fixed the failing test."),
		commit(`package greeter; // Greet greets the world.
func Greet() string { return "hello, world" }`, "Document Greet"),
		modelserver.Text("Documented Greet as the reviewer asked."),
	)

	By("receiving signed notifications on the node IP")
	recv := &signedReceiver{secret: []byte("e2e-notify-secret"), byID: map[string]int{}}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Expect(err).NotTo(HaveOccurred())
	notifySrv := &http.Server{Handler: recv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = notifySrv.Serve(l) }()
	DeferCleanup(func() { _ = notifySrv.Close() })

	ns := restrictedNamespace(ctx, c, "e2e-session-")
	DeferCleanup(func() { _ = c.client.Delete(context.Background(), ns) })
	Expect(c.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "github"},
		StringData: map[string]string{"token": lifecycleToken, "webhook": string(hookSecret)}})).To(Succeed())
	Expect(c.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "anthropic"},
		StringData: map[string]string{"api-key": scriptedAPIKey}})).To(Succeed())
	Expect(c.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "notify"},
		StringData: map[string]string{"hmac": string(recv.secret)}})).To(Succeed())

	direct := host + ",127.0.0.1,localhost"
	project := &agentsv1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "greeter"},
		Spec: agentsv1alpha1.ProjectSpec{
			Repository: agentsv1alpha1.RepositorySpec{
				URL:         agentsv1alpha1.RepositoryURL(gh.CloneURL(lifecycleRepo)),
				Credentials: &agentsv1alpha1.RepositoryCredentials{SecretRef: &agentsv1alpha1.SecretKeyRef{Name: "github", Key: "token"}},
			},
			SCM: agentsv1alpha1.SCMSpec{
				APIURL:           agentsv1alpha1.HTTPURL(gh.URL()),
				WebhookSecretRef: &agentsv1alpha1.SecretKeyRef{Name: "github", Key: "webhook"},
			},
			Tracker: &agentsv1alpha1.TrackerSpec{Provider: agentsv1alpha1.TrackerGitHub},
			Agent: agentsv1alpha1.AgentSpec{
				Type:        agentsv1alpha1.AgentClaudeCode,
				Credentials: []agentsv1alpha1.AgentCredential{{EnvName: "ANTHROPIC_API_KEY", SecretRef: agentsv1alpha1.SecretKeyRef{Name: "anthropic", Key: "api-key"}}},
				// The model server is also the proxy for anything else: it refuses and records it.
				Env: []agentsv1alpha1.EnvVar{
					{Name: "ANTHROPIC_BASE_URL", Value: ms.URL()},
					{Name: "HTTPS_PROXY", Value: ms.URL()}, {Name: "HTTP_PROXY", Value: ms.URL()},
					{Name: "NO_PROXY", Value: direct}, {Name: "no_proxy", Value: direct},
				},
			},
			Reactions: &agentsv1alpha1.ReactionsSpec{
				ApprovedAndGreen: &agentsv1alpha1.Reaction{Action: agentsv1alpha1.ReactionMerge, MergeMethod: agentsv1alpha1.MergeSquash},
			},
			Notifications: &agentsv1alpha1.NotificationsSpec{Routes: []agentsv1alpha1.NotificationRoute{{
				Name: "team", Priorities: []agentsv1alpha1.Priority{agentsv1alpha1.PriorityUrgent, agentsv1alpha1.PriorityAction, agentsv1alpha1.PriorityWarning},
				Webhook: &agentsv1alpha1.WebhookTarget{URL: agentsv1alpha1.HTTPURL("http://" + l.Addr().String() + "/"), SecretRef: agentsv1alpha1.SecretKeyRef{Name: "notify", Key: "hmac"}},
			}}},
			Cleanup: &agentsv1alpha1.CleanupSpec{WorktreeAfterMerge: agentsv1alpha1.WorktreeRemove},
		},
	}
	Expect(c.client.Create(ctx, project)).To(Succeed())
	Eventually(func() *metav1.Condition {
		_ = c.client.Get(ctx, client.ObjectKeyFromObject(project), project)
		return meta.FindStatusCondition(project.Status.Conditions, agentsv1alpha1.ConditionReady)
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(HaveField("Status", metav1.ConditionTrue))

	By("creating the session for the issue")
	session := &agentsv1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: lifecycleSession},
		Spec:       agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "greeter"}, Issue: strconv.Itoa(issue)},
	}
	Expect(c.client.Create(ctx, session)).To(Succeed())
	phases := &phaseLog{}
	wctx, stopWatch := context.WithCancel(ctx)
	DeferCleanup(stopWatch)
	phases.watch(wctx, c, client.ObjectKeyFromObject(session))
	key := client.ObjectKeyFromObject(session)
	get := func() *agentsv1alpha1.AgentSession {
		s := &agentsv1alpha1.AgentSession{}
		Expect(c.client.Get(ctx, key, s)).To(Succeed())
		return s
	}
	waitPhase := func(want ...agentsv1alpha1.SessionPhase) *agentsv1alpha1.AgentSession {
		GinkgoHelper()
		var s *agentsv1alpha1.AgentSession
		Eventually(func() agentsv1alpha1.SessionPhase {
			s = get()
			if s.Status.Phase == agentsv1alpha1.PhaseErrored {
				logs := ""
				pod := &corev1.Pod{}
				if err := c.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-agent"}, pod); err == nil {
					logs = podLogs(ctx, c, pod)
				}
				StopTrying(fmt.Sprintf("the session Errored: %+v\nphases:\n%s\nagent pod logs:\n%s", s.Status.Conditions, phases, logs)).Now()
			}
			return s.Status.Phase
		}).WithTimeout(5*time.Minute).WithPolling(time.Second).Should(BeElementOf(want), "phases so far:\n%s", phases)
		return s
	}

	By("the agent's first commit becomes a pull request")
	s := waitPhase(agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.PhasePROpen)
	Expect(s.Status.PullRequest).NotTo(BeNil())
	pr := int(s.Status.PullRequest.Number)
	branch := s.Status.Branch
	Expect(branch).To(HavePrefix("shepherd/" + strconv.Itoa(issue) + "-"))
	head1 := s.Status.PullRequest.HeadSHA

	By("CI fails on it; the agent gets the failure and pushes a fix")
	_, err = gh.AddCheckRun(lifecycleRepo, head1, fakegithub.CheckRun{Name: "test", Conclusion: "failure",
		Log: "--- FAIL: TestGreet\n    greet_test.go:9: Greet() = \"hello\", want \"hello, world\"\n"})
	Expect(err).NotTo(HaveOccurred())
	waitPhase(agentsv1alpha1.PhaseCIFailed)

	By("killing the manager while the agent works on the fix")
	killManager(ctx, c)

	head2 := waitNewHead(gh, pr, head1)
	_, err = gh.AddCheckRun(lifecycleRepo, head2, fakegithub.CheckRun{Name: "test", Conclusion: "success"})
	Expect(err).NotTo(HaveOccurred())
	waitPhase(agentsv1alpha1.PhaseReviewPending)

	By("the reviewer requests changes; the agent gets the comments and pushes")
	_, err = gh.AddReviewThread(lifecycleRepo, pr, "reviewer", "greet.go", 1, "Please document Greet.")
	Expect(err).NotTo(HaveOccurred())
	_, err = gh.AddReview(lifecycleRepo, pr, "reviewer", "CHANGES_REQUESTED", "Needs a doc comment.")
	Expect(err).NotTo(HaveOccurred())
	waitPhase(agentsv1alpha1.PhaseChangesRequested)
	head3 := waitNewHead(gh, pr, head2)
	_, err = gh.AddCheckRun(lifecycleRepo, head3, fakegithub.CheckRun{Name: "test", Conclusion: "success"})
	Expect(err).NotTo(HaveOccurred())

	By("approved and green: the Merge reaction merges")
	_, err = gh.AddReview(lifecycleRepo, pr, "reviewer", "APPROVED", "Thanks!")
	Expect(err).NotTo(HaveOccurred())
	s = waitPhase(agentsv1alpha1.PhaseMerged)
	info, err := gh.PullRequest(lifecycleRepo, pr)
	Expect(err).NotTo(HaveOccurred())
	Expect(info.Merged).To(BeTrue())
	fmt.Fprintf(GinkgoWriter, "phases of %s:\n%s", key, phases)
	Expect(phases.seen()).To(ContainElements(agentsv1alpha1.PhaseWorking, agentsv1alpha1.PhaseCIFailed,
		agentsv1alpha1.PhaseChangesRequested, agentsv1alpha1.PhaseMerged), "the lifecycle passed through each stage")

	By("nothing was duplicated: one pull request, one merge, each message once")
	prs := 0
	for n := 1; n <= pr+5; n++ {
		if p, err := gh.PullRequest(lifecycleRepo, n); err == nil && p.HeadRef == branch {
			prs++
		}
	}
	Expect(prs).To(Equal(1), "one pull request for the branch")
	Expect(gh.Stats().ByRoute).To(HaveKeyWithValue("PUT /repos/{o}/{r}/pulls/{x}/merge", 1), "one merge call")
	Expect(s.Status.Messages.Pending).To(BeEmpty())
	Expect(ms.Problems()).To(BeEmpty(), "every model request was scripted; nothing tried to leave")
	var failureTurns, reviewTurns int
	for _, t := range ms.Turns() {
		text := strings.Join(t.UserTexts(), "\n")
		if strings.Contains(text, "TestGreet") {
			failureTurns++
		}
		if strings.Contains(text, "Please document Greet.") {
			reviewTurns++
		}
	}
	Expect(failureTurns).To(BeNumerically(">=", 1), "the CI failure reached the agent")
	Expect(reviewTurns).To(BeNumerically(">=", 1), "the review comment reached the agent")

	By("the pod is gone and the Worktree removed per the Project's policy")
	Eventually(func() error {
		return c.client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: lifecycleSession + "-agent"}, &corev1.Pod{})
	}).WithTimeout(2 * time.Minute).Should(Satisfy(apierrors.IsNotFound))
	wt := &agentsv1alpha1.Worktree{}
	Eventually(func() agentsv1alpha1.WorktreePhase {
		_ = c.client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: lifecycleSession}, wt)
		return wt.Status.Phase
	}).WithTimeout(2 * time.Minute).Should(Equal(agentsv1alpha1.WorktreeRemoved))

	By("the expected events were recorded")
	var events corev1.EventList
	Expect(c.client.List(ctx, &events, client.InNamespace(ns.Name))).To(Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "AgentSession" {
			reasons = append(reasons, e.Reason)
		}
	}
	Expect(reasons).To(ContainElements("PullRequestOpened", "ChecksFailed", "ChangesRequested"))

	By("the webhook notifier received signed notifications, each once")
	Eventually(func() []string { _, types, _ := recv.snapshot(); return types }).WithTimeout(time.Minute).
		Should(ContainElement(string(agentsv1alpha1.EventPRMerged)))
	ids, _, bad := recv.snapshot()
	Expect(bad).To(BeZero())
	for id, n := range ids {
		Expect(n).To(Equal(1), "notification %s delivered once", id)
	}
}

// waitNewHead waits for the pull request's head to move past old (the agent pushed).
func waitNewHead(gh *fakegithub.Server, pr int, old string) string {
	GinkgoHelper()
	var head string
	Eventually(func() string {
		info, err := gh.PullRequest(lifecycleRepo, pr)
		Expect(err).NotTo(HaveOccurred())
		head = info.HeadSHA
		return head
	}).WithTimeout(5*time.Minute).WithPolling(time.Second).ShouldNot(Equal(old), "the agent pushes a new commit")
	return head
}

// killManager deletes the manager pod and waits for its replacement to be Ready.
func killManager(ctx context.Context, c *cluster) {
	GinkgoHelper()
	old := managerPod(ctx, c)
	Expect(c.client.Delete(ctx, old, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(c.client.List(ctx, &pods, client.InNamespace(managerNamespace),
			client.MatchingLabels{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"})).To(Succeed())
		ready := 0
		for _, p := range pods.Items {
			if p.UID != old.UID && p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
				ready++
			}
		}
		g.Expect(ready).To(Equal(1))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
