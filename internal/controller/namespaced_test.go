package controller_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
)

// The ServiceAccounts config/default and config/namespaced run the manager and the egress proxy
// as (the kustomize name prefix applied), as the API server names them.
var (
	managerIdentity = &rest.ImpersonationConfig{
		UserName: "system:serviceaccount:shepherd-system:shepherd-manager",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:shepherd-system", "system:authenticated"},
	}
	egressIdentity = &rest.ImpersonationConfig{
		UserName: "system:serviceaccount:shepherd-system:shepherd-egress-proxy",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:shepherd-system", "system:authenticated"},
	}
)

// kustomize renders a kustomization with kubectl's own kustomize (the envtest assets' kubectl)
// and returns its objects.
func kustomize(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	Expect(cmd.Run()).To(Succeed(), "kubectl kustomize %s: %s", dir, stderr.String())
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		Expect(err).NotTo(HaveOccurred())
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// applyRBAC creates the RBAC objects among objs (and the namespaces they live in) whose
// namespace keep accepts, and deletes them when the test ends.
func applyRBAC(objs []*unstructured.Unstructured, keep func(ns string) bool) {
	GinkgoHelper()
	n := 0
	for _, u := range objs {
		if u.GroupVersionKind().Group != "rbac.authorization.k8s.io" || !keep(u.GetNamespace()) {
			continue
		}
		if ns := u.GetNamespace(); ns != "" {
			Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, u))).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, u))).To(Succeed()) })
		n++
	}
	Expect(n).To(BeNumerically(">", 0), "no RBAC object applied")
}

var _ = Describe("A namespaced install (config/namespaced)", Serial, func() {
	It("runs a session to merge with only the overlay's RBAC, and leaves other namespaces alone", func() {
		w, other := newWorld(), newWorld()

		By("the overlay's RBAC: cluster-wide only its small roles, and the tenant base bound in the session's namespace alone")
		install := kustomize(filepath.Join(repoRoot(), "config", "namespaced"))
		for _, u := range install {
			if u.GetKind() == "ClusterRoleBinding" {
				// The dashboard's binding grants every user only `list dashboard` (the board filters
				// by each user's own access).
				Expect(u.GetName()).To(BeElementOf("shepherd-manager-cluster", "shepherd-egress-proxy-cluster", "shepherd-metrics-auth-rolebinding",
					"shepherd-dashboard-rolebinding"), "a cluster-wide binding in the namespaced install")
			}
			if u.GetKind() == "Deployment" {
				Expect(u.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("template", HaveKeyWithValue("spec",
					HaveKeyWithValue("containers", ContainElement(HaveKeyWithValue("args", ContainElement("--watch-namespaces=team-a"))))))), u.GetName())
			}
		}
		applyRBAC(install, func(ns string) bool { return ns != "team-a" })
		tenant := GinkgoT().TempDir()
		// As tenants/team-a does it, for the session's namespace (kustomize wants a relative base).
		base, err := filepath.Rel(tenant, filepath.Join(repoRoot(), "config", "namespaced", "tenant"))
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(tenant, "kustomization.yaml"), []byte("namespace: "+w.ns+"\nresources:\n- "+base+"\n"), 0o600)).To(Succeed())
		applyRBAC(kustomize(tenant), func(ns string) bool { return ns == w.ns })

		By("the manager as its ServiceAccount, watching the session's namespace only")
		admin := mgr
		admin.stop()
		mgr = &managerUnderTest{runnerAddr: admin.runnerAddr, webhookAddr: admin.webhookAddr, identity: managerIdentity, namespaces: []string{w.ns}}
		mgr.start()
		DeferCleanup(func() {
			mgr.stop()
			mgr = admin
			mgr.start()
		})

		create(other.project().Obj())
		a := mergeSession(w, "scoped")
		a.check("success")
		a.review("APPROVED")
		a.expect(agentsv1alpha1.PhaseMerged)
		info, err := gh.PullRequest(w.full, a.pr)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Merged).To(BeTrue())
		Expect(projectConditions(w.ns, "widgets")()).To(ContainElement(And(HaveField("Type", agentsv1alpha1.ConditionReady), HaveField("Status", metav1.ConditionTrue))))

		By("a Project in a namespace it does not watch gets no status")
		Consistently(projectConditions(other.ns, "widgets"), 2*time.Second).Should(BeEmpty())

		By("what the manager's identity may read: Secrets only where it is bound; the cluster ranges")
		as := func(id *rest.ImpersonationConfig) client.Client {
			c := rest.CopyConfig(cfg)
			c.Impersonate = *id
			cl, err := client.New(c, client.Options{Scheme: k8sClient.Scheme()})
			Expect(err).NotTo(HaveOccurred())
			return cl
		}
		m := as(managerIdentity)
		Expect(m.Get(ctx, objKey(w.ns, "github"), &corev1.Secret{})).To(Succeed())
		Expect(apierrors.IsForbidden(m.Get(ctx, objKey(other.ns, "github"), &corev1.Secret{}))).To(BeTrue(), "another namespace's Secret")
		Expect(apierrors.IsForbidden(m.List(ctx, &corev1.SecretList{}))).To(BeTrue(), "every namespace's Secrets")
		Expect(apierrors.IsForbidden(m.List(ctx, &corev1.PodList{}, client.InNamespace(other.ns)))).To(BeTrue())
		Expect(apierrors.IsForbidden(m.List(ctx, &corev1.SecretList{}, client.InNamespace(corev1.NamespaceDefault)))).To(BeTrue(), "the Role in default is for the API server's endpoints alone")
		_, err = controller.DiscoverClusterRanges(ctx, m)
		Expect(err).NotTo(HaveOccurred(), "the nodes, ServiceCIDRs and the kubernetes Service's endpoints")

		By("the egress proxy's identity: pods and Projects where it is bound, nothing else")
		e := as(egressIdentity)
		Expect(e.List(ctx, &corev1.PodList{}, client.InNamespace(w.ns))).To(Succeed())
		Expect(e.List(ctx, &agentsv1alpha1.ProjectList{}, client.InNamespace(w.ns))).To(Succeed())
		Expect(apierrors.IsForbidden(e.List(ctx, &corev1.PodList{}, client.InNamespace(other.ns)))).To(BeTrue())
		Expect(apierrors.IsForbidden(e.Get(ctx, objKey(w.ns, "github"), &corev1.Secret{}))).To(BeTrue(), "the proxy reads no Secret")
	})
})
