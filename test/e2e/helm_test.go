package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// helmRelease is the release name the e2e installs the chart as.
const helmRelease = "shepherd"

// registryImages are the images the Helm spec pushes to the local registry: what a session on
// Claude Code pulls (the manager, the runner copied into the agent pod, the agent's image).
var registryImages = map[string]string{
	"images.manager.digest":            "shepherd-manager",
	"images.runner.digest":             "shepherd-runner",
	"images.agents.claude-code.digest": "shepherd-agent-claude-code",
}

// pushForHelm pushes registryImages to reg and returns the chart values that pull them from it
// by digest, as a release's packaged chart does (`make push`, then `helm install`).
func pushForHelm(reg *localRegistry) []string {
	GinkgoHelper()
	values := []string{"--set", "images.registry=" + reg.host, "--set", "images.tag=latest", "--set", "images.pullPolicy=Always"}
	for key, repo := range registryImages {
		values = append(values, "--set", key+"="+reg.push(repo))
	}
	return values
}

// helmCmd runs the cached Helm (hack/helm.sh) against the cluster.
func (c *cluster) helm(args ...string) (string, error) {
	GinkgoHelper()
	dir, err := run(time.Minute, repoRoot(), nil, filepath.Join(repoRoot(), "hack", "helm.sh"))
	Expect(err).NotTo(HaveOccurred())
	return run(10*time.Minute, repoRoot(), []string{"KUBECONFIG=" + c.kubeconfig, "HELM_CACHE_HOME=" + filepath.Join(c.runDir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(c.runDir, "helm", "config"), "HELM_DATA_HOME=" + filepath.Join(c.runDir, "helm", "data")},
		filepath.Join(strings.TrimSpace(dir), "helm"), args...)
}

// managerRolledOut waits until the manager Deployment runs its current template, Ready.
func managerRolledOut(ctx context.Context, c *cluster) *appsv1.Deployment {
	GinkgoHelper()
	return managerRolledOutIn(ctx, c, managerNamespace)
}

// managerRolledOutIn is managerRolledOut for the manager of namespace ns (a shard's).
func managerRolledOutIn(ctx context.Context, c *cluster, ns string) *appsv1.Deployment {
	GinkgoHelper()
	dep := &appsv1.Deployment{}
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: managerDeployment}, dep)).To(Succeed())
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(*dep.Spec.Replicas))
		g.Expect(dep.Status.ReadyReplicas).To(Equal(*dep.Spec.Replicas))
		g.Expect(dep.Status.Replicas).To(Equal(*dep.Spec.Replicas), "the old pods are gone")
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return dep
}

// helmLifecycle replaces the kustomize install with the chart, runs a session to its merge
// through the chart's manager, upgrades the release with other values, and uninstalls it.
func helmLifecycle(ctx context.Context, c *cluster) {
	By("removing the kustomize install but its Namespace and CRDs (Helm adopts no object it did not create)")
	rendered, err := c.kubectl("kustomize", filepath.Join(repoRoot(), "config", "default"))
	Expect(err).NotTo(HaveOccurred())
	var keep []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if !strings.Contains(doc, "\nkind: Namespace\n") && !strings.Contains(doc, "\nkind: CustomResourceDefinition\n") {
			keep = append(keep, doc)
		}
	}
	ui, err := c.kubectl("kustomize", filepath.Join(repoRoot(), "config", "ui"))
	Expect(err).NotTo(HaveOccurred())
	keep = append(keep, ui)
	_, err = kubectlIn(c, []byte(strings.Join(keep, "\n---\n")), "delete", "--ignore-not-found", "--wait", "-f", "-")
	Expect(err).NotTo(HaveOccurred())

	By("pushing the manager, runner and Claude Code images to a registry on the node IP (plain HTTP)")
	reg := startRegistry(c, nodeIP(ctx, c))
	helmValues := pushForHelm(reg)

	chart := filepath.Join(repoRoot(), "charts", "shepherd")
	By("helm install: the CRDs exist already (Helm skips them), the rest is the chart's, every image from the registry")
	_, err = c.helm(append([]string{"install", helmRelease, chart, "-n", managerNamespace, "--wait", "--timeout", "5m"}, helmValues...)...)
	Expect(err).NotTo(HaveOccurred())
	dep := managerRolledOut(ctx, c)
	Expect(dep.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"))
	Expect(dep.Spec.Template.Spec.Containers[0].Image).To(HavePrefix(reg.host + "/shepherd-manager:latest@sha256:"))
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(c.client.List(ctx, &pods, client.InNamespace(managerNamespace), client.MatchingLabels(dep.Spec.Selector.MatchLabels))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1), "the kustomize install's pod is gone")
		g.Expect(pods.Items[0].Status.ContainerStatuses).To(HaveLen(1))
		g.Expect(pods.Items[0].Status.ContainerStatuses[0].ImageID).To(HavePrefix(reg.host+"/shepherd-manager@sha256:"), "containerd pulled the manager from the registry")
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	Expect(reg.pulls("shepherd-manager")).To(BeNumerically(">=", 1))
	By("the chart's APIService turns Available")
	uiAvailable(c)

	By("a whole session on the fake GitHub, through the chart-installed manager, to its merge")
	gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gh.Close)
	sess := playScenario(ctx, c, gh, playOptions{pollInterval: time.Minute})
	checkSessionEnd(ctx, c, sess)
	Expect(gh.Server.Stats().ByRoute).To(HaveKeyWithValue("PUT /repos/{o}/{r}/pulls/{x}/merge", 1), "one merge call")
	Expect(reg.pulls("shepherd-runner")).To(BeNumerically(">=", 1), "the agent pod's runner came from the registry")
	Expect(reg.pulls("shepherd-agent-claude-code")).To(BeNumerically(">=", 1), "the agent's image came from the registry")

	By("helm upgrade to the same chart with other values: the manager rolls to them")
	_, err = c.helm(append([]string{"upgrade", helmRelease, chart, "-n", managerNamespace, "--wait", "--timeout", "5m",
		"--set", "manager.maxConcurrentReconciles=8", "--set", "manager.podAnnotations.e2e\\.shepherd\\.dev/upgraded=yes"}, helmValues...)...)
	Expect(err).NotTo(HaveOccurred())
	dep = managerRolledOut(ctx, c)
	Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--max-concurrent-reconciles=8"))
	Expect(dep.Spec.Template.Annotations).To(HaveKeyWithValue("e2e.shepherd.dev/upgraded", "yes"))
	status, err := c.helm("status", helmRelease, "-n", managerNamespace)
	Expect(err).NotTo(HaveOccurred())
	Expect(status).To(And(ContainSubstring("STATUS: deployed"), ContainSubstring("REVISION: 2")))

	By("helm uninstall: every object of the release is gone")
	manifest, err := c.helm("get", "manifest", helmRelease, "-n", managerNamespace)
	Expect(err).NotTo(HaveOccurred())
	file := filepath.Join(GinkgoT().TempDir(), "release.yaml")
	Expect(os.WriteFile(file, []byte(manifest), 0o644)).To(Succeed())
	_, err = c.helm("uninstall", helmRelease, "-n", managerNamespace, "--wait", "--timeout", "5m")
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		left, err := c.kubectl("get", "-f", file, "--ignore-not-found", "-o", "name")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(left)).To(BeEmpty(), "left after helm uninstall")
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	left, err := c.kubectl("get", "deployments,services,serviceaccounts,roles,rolebindings,networkpolicies,poddisruptionbudgets,configmaps",
		"-n", managerNamespace, "-l", "app.kubernetes.io/part-of=shepherd", "-o", "name")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(left)).To(BeEmpty())
	left, err = c.kubectl("get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/part-of=shepherd", "-o", "name")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(left)).To(BeEmpty())
	list, err := c.helm("list", "-A", "-q")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(list)).To(BeEmpty(), "no release is left")

	helmShards(ctx, c, chart, helmValues)
}

// helmShards installs two shards of the chart side by side, each in a namespace of its own and
// watching one team's namespace (docs/operations.md#shards-several-managers-on-one-cluster):
// both managers lead with a Lease each, each takes a whole session in its own team's namespace
// to its merge, neither touches the other's, and uninstalling both leaves nothing.
func helmShards(ctx context.Context, c *cluster, chart string, helmValues []string) {
	shards := []string{"a", "b"}
	release := func(s string) string { return "shepherd-shard-" + s }
	team := func(s string) string { return "e2e-team-" + s }
	By("two shards: a release in shepherd-shard-a watching e2e-team-a, one in shepherd-shard-b watching e2e-team-b")
	for _, s := range shards {
		for _, ns := range []string{release(s), team(s)} {
			Expect(c.client.Create(ctx, scenario.RestrictedNamespace(ns))).To(Succeed())
			DeferCleanup(func() { _ = c.client.Delete(context.Background(), scenario.RestrictedNamespace(ns)) })
		}
		_, err := c.helm(append([]string{"install", "shepherd", chart, "-n", release(s), "--skip-crds", "--wait", "--timeout", "5m",
			"--set", "shard=" + s, "--set", "watchNamespaces={" + team(s) + "}"}, helmValues...)...)
		Expect(err).NotTo(HaveOccurred())
	}
	holders := map[string]string{}
	for _, s := range shards {
		dep := managerRolledOutIn(ctx, c, release(s))
		Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--watch-namespaces=" + team(s)))
		Eventually(func(g Gomega) {
			var leases coordinationv1.LeaseList
			g.Expect(c.client.List(ctx, &leases, client.InNamespace(release(s)))).To(Succeed())
			g.Expect(leases.Items).To(HaveLen(1), "one Lease per shard, in its namespace")
			holder := ptr.Deref(leases.Items[0].Spec.HolderIdentity, "")
			g.Expect(holder).To(HavePrefix(managerDeployment+"-"), "held by a pod of the shard's manager")
			holders[s] = holder
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}
	Expect(holders["a"]).NotTo(Equal(holders["b"]), "each shard leads on its own")
	for _, s := range shards {
		// A namespaced install's manager may still write its own pod: the leader labels it as
		// the UI's (it could not before: a RoleBinding per watched namespace only).
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(c.client.List(ctx, &pods, client.InNamespace(release(s)), client.MatchingLabels{controller.LabelUIServing: "true"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			g.Expect(holders[s]).To(HavePrefix(pods.Items[0].Name+"_"), "the leader serves the UI")
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	}

	for _, s := range shards {
		By("shard " + s + ": a whole session in " + team(s) + ", through its own manager, to its merge")
		gh, err := scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: nodeIP(ctx, c), Dir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(gh.Close)
		sess := playScenario(ctx, c, gh, playOptions{pollInterval: time.Minute, namespace: team(s), managerNamespace: release(s)})
		checkSessionEnd(ctx, c, sess)
	}

	By("neither shard touched the other's namespace: each manager's log names only its own team")
	for i, s := range shards {
		other := team(shards[1-i])
		logs, err := c.kubectl("logs", "-n", release(s), "deployment/"+managerDeployment, "--tail=-1")
		Expect(err).NotTo(HaveOccurred())
		Expect(logs).To(ContainSubstring(`"namespace":"`+team(s)+`"`), "shard %s logged its own sessions", s)
		Expect(logs).NotTo(ContainSubstring(other), "shard %s never named %s", s, other)
		Expect(logs).NotTo(ContainSubstring("forbidden"), "shard %s lacked no right it needs", s)
	}

	By("uninstalling both shards leaves no object of either, cluster-wide")
	for _, s := range shards {
		_, err := c.helm("uninstall", "shepherd", "-n", release(s), "--wait", "--timeout", "5m")
		Expect(err).NotTo(HaveOccurred())
	}
	left, err := c.kubectl("get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/part-of=shepherd", "-o", "name")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(left)).To(BeEmpty())
}
