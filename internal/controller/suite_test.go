package controller_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"

	// The forge and tracker adapters, as the manager registers them.
	_ "github.com/shepherd-dev/shepherd/internal/adapters"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/netguard"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/restmapcache"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// The suite runs the whole manager (the three reconcilers, the runner channel, the webhook
// receiver, the forge hub and the notifier) against a real kube-apiserver, with the in-repo fake
// GitHub as the forge. There is no kubelet: tests play it by writing pod status, and play the
// runner through the real channel with real pod-bound tokens.

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	clientset *kubernetes.Clientset
	gh        *fakegithub.Server
	mgr       *managerUnderTest
	// stopWatching ends the GitOps state recorder's watches (gitops_test.go).
	stopWatching context.CancelFunc

	webhookSecret = []byte("webhook-secret")
	ghToken       = "ghp_shepherdtest"
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers suite")
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	// Every wait in the suite is on observable state; these bound it.
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	Expect(agentsv1alpha1.AddToScheme(clientgoscheme.Scheme)).To(Succeed())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest: run through `make test`, which builds the assets and sets KUBEBUILDER_ASSETS")
	k8sClient, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())

	webhookAddr := freeAddr()
	// The fake forge has one webhook URL for every repository; the relay stands for the hook each
	// Project registered at its own path (forgehooks_test.go).
	relay := httptest.NewServer(&forgeHooks{receiver: "http://" + webhookAddr})
	DeferCleanup(relay.Close)
	gh, err = fakegithub.New(fakegithub.Options{
		Dir:           GinkgoT().TempDir(),
		WebhookURL:    relay.URL + "/",
		WebhookSecret: webhookSecret,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(gh.Start("127.0.0.1:0")).To(Succeed())
	gh.AddToken(ghToken, "shepherd-bot")
	gh.AddToken("ghp_reviewer", "reviewer")

	mgr = &managerUnderTest{runnerAddr: freeAddr(), webhookAddr: webhookAddr}
	mgr.start()

	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	var watchCtx context.Context
	watchCtx, stopWatching = context.WithCancel(context.Background())
	gitopsStates.watchStates(watchCtx, wc)
})

// specFailed is set once a spec fails.
var specFailed atomic.Bool

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		specFailed.Store(true)
	}
})

var _ = AfterSuite(func() {
	suite, _ := GinkgoConfiguration()
	if stopWatching != nil {
		stopWatching() // before the API server stops: an open watch holds its shutdown
	}
	// Every row must have been seen only when every spec ran and passed: a failed spec stops
	// before the states it would have reached, and its own failure is the one to read.
	gitopsStates.checkVerdicts(len(suite.FocusStrings) == 0 && len(suite.SkipStrings) == 0 && suite.LabelFilter == "" && !specFailed.Load())
	if mgr != nil {
		mgr.stop()
	}
	if gh != nil {
		_ = gh.Close()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// managerUnderTest is the manager, restartable: tests stop it in the middle of a lifecycle to
// show that nothing is lost or repeated.
type managerUnderTest struct {
	runnerAddr, webhookAddr string
	// name, when set, is the field manager of the manager's writes (managedFields show who wrote).
	name string
	// leaseNamespace, when set, runs the manager under leader election with a Lease there;
	// leaseName names it (default shepherd-test).
	leaseNamespace string
	leaseName      string
	// tlsNamespace, when set, serves the runner channel over TLS with the manager's own CA, kept
	// in that namespace (the manager's own, in a cluster).
	tlsNamespace string
	// identity, when set, is the user the manager acts as (impersonated): a ServiceAccount with
	// only the RBAC an install gives it.
	identity *rest.ImpersonationConfig
	// namespaces, when set, are the only namespaces the manager watches (--watch-namespaces).
	namespaces []string
	cancel     context.CancelFunc
	done       chan struct{}
	deps       *controller.Deps
	// elected is closed once the manager leads (at once without leader election).
	elected <-chan struct{}
	// actionHook, when set, is called around every action (crashpoints_test.go).
	actionHook atomic.Pointer[controller.ActionHook]
}

// hook calls the action hook in effect, if any.
func (m *managerUnderTest) hook(ctx context.Context, p controller.ActionPoint, key types.NamespacedName, a lifecycle.Action) error {
	if h := m.actionHook.Load(); h != nil {
		return (*h)(ctx, p, key, a)
	}
	return nil
}

func (m *managerUnderTest) start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	opts := ctrl.Options{
		Scheme:                 clientgoscheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlConfig(),
		NewClient:              newCountingClient,
		// The manager's mapper (cmd/manager): the suite's reads go through it.
		MapperProvider: restmapcache.Provider,
	}
	if m.name != "" {
		opts.Client = client.Options{FieldOwner: m.name}
	}
	restCfg := cfg
	if m.identity != nil {
		restCfg = rest.CopyConfig(cfg)
		restCfg.Impersonate = *m.identity
	}
	if len(m.namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range m.namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if m.leaseNamespace != "" {
		// A short lease, released on stop, so that a standby takes over within a second or two.
		lease, renew, retry := 4*time.Second, 3*time.Second, 200*time.Millisecond
		opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = true, m.lease().Name, m.leaseNamespace
		opts.LeaderElectionReleaseOnCancel = true
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &lease, &renew, &retry
		labels, err := controller.LeaderLabels("127.0.0.1", portOf(m.runnerAddr), portOf(m.webhookAddr))
		Expect(err).NotTo(HaveOccurred())
		opts.LeaderElectionLabels = labels
	}
	k8sMgr, err := ctrl.NewManager(restCfg, opts)
	Expect(err).NotTo(HaveOccurred())
	m.elected = k8sMgr.Elected()
	policy := notify.DefaultPolicy
	policy.InitialBackoff, policy.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	scheme, tlsNames := "http://", []string(nil)
	if m.tlsNamespace != "" {
		scheme, tlsNames = "https://", []string{"127.0.0.1"}
	}
	m.deps, err = controller.Setup(ctx, k8sMgr, controller.Config{
		Options: controller.Options{
			RunnerImage:         "shepherd-runner:test",
			AgentImages:         map[agentsv1alpha1.AgentType]string{agentsv1alpha1.AgentClaudeCode: "shepherd-agent-claude-code:test"},
			RunnerURL:           scheme + m.runnerAddr,
			AccessCheckInterval: time.Minute,
			ManagerNamespace:    m.tlsNamespace,
			// As the manager runs: the fakes serve on loopback, which the suite's manager may call
			// as --outbound-allow-cidrs=127.0.0.0/8 lets it; the rest of the guard holds.
			Outbound: &netguard.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				Deny: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}},
		},
		RunnerBindAddress:  m.runnerAddr,
		RunnerTLSNames:     tlsNames,
		WebhookBindAddress: m.webhookAddr,
		PollerOptions:      scm.PollerOptions{MaxAge: 2 * time.Second, HintDelay: 50 * time.Millisecond, HintInterval: 100 * time.Millisecond},
		NotifyPolicy:       &policy,
		ActionHook:         m.hook,
		LeaderLease:        m.lease(),
	})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		defer close(m.done)
		Expect(k8sMgr.Start(ctx)).To(Succeed())
	}()
	if m.runnerAddr == "0" {
		return
	}
	// The runner channel listens once the manager runs.
	Eventually(func() error {
		c, err := net.Dial("tcp", m.runnerAddr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}).WithTimeout(20 * time.Second).Should(Succeed())
}

// lease is the leader-election Lease of a manager under leader election.
func (m *managerUnderTest) lease() types.NamespacedName {
	if m.leaseNamespace == "" {
		return types.NamespacedName{}
	}
	name := m.leaseName
	if name == "" {
		name = "shepherd-test"
	}
	return types.NamespacedName{Namespace: m.leaseNamespace, Name: name}
}

// portOf is the port of a host:port address (0 for "0").
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

func (m *managerUnderTest) stop() {
	m.cancel()
	Eventually(m.done).WithTimeout(30 * time.Second).Should(BeClosed())
}

// newNamespace makes a namespace for one test.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// newRepo makes a repository on the fake GitHub, with a token Secret in ns.
func newRepo(ns string) (full string) {
	full = fmt.Sprintf("acme/%s", ns)
	_, err := gh.CreateRepo(full, "main", map[string]string{"README.md": "# widgets\n", "main.go": "package main\n"})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"},
		StringData: map[string]string{"token": ghToken, "webhook": string(webhookSecret)},
	})).To(Succeed())
	return full
}
