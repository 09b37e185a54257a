package ui_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	"github.com/shepherd-dev/shepherd/internal/runnertls"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/ui"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
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

// hostIP is an address of this machine that is not loopback: the API server refuses Endpoints
// on loopback, and the aggregator routes to the endpoint (--enable-aggregator-routing).
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	Expect(err).NotTo(HaveOccurred())
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	Fail("this machine has no IPv4 address besides loopback: the API server's aggregator cannot reach a local server")
	return ""
}

// frontProxy makes the front-proxy CA and the API server's client certificate, as files.
func frontProxy(dir string) (caFile, certFile, keyFile string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	ca, err := x509.ParseCertificate(caDER)
	Expect(err).NotTo(HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-client"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		Expect(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600)).To(Succeed())
		return p
	}
	return write("front-ca.crt", "CERTIFICATE", caDER), write("front.crt", "CERTIFICATE", der), write("front.key", "EC PRIVATE KEY", keyDER)
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through `make test`, which builds the envtest assets")
	dir := GinkgoT().TempDir()
	caFile, certFile, keyFile := frontProxy(dir)
	testEnv = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	args := testEnv.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", caFile)
	args.Set("requestheader-allowed-names", "front-proxy-client")
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", certFile)
	args.Set("proxy-client-key-file", keyFile)
	args.Set("enable-aggregator-routing", "true")
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

	// The UI server, as the manager runs it: its certificate from the manager's own CA.
	ip := hostIP()
	bundle, _, err := runnertls.Ensure(runnertls.Bundle{}, []string{"shepherd-api.shepherd-system.svc", ip}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	uiCA = bundle.CACert
	certs := &runnertls.Certificates{}
	Expect(certs.Set(bundle)).To(Succeed())
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
	tlsCfg := certs.ServerConfig().Clone()
	tlsCfg.ClientAuth = tls.RequestClientCert
	l, err := tls.Listen("tcp", net.JoinHostPort(ip, "0"), tlsCfg)
	Expect(err).NotTo(HaveOccurred())
	uiAddr = l.Addr().String()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	DeferCleanup(func() { _ = hs.Close() })
	_, port, _ := net.SplitHostPort(uiAddr)
	portN, _ := strconv.Atoi(port)
	register(ip, int32(portN), bundle.CACert)
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

// register makes the APIService, its Service and the endpoint at ip:port, and waits until the
// API server finds the UI server available.
func register(ip string, port int32, caBundle []byte) {
	ctx := context.Background()
	Expect(adm.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-system"}})).To(Succeed())
	Expect(adm.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-api", Namespace: "shepherd-system"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}}}})).To(Succeed())
	Expect(adm.Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-api", Namespace: "shepherd-system"}, //nolint:staticcheck // the aggregator may still read Endpoints
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: ip}}, Ports: []corev1.EndpointPort{{Name: "https", Port: port}}}}})).To(Succeed()) //nolint:staticcheck
	ready, name := true, "https"
	Expect(adm.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-api-1", Namespace: "shepherd-system",
		Labels: map[string]string{discoveryv1.LabelServiceName: "shepherd-api"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}}})).To(Succeed())
	// The APIService as config/ui ships it (the manager writes its caBundle; here the test does).
	apisvc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": ui.APIServiceName},
		"spec": map[string]any{"group": ui.Group, "version": ui.Version, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": "shepherd-system", "name": "shepherd-api", "port": int64(443)}, "caBundle": caBundle}}}
	Expect(adm.Create(ctx, apisvc)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(adm.Get(ctx, client.ObjectKeyFromObject(apisvc), apisvc)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(apisvc.Object, "status", "conditions")
		g.Expect(conds).To(ContainElement(And(HaveKeyWithValue("type", "Available"), HaveKeyWithValue("status", "True"))), "%v", conds)
	}).WithTimeout(time.Minute).Should(Succeed())
}

// shippedRoles creates the ClusterRoles config/rbac ships for users (their names as the
// release prefixes them) and the board's binding to every authenticated user.
func shippedRoles() {
	ctx := context.Background()
	for _, f := range []string{"shepherd_viewer_role.yaml", "shepherd_editor_role.yaml", "ui_dashboard_role.yaml"} {
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
