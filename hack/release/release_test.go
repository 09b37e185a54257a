package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var testImages = Images{
	Manager: "registry.example/shepherd/shepherd-manager:v0.0.0-test@sha256:" + strings.Repeat("1", 64),
	Runner:  "registry.example/shepherd/shepherd-runner:v0.0.0-test@sha256:" + strings.Repeat("2", 64),
	Agents: map[string]string{
		"claude-code": "registry.example/shepherd/shepherd-agent-claude-code:v0.0.0-test@sha256:" + strings.Repeat("3", 64),
	},
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// kubectl is envtest's (make test builds it with the API server).
func kubectl(t *testing.T) string {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test`, which builds the envtest assets")
	}
	return filepath.Join(dir, "kubectl")
}

func TestSplitRef(t *testing.T) {
	g := NewWithT(t)
	d := "@sha256:" + strings.Repeat("a", 64)
	name, tag, err := splitRef("localhost:5000/x/shepherd-manager:v1" + d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(name).To(Equal("localhost:5000/x/shepherd-manager"))
	g.Expect(tag).To(Equal("v1" + d))
	for _, bad := range []string{"shepherd-manager:latest", "localhost:5000/shepherd-manager" + d, "x:v1@sha256:abc", "x:" + d} {
		_, _, err := splitRef(bad)
		g.Expect(err).To(MatchError(ErrUnpinned), bad)
	}
}

// render writes the release into a temporary dist directory.
func render(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repoRoot(), "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(context.Background(), kubectl(t), repoRoot(), out, testImages); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestManifestsArePinnedAndSmall(t *testing.T) {
	g := NewWithT(t)
	dist := render(t)
	for _, m := range Manifests {
		b, err := os.ReadFile(filepath.Join(dist, m.File))
		g.Expect(err).NotTo(HaveOccurred())
		objs, err := Objects(b)
		g.Expect(err).NotTo(HaveOccurred())
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.Kind]++
			g.Expect(o.Bytes).To(BeNumerically("<", maxObjectBytes), o.Kind+" "+o.Name)
		}
		g.Expect(kinds).To(And(HaveKeyWithValue("CustomResourceDefinition", 5), HaveKeyWithValue("Deployment", 2),
			HaveKeyWithValue("NetworkPolicy", 2), HaveKey("Namespace"), HaveKey("Service"), HaveKey("ServiceAccount")), m.File)
		s := string(b)
		g.Expect(s).To(ContainSubstring("image: " + testImages.Manager))
		g.Expect(s).To(ContainSubstring("--runner-image=" + testImages.Runner))
		g.Expect(s).To(ContainSubstring("--agent-images=claude-code=" + testImages.Agents["claude-code"]))
		g.Expect(s).NotTo(ContainSubstring(":latest"))
	}
	// An unpinned image is refused.
	g.Expect(Check([]byte("kind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - image: nginx:latest\n"))).To(MatchError(ErrUnpinned))
	// dist/ is a kustomize base that renders the same objects.
	out, err := exec.Command(kubectl(t), "kustomize", dist).Output()
	g.Expect(err).NotTo(HaveOccurred())
	viaBase, _ := Objects(out)
	b, _ := os.ReadFile(filepath.Join(dist, "install.yaml"))
	direct, _ := Objects(b)
	g.Expect(viaBase).To(ConsistOf(direct))
}

// cluster is a fresh API server and a kubeconfig for kubectl.
type cluster struct {
	t          *testing.T
	kubectl    string
	kubeconfig string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := &envtest.Environment{}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, kubectl: kubectl(t), kubeconfig: p}
}

func (c *cluster) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

func (c *cluster) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// versions is every object's resourceVersion, in the manifest's order.
func (c *cluster) versions(file string) string {
	return c.must("get", "-f", file, "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
}

// gone: every object of the manifest is gone, but a namespace, which envtest (no namespace
// controller) leaves Terminating. CRDs go once the API server has removed their objects.
// The bound is generous: under `make test` the API server shares two cores with every other
// package, and its CRD cleanup was seen to take over three minutes there.
func (c *cluster) gone(g Gomega, file string) {
	g.Eventually(func(g Gomega) { c.left(g, file) }).WithTimeout(6 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}

func (c *cluster) left(g Gomega, file string) {
	out, _ := c.run("get", "-f", file, "--ignore-not-found", "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		kind, rest, _ := strings.Cut(line, "/")
		_, deleting, _ := strings.Cut(rest, " ")
		why := ""
		if kind == "CustomResourceDefinition" {
			// What its cleanup waits for, when it is slow (the Terminating condition's message).
			why, _ = c.run("get", "crd", strings.Fields(rest)[0], "-o", `jsonpath={.status.conditions[?(@.type=="Terminating")].message}`)
		}
		g.Expect(kind == "Namespace" && deleting != "").To(BeTrue(), "left after delete: "+line+" "+why)
	}
}

// The release applies to a fresh API server client-side, re-applies with nothing changed, and
// deletes leaving nothing; the same server-side, for both manifests.
func TestManifestsApply(t *testing.T) {
	dist := render(t)
	for _, m := range Manifests {
		file := filepath.Join(dist, m.File)
		// The namespaced install binds its roles in the namespaces it watches, which must exist
		// (docs/operations.md#install); config/namespaced lists team-a.
		prepare := func(c *cluster) {
			if strings.Contains(m.File, "namespaced") {
				c.must("create", "namespace", "team-a")
			}
		}
		t.Run(m.File+"/client-side", func(t *testing.T) {
			g := NewWithT(t)
			c := startCluster(t)
			prepare(c)
			out := c.must("apply", "-f", file)
			g.Expect(out).To(ContainSubstring("customresourcedefinition.apiextensions.k8s.io/agentsessions.agents.shepherd.dev created"))
			before := c.versions(file)
			out = c.must("apply", "-f", file)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				g.Expect(line).To(HaveSuffix(" unchanged"))
			}
			g.Expect(c.versions(file)).To(Equal(before), "a re-apply changes nothing")
			c.must("delete", "-f", file, "--wait=false")
			c.gone(g, file)
		})
		t.Run(m.File+"/server-side", func(t *testing.T) {
			g := NewWithT(t)
			c := startCluster(t)
			prepare(c)
			c.must("apply", "--server-side", "--field-manager=shepherd-release-test", "-f", file)
			before := c.versions(file)
			c.must("apply", "--server-side", "--field-manager=shepherd-release-test", "-f", file)
			g.Expect(c.versions(file)).To(Equal(before), "a re-apply changes nothing")
			// A client-side apply over it works too (users switch): no conflict.
			c.must("apply", "-f", file)
			c.must("delete", "-f", file, "--wait=false")
			c.gone(g, file)
		})
	}
}
