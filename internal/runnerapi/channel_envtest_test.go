package runnerapi_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
	"github.com/shepherd-dev/shepherd/test/gitserver"
)

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
	clientset *kubernetes.Clientset
)

func TestChannel(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "runnerapi channel against a real kube-apiserver")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"set KUBEBUILDER_ASSETS=$(hack/kube-binaries.sh envtest) to run the channel tests against a real kube-apiserver")
	testEnv = &envtest.Environment{}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

var serviceAccount = runnerapi.DefaultPodNames.ServiceAccount("widgets")

type channel struct {
	ns      string
	backend *runnerapitest.MemoryBackend
	handler *runnerapi.Handler
	server  *httptest.Server
	clock   *clocktesting.FakeClock
	dir     string
}

func newChannel(ctx context.Context) *channel {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "runnerapi-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: serviceAccount}})).To(Succeed())
	c := &channel{ns: ns.Name, backend: runnerapitest.NewMemoryBackend(), clock: clocktesting.NewFakeClock(time.Now()), dir: GinkgoT().TempDir()}
	var err error
	c.handler, err = runnerapi.NewHandler(runnerapi.HandlerOptions{
		Backend: c.backend, Reviewer: runnerapi.NewTokenReviewer(k8sClient), Pods: k8sClient,
		Clock: c.clock, CacheTTL: time.Hour, PollInterval: 50 * time.Millisecond,
	})
	Expect(err).NotTo(HaveOccurred())
	c.backend.OnMessage = c.handler.Wake
	c.server = httptest.NewServer(c.handler)
	DeferCleanup(c.server.Close)
	return c
}

func (c *channel) session(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: c.ns, Name: name}
}

// pod creates the agent pod of session, as the controllers make it: named after the session,
// labelled, running as the Project's agent service account, and controlled by the session. It
// stays Pending: envtest has no scheduler, which the channel does not need.
func (c *channel) pod(ctx context.Context, session string) *corev1.Pod {
	p := c.podObject(runnerapi.DefaultPodNames.AgentPod(session), map[string]string{agentsv1alpha1.LabelSession: session},
		&metav1.OwnerReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentSession", Name: session, UID: types.UID("uid-of-" + session), Controller: ptr.To(true)})
	c.backend.SetTask(c.session(session), runnerapi.Task{Prompt: "task of " + session, Branch: "shepherd/" + session, BaseBranch: "main",
		Agent: runnerapi.AgentConfig{Type: agentsv1alpha1.AgentClaudeCode}})
	Expect(k8sClient.Create(ctx, p)).To(Succeed())
	return p
}

// podObject is a pod with Shepherd's managed-by and project labels plus labels, and owner.
func (c *channel) podObject(name string, labels map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name, Labels: map[string]string{
			agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue, agentsv1alpha1.LabelProject: "widgets"}},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/agent:1"}}},
	}
	for k, v := range labels {
		p.Labels[k] = v
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// token asks the API server for a real token, bound to pod when it is not nil.
func (c *channel) token(ctx context.Context, pod *corev1.Pod, audiences ...string) string {
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := clientset.CoreV1().ServiceAccounts(c.ns).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

func (c *channel) client(token string) *runnerapi.Client {
	f := filepath.Join(c.dir, "token-"+strings.ReplaceAll(time.Now().Format(time.RFC3339Nano), ":", ""))
	Expect(os.WriteFile(f, []byte(token), 0o600)).To(Succeed())
	cl, err := runnerapi.NewClient(c.server.URL, f, "")
	Expect(err).NotTo(HaveOccurred())
	return cl
}

func expectStatus(err error, code int, substr string) {
	GinkgoHelper()
	var ae *runnerapi.APIError
	Expect(errors.As(err, &ae)).To(BeTrue(), "want a *runnerapi.APIError, got %v", err)
	Expect(ae.Status).To(Equal(code), ae.Message)
	Expect(ae.Message).To(ContainSubstring(substr))
}

var _ = Describe("The runner channel", func() {
	var (
		ctx context.Context
		ch  *channel
	)
	BeforeEach(func() {
		ctx = context.Background()
		ch = newChannel(ctx)
	})

	It("maps a pod-bound token to its own session and nothing else", func() {
		podA, podB := ch.pod(ctx, "session-a"), ch.pod(ctx, "session-b")
		a, b := ch.client(ch.token(ctx, podA, runnerapi.Audience)), ch.client(ch.token(ctx, podB, runnerapi.Audience))

		task, err := a.Task(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(task.Branch).To(Equal("shepherd/session-a"))
		task, err = b.Task(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(task.Branch).To(Equal("shepherd/session-b"))

		Expect(a.Report(ctx, runnerapi.Report{Sequence: 1, Activity: &runnerapi.ActivityReport{State: agentsv1alpha1.ActivityActive}})).To(Succeed())
		Expect(ch.backend.Reports(ch.session("session-a"))).To(HaveLen(1))
		Expect(ch.backend.Reports(ch.session("session-b"))).To(BeEmpty())

		// B's pull request request is checked against B's own branch.
		_, err = b.OpenPullRequest(ctx, runnerapi.PullRequestRequest{Branch: "shepherd/session-a", Base: "main", Head: "abc1234", Title: "t"})
		expectStatus(err, http.StatusForbidden, "not the session's branch")
	})

	It("refuses a token for another audience", func() {
		pod := ch.pod(ctx, "session-a")
		_, err := ch.client(ch.token(ctx, pod, "https://kubernetes.default.svc")).Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "")
		_, err = ch.client(ch.token(ctx, pod)).Task(ctx) // the API server's default audience
		expectStatus(err, http.StatusUnauthorized, "")
	})

	It("refuses a token bound to a pod that is not an agent pod, and one bound to no pod", func() {
		other := ch.podObject("not-an-agent", nil, nil)
		Expect(k8sClient.Create(ctx, other)).To(Succeed())
		_, err := ch.client(ch.token(ctx, other, runnerapi.Audience)).Task(ctx)
		expectStatus(err, http.StatusForbidden, "no controller owner reference")
		_, err = ch.client(ch.token(ctx, nil, runnerapi.Audience)).Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "not bound to a pod")
	})

	It("serves a pod only when it is the session's own: owner reference, name, labels and service account", func() {
		owner := func(kind, name string) *metav1.OwnerReference {
			return &metav1.OwnerReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: kind, Name: name, UID: "uid", Controller: ptr.To(true)}
		}
		session := map[string]string{agentsv1alpha1.LabelSession: "victim"}
		for _, tc := range []struct {
			name string
			pod  *corev1.Pod
			want string
		}{
			// Anyone who may create pods in the namespace can put the label on one.
			{"the session's label and nothing else", ch.podObject("victim-agent", session, nil), "no controller owner reference"},
			{"owned by something else", ch.podObject("victim-agent", session,
				&metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "victim", UID: "uid", Controller: ptr.To(true)}), "not Shepherd's"},
			{"owned by another session than its label says", ch.podObject("victim-agent", session, owner("AgentSession", "attacker")), "do not match"},
			{"a name the controller would not give it", ch.podObject("lookalike", session, owner("AgentSession", "victim")), "do not match"},
			{"no managed-by label", func() *corev1.Pod {
				p := ch.podObject("victim-agent", session, owner("AgentSession", "victim"))
				delete(p.Labels, agentsv1alpha1.LabelManagedBy)
				return p
			}(), "managed-by"},
		} {
			By(tc.name)
			Expect(k8sClient.Create(ctx, tc.pod)).To(Succeed())
			_, err := ch.client(ch.token(ctx, tc.pod, runnerapi.Audience)).Task(ctx)
			expectStatus(err, http.StatusForbidden, tc.want)
			Expect(k8sClient.Delete(ctx, tc.pod, client.GracePeriodSeconds(0))).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tc.pod), &corev1.Pod{}))
			}).Should(BeTrue())
		}

		By("another service account")
		Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ch.ns, Name: "other"}})).To(Succeed())
		p := ch.podObject("victim-agent", session, owner("AgentSession", "victim"))
		p.Spec.ServiceAccountName = "other"
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}
		tr, err := clientset.CoreV1().ServiceAccounts(ch.ns).CreateToken(ctx, "other", req, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = ch.client(tr.Status.Token).Task(ctx)
		expectStatus(err, http.StatusForbidden, "service account")

		By("a checkout pod (its Worktree's) may use git only")
		wtPod := ch.podObject(runnerapi.DefaultPodNames.CheckoutPod("feature"), map[string]string{agentsv1alpha1.LabelWorktree: "feature"}, owner("Worktree", "feature"))
		Expect(k8sClient.Create(ctx, wtPod)).To(Succeed())
		_, err = ch.client(ch.token(ctx, wtPod, runnerapi.Audience)).Task(ctx)
		expectStatus(err, http.StatusForbidden, "may only use git")
	})

	It("refuses a token whose pod was deleted, or replaced by a pod of the same name", func() {
		pod := ch.pod(ctx, "session-a")
		cl := ch.client(ch.token(ctx, pod, runnerapi.Audience))
		_, err := cl.Task(ctx)
		Expect(err).NotTo(HaveOccurred())

		Expect(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}) }).Should(Satisfy(func(err error) bool {
			return client.IgnoreNotFound(err) == nil && err != nil
		}))
		// The cached review is still fresh; the pod check refuses it.
		_, err = cl.Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "no longer exists")

		// Uncached here, the API server itself refuses the token of the deleted pod once its own
		// token cache (10s for successes) lets go of it.
		tokenBytes, err := os.ReadFile(cl.TokenFile)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			fresh := &runnerapi.Authenticator{Reviewer: runnerapi.NewTokenReviewer(k8sClient), Audience: runnerapi.Audience, TTL: time.Minute, Clock: ch.clock}
			_, err := fresh.Authenticate(ctx, string(tokenBytes))
			return err
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(MatchError(runnerapi.ErrUnauthenticated))

		// A new pod with the same name does not inherit the old pod's tokens.
		ch.pod(ctx, "session-a")
		_, err = cl.Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "earlier pod of the same name")
	})

	It("asks the API server before refusing a pod its cache has not seen yet", func() {
		pod := ch.pod(ctx, "session-new")
		token := ch.token(ctx, pod, runnerapi.Audience)
		// A handler whose cache lags: it has not seen the pod (nor any pod).
		lagging, err := runnerapi.NewHandler(runnerapi.HandlerOptions{
			Backend: ch.backend, Reviewer: runnerapi.NewTokenReviewer(k8sClient), Pods: emptyReader{}, LivePods: k8sClient,
			Clock: ch.clock, CacheTTL: time.Hour, PollInterval: 50 * time.Millisecond,
		})
		Expect(err).NotTo(HaveOccurred())
		srv := httptest.NewServer(lagging)
		DeferCleanup(srv.Close)
		cl := ch.client(token)
		cl.BaseURL = srv.URL
		task, err := cl.Task(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(task.Prompt).To(Equal("task of session-new"))

		By("without the live reader, the lagging cache refuses it")
		blind, err := runnerapi.NewHandler(runnerapi.HandlerOptions{
			Backend: ch.backend, Reviewer: runnerapi.NewTokenReviewer(k8sClient), Pods: emptyReader{},
			Clock: ch.clock, CacheTTL: time.Hour, PollInterval: 50 * time.Millisecond,
		})
		Expect(err).NotTo(HaveOccurred())
		srv2 := httptest.NewServer(blind)
		DeferCleanup(srv2.Close)
		cl.BaseURL = srv2.URL
		_, err = cl.Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "no longer exists")
	})

	It("stops honouring a cached token once it expires", func() {
		pod := ch.pod(ctx, "session-a")
		cl := ch.client(ch.token(ctx, pod, runnerapi.Audience))
		_, err := cl.Task(ctx)
		Expect(err).NotTo(HaveOccurred())
		ch.clock.Step(11 * time.Minute) // the token was issued for 10 minutes
		_, err = cl.Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "token expired")
	})

	It("refuses requests without a valid bearer token", func() {
		resp, err := http.Get(ch.server.URL + runnerapi.PathTask)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
		_, err = ch.client("not-a-token").Task(ctx)
		expectStatus(err, http.StatusUnauthorized, "")
	})

	It("refuses replayed and malformed reports without changing anything", func() {
		pod := ch.pod(ctx, "session-a")
		token := ch.token(ctx, pod, runnerapi.Audience)
		cl := ch.client(token)
		rep := runnerapi.Report{Sequence: 5, Activity: &runnerapi.ActivityReport{State: agentsv1alpha1.ActivityReady}}
		Expect(cl.Report(ctx, rep)).To(Succeed())
		err := cl.Report(ctx, rep)
		expectStatus(err, http.StatusConflict, "replayed or out of order")
		var ae *runnerapi.APIError
		Expect(errors.As(err, &ae)).To(BeTrue())
		Expect(ae.LastSequence).To(Equal(uint64(5)))
		rep.Sequence = 4
		expectStatus(cl.Report(ctx, rep), http.StatusConflict, "")
		expectStatus(cl.Report(ctx, runnerapi.Report{}), http.StatusBadRequest, "sequence must be positive")
		expectStatus(cl.Report(ctx, runnerapi.Report{Sequence: 9, Activity: &runnerapi.ActivityReport{State: "Dancing"}}), http.StatusBadRequest, "unknown activity state")
		expectStatus(cl.Report(ctx, runnerapi.Report{Sequence: 9, Usage: &runnerapi.Usage{CostUSD: "1e9"}}), http.StatusBadRequest, "not a decimal")
		for _, body := range []string{`{"sequence":9,"bogus":1}`, `{"sequence":`, `{"sequence":9}{}`} {
			req, _ := http.NewRequest(http.MethodPost, ch.server.URL+runnerapi.PathReports, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), body)
		}
		req, _ := http.NewRequest(http.MethodPost, ch.server.URL+runnerapi.PathReports, strings.NewReader(`{"sequence":9}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusUnsupportedMediaType))
		Expect(ch.backend.Reports(ch.session("session-a"))).To(HaveLen(1), "nothing but the first report changed anything")

		task, err := cl.Task(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(task.LastSequence).To(Equal(uint64(5)), "a restarted runner learns where to continue")
	})

	It("long-polls messages and acknowledges each once", func() {
		pod := ch.pod(ctx, "session-a")
		cl := ch.client(ch.token(ctx, pod, runnerapi.Audience))
		msgs, err := cl.Pending(ctx, 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(msgs).To(BeEmpty())

		got := make(chan []runnerapi.Message, 1)
		go func() {
			defer GinkgoRecover()
			m, err := cl.Pending(ctx, 30*time.Second)
			Expect(err).NotTo(HaveOccurred())
			got <- m
		}()
		ch.backend.AddMessage(ch.session("session-a"), runnerapi.Message{ID: "m-1", Text: "also handle \"quotes\" and $(subshells)\nüñí 🚀"})
		Eventually(got).Should(Receive(ConsistOf(runnerapi.Message{ID: "m-1", Text: "also handle \"quotes\" and $(subshells)\nüñí 🚀"})))

		Expect(cl.Ack(ctx, "m-1")).To(Succeed())
		expectStatus(cl.Ack(ctx, "m-1"), http.StatusConflict, "already acknowledged")
		expectStatus(cl.Ack(ctx, "m-404"), http.StatusNotFound, "")
		expectStatus(cl.Ack(ctx, "Bad_ID"), http.StatusBadRequest, "not valid")
		Expect(ch.backend.Acked(ch.session("session-a"))).To(Equal([]string{"m-1"}))
	})

	It("forwards git to the session's repository with credentials the pod never sees, pushes to its branch only", func() {
		srv, err := gitserver.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		head, err := srv.Seed("acme/widgets", "main", map[string]string{"README.md": "# widgets\n"})
		Expect(err).NotTo(HaveOccurred())
		srv.Username, srv.Password = "x-access-token", "forge-secret"
		Expect(srv.Start("127.0.0.1:0")).To(Succeed())
		DeferCleanup(srv.Close)
		ch.backend.SetGitRemote(srv.URL("acme/widgets"), http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:forge-secret"))}})

		pod := ch.pod(ctx, "session-a")
		token := ch.token(ctx, pod, runnerapi.Audience)
		work := filepath.Join(GinkgoT().TempDir(), "w")
		git := func(dir string, args ...string) (string, error) {
			cmd := exec.Command("git", append([]string{"-c", "credential.helper=", "-c", "http.extraHeader=Authorization: Bearer " + token}, args...)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), append(gitserver.CommitterEnv(), "GIT_TERMINAL_PROMPT=0")...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := git("", "clone", ch.server.URL+runnerapi.PathGit+"/acme/widgets.git", work)
		Expect(err).NotTo(HaveOccurred(), out)
		_, err = git(work, "checkout", "-b", "shepherd/session-a")
		Expect(err).NotTo(HaveOccurred())
		_, err = git(work, "commit", "--allow-empty", "-m", "work")
		Expect(err).NotTo(HaveOccurred())
		out, err = git(work, "push", "origin", "shepherd/session-a")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(srv.Ref("acme/widgets", "refs/heads/shepherd/session-a")).NotTo(BeEmpty())
		out, err = git(work, "push", "origin", "HEAD:refs/heads/main")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("only refs/heads/shepherd/session-a may be pushed"))
		Expect(srv.Ref("acme/widgets", "refs/heads/main")).To(Equal(head))

		By("without a token there is no git at all")
		cmd := exec.Command("git", "-c", "credential.helper=", "ls-remote", ch.server.URL+runnerapi.PathGit+"/acme/widgets.git")
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
		out2, err := cmd.CombinedOutput()
		Expect(err).To(HaveOccurred(), string(out2))
	})
})

// emptyReader is a cache that has seen nothing yet.
type emptyReader struct{}

func (emptyReader) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (emptyReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }
