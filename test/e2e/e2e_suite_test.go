// Package e2e runs Shepherd on the real local cluster (hack/localcluster: etcd, kube-apiserver,
// scheduler, controller-manager, containerd, kubelet, kube-proxy) with images built from this
// tree without Docker. `make test-e2e` runs it (root, Debian 12); `make test` leaves it out.
//
// The suite brings the cluster up when it is not running, reuses it when it is, and always tears
// it down at the end: the last spec checks that nothing of it is left. docs/local-cluster.md.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Shepherd e2e suite (local cluster)")
}

// repoRoot is the repository root, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// cluster is what the specs share: the tool, the kubeconfig and clients.
type cluster struct {
	tool       string // the built hack/localcluster
	runDir     string
	kubeconfig string
	kubectlBin string
	cfg        *rest.Config
	client     client.Client
	clientset  *kubernetes.Clientset
}

// run executes a program with a timeout, its output streamed to the Ginkgo log, and returns
// stdout.
func run(timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = GinkgoWriter
	fmt.Fprintf(GinkgoWriter, "$ %s %s\n", name, strings.Join(args, " "))
	err := cmd.Run()
	fmt.Fprint(GinkgoWriter, out.String())
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out.String(), nil
}

// localcluster runs a command of the cluster tool.
func (c *cluster) localcluster(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, repoRoot(), nil, c.tool, args...)
}

// kubectl runs the cluster's kubectl with its kubeconfig.
func (c *cluster) kubectl(args ...string) (string, error) {
	return run(5*time.Minute, repoRoot(), []string{"KUBECONFIG=" + c.kubeconfig}, c.kubectlBin, args...)
}

// buildTool builds hack/localcluster for the suite.
func buildTool() *cluster {
	c := &cluster{tool: filepath.Join(GinkgoT().TempDir(), "localcluster")}
	By("building hack/localcluster")
	_, err := run(15*time.Minute, repoRoot(), nil, "go", "build", "-o", c.tool, "./hack/localcluster")
	Expect(err).NotTo(HaveOccurred())
	return c
}

// start brings the cluster up (kept when already running), builds and loads the images, and
// connects.
func (c *cluster) start() {
	By("bringing the cluster up (the Kubernetes binaries are built once and cached)")
	_, err := c.localcluster(60*time.Minute, "up", fmt.Sprintf("--kwok-nodes=%d", kwokNodes))
	Expect(err).NotTo(HaveOccurred(), "localcluster up: its error names the component and its log")
	env, err := c.localcluster(time.Minute, "env")
	Expect(err).NotTo(HaveOccurred())
	c.kubeconfig = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(env), "export KUBECONFIG="))
	c.runDir = filepath.Dir(c.kubeconfig)

	By("building the images without Docker and loading them into the cluster's containerd")
	// All of them: the agent specs run each real CLI's image (Claude Code, Codex, OpenCode).
	_, err = c.localcluster(30*time.Minute, "images", "--load", "--only=all")
	Expect(err).NotTo(HaveOccurred())

	dir, err := run(time.Minute, repoRoot(), nil, filepath.Join(repoRoot(), "hack", "kube-binaries.sh"), "kubectl")
	Expect(err).NotTo(HaveOccurred())
	c.kubectlBin = filepath.Join(strings.TrimSpace(dir), "kubectl")

	c.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme := clientgoscheme.Scheme
	Expect(agentsv1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	c.client, err = client.New(c.cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	c.clientset, err = kubernetes.NewForConfig(c.cfg)
	Expect(err).NotTo(HaveOccurred())
}

// crdNames are Shepherd's CustomResourceDefinitions.
var crdNames = []schema.GroupResource{
	{Group: agentsv1alpha1.GroupVersion.Group, Resource: "projects"},
	{Group: agentsv1alpha1.GroupVersion.Group, Resource: "worktrees"},
	{Group: agentsv1alpha1.GroupVersion.Group, Resource: "agentsessions"},
	{Group: agentsv1alpha1.GroupVersion.Group, Resource: "budgetpolicies"},
	{Group: agentsv1alpha1.GroupVersion.Group, Resource: "agenttasks"},
}
