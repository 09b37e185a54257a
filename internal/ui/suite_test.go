package ui_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	_ "github.com/shepherd-dev/shepherd/internal/adapters"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/ui"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/uienv"
)

// The suite runs the real kube-apiserver with its aggregation layer on (a front-proxy CA and
// client certificate, as kubeadm configures it) and the UI server behind an APIService, so every
// request of the tests takes the path a user's takes: kubectl (or a browser through kubectl
// proxy) → API server (authenticates the user) → UI server (checks the front proxy, asks
// SubjectAccessReviews).
var (
	testEnv   *envtest.Environment
	adm       client.Client
	users     = map[string]*rest.Config{}
	kubeconfs = map[string]string{}
	store     = &transcript.Store{}
	uiAddr    string
	uiCA      []byte
	stopUI    context.CancelFunc
	// gh is the fake GitHub whose issues the Project "widgets" of team-a tracks; issues lists
	// them for the UI's issues endpoint.
	gh     *fakegithub.Server
	issues = &trackerIssues{}
)

// ghRepo is the repository of team-a's Project "widgets" on the fake GitHub.
const ghRepo = "acme/widgets"

// trackerIssues lists issues with the real GitHub tracker adapter against the fake GitHub. The
// manager's lister (internal/controller) does the same with the Project's credentials; its
// envtest shows that part.
type trackerIssues struct {
	tr    tracker.Tracker
	calls atomic.Int32
}

func (t *trackerIssues) ProjectIssues(ctx context.Context, p *agentsv1alpha1.Project, labels []string, limit int) ([]tracker.Issue, error) {
	if p.Spec.Tracker == nil {
		return nil, ui.ErrNoTracker
	}
	t.calls.Add(1)
	return t.tr.ListIssues(ctx, tracker.ListOptions{Labels: labels, Limit: limit})
}

func TestUI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "UI suite")
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through `make test`, which builds the envtest assets")
	dir := GinkgoT().TempDir()
	testEnv = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	Expect(uienv.Configure(testEnv, dir)).To(Succeed())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	Expect(agentsv1alpha1.AddToScheme(scheme.Scheme)).To(Succeed())
	adm, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	for u, groups := range map[string][]string{"alice": nil, "bob": nil, "viewer": nil} {
		user, err := testEnv.AddUser(envtest.User{Name: u, Groups: append(groups, "system:authenticated")}, nil)
		Expect(err).NotTo(HaveOccurred())
		users[u] = user.Config()
		kc, err := user.KubeConfig()
		Expect(err).NotTo(HaveOccurred())
		kubeconfs[u] = filepath.Join(dir, u+".kubeconfig")
		Expect(os.WriteFile(kubeconfs[u], kc, 0o600)).To(Succeed())
	}

	By("a fake GitHub with labelled issues, read by the real GitHub tracker adapter")
	gh, err = fakegithub.New(fakegithub.Options{Dir: filepath.Join(dir, "github")})
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.Start("127.0.0.1:0")).To(Succeed())
	DeferCleanup(func() { _ = gh.Close() })
	_, err = gh.CreateRepo(ghRepo, "main", map[string]string{"README.md": "# widgets\n"})
	Expect(err).NotTo(HaveOccurred())
	gh.AddToken("gh-token", "shepherd-bot")
	issues.tr, err = tracker.New(tracker.Config{Provider: "github", APIURL: gh.URL(), Token: []byte("gh-token"), Repo: scm.Repo{Owner: "acme", Name: "widgets"}})
	Expect(err).NotTo(HaveOccurred())

	// The UI server, as the manager runs it, registered with the API server.
	ctx, cancel := context.WithCancel(context.Background())
	stopUI = cancel
	delegated, err := ui.NewDelegated(ctx, cfg)
	Expect(err).NotTo(HaveOccurred())
	go delegated.Run(ctx)
	dyn, err := dynamic.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	kube, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	srv, err := ui.NewServer(ui.Options{Sessions: adm, Transcripts: store, Authenticator: delegated.Authenticator, Authorizer: delegated.Authorizer,
		Steer: &kubectlplugin.Steerer{Dynamic: dyn, Kube: kube}, Issues: issues, CSRFKey: []byte("0123456789abcdef0123456789abcdef"), Log: logr.Discard()})
	Expect(err).NotTo(HaveOccurred())
	served, err := uienv.Serve(ctx, adm, srv)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(served.Close)
	uiAddr, uiCA = served.Addr, served.CA
	fixtures()
})

var _ = AfterSuite(func() {
	if stopUI != nil {
		stopUI()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// shippedRoles creates the ClusterRoles config/rbac ships for users (their names as the
// release prefixes them) and the board's binding to every authenticated user.
func shippedRoles() {
	ctx := context.Background()
	for _, f := range []string{"shepherd_viewer_role.yaml", "shepherd_editor_role.yaml", "budget_admin_role.yaml", "ui_dashboard_role.yaml"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot(), "config", "rbac", f))
		Expect(err).NotTo(HaveOccurred())
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
			u.SetName("shepherd-" + u.GetName())
			if ref, ok, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ok {
				Expect(unstructured.SetNestedField(u.Object, "shepherd-"+ref, "roleRef", "name")).To(Succeed())
			}
			Expect(adm.Create(ctx, u)).To(Succeed())
		}
	}
}

// bind grants user the shipped ClusterRole in ns, as `kubectl create rolebinding` would.
func bind(ns, user, clusterRole string) {
	Expect(adm.Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRole + "-" + user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user, APIGroup: "rbac.authorization.k8s.io"}}})).To(Succeed())
}

func fixtures() {
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		Expect(adm.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	shippedRoles()
	bind("team-a", "alice", "shepherd-editor-role")
	bind("team-b", "bob", "shepherd-editor-role")
	bind("team-a", "viewer", "shepherd-viewer-role")
	// carol is team-a's admin: "admin" aggregates the editor's and the budget admin's rules.
	bind("team-a", "carol", "shepherd-editor-role")
	bind("team-a", "carol", "shepherd-budget-admin-role")
	// team-a's Projects: widgets tracks the fake GitHub's issues, plain tracks none.
	for name, tr := range map[string]*agentsv1alpha1.TrackerSpec{"widgets": {Provider: agentsv1alpha1.TrackerGitHub}, "plain": nil} {
		Expect(adm.Create(ctx, &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
			Spec: agentsv1alpha1.ProjectSpec{Repository: agentsv1alpha1.RepositorySpec{URL: "https://github.com/acme/widgets.git"},
				Agent: agentsv1alpha1.AgentSpec{Type: agentsv1alpha1.AgentClaudeCode}, Tracker: tr}})).To(Succeed())
	}
	for _, is := range []fakegithub.Issue{
		{Title: "Fix the login form", Labels: []string{"agent", "bug"}},
		{Title: "Only a bug", Labels: []string{"bug"}},
		{Title: "Document the API\nwith examples", Labels: []string{"agent", "docs"}},
	} {
		_, err := gh.CreateIssue(ghRepo, is)
		Expect(err).NotTo(HaveOccurred())
	}
	for _, s := range []struct{ ns, name string }{{"team-a", "widgets-42"}, {"team-b", "gadgets-7"}} {
		sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns},
			Spec: agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "widgets"}, Issue: "42"}}
		Expect(adm.Create(ctx, sess)).To(Succeed())
		sess.Status = agentsv1alpha1.AgentSessionStatus{Phase: agentsv1alpha1.PhaseNeedsInput,
			Agent:    agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode},
			Activity: &agentsv1alpha1.ActivityStatus{State: agentsv1alpha1.ActivityWaitingForInput, Question: "Which database should " + s.name + " use?"}}
		Expect(adm.Status().Update(ctx, sess)).To(Succeed())
		now := time.Now().UTC()
		store.Append(client.ObjectKeyFromObject(sess), sess.UID, []transcript.Entry{
			{Seq: 1, Time: now, Turn: 1, Kind: transcript.KindTurnStarted, Text: "Fix issue 42 of " + s.name},
			{Seq: 2, Time: now, Turn: 1, Kind: transcript.KindToolCall, Tool: "Bash", Text: `{"command":"go test ./..."}`},
			{Seq: 3, Time: now, Turn: 1, Kind: transcript.KindToolResult, Tool: "Bash", Text: "ok  widgets 0.1s"},
			{Seq: 4, Time: now, Turn: 1, Kind: transcript.KindQuestion, Text: "Which database should " + s.name + " use?"},
		})
	}
}

func uiPath(ns, name string) string { return kubectlplugin.TranscriptPath(ns, name) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
