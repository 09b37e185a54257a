package release

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// helmDir is where hack/helm.sh keeps Helm, asked once per test binary.
var helmDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(filepath.Join(repoRoot(), "hack", "helm.sh")).Output()
	return strings.TrimSpace(string(out)), err
})

// helm is the cached Helm (hack/helm.sh builds it from the Go module proxy once).
func helm(t *testing.T) string {
	t.Helper()
	dir, err := helmDir()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	return filepath.Join(dir, "helm")
}

// runHelm runs helm on the chart with a values file (when values is not nil) and returns its
// output, stderr included on failure.
func runHelm(t *testing.T, values map[string]any, args ...string) (string, error) {
	t.Helper()
	if values != nil {
		b, err := yaml.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", p)
	}
	// Helm first: on a cold cache its first call builds it, which is not helm's time to run.
	bin := helm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

func chartPath() string { return filepath.Join(repoRoot(), ChartDir) }

// template renders the chart as `helm install -n shepherd-system` would.
func template(t *testing.T, values map[string]any, extra ...string) string {
	t.Helper()
	out, err := runHelm(t, values, append([]string{"template", "shepherd", chartPath(), "-n", installNamespace}, extra...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return out
}

func TestChartIsCurrent(t *testing.T) {
	diff, err := ChartDiff(context.Background(), kubectl(t), repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	if len(diff) > 0 {
		t.Fatalf("charts/shepherd is not what config/ renders; run `make chart`:\n%s", strings.Join(diff, "\n"))
	}
}

// releaseValues are the chart's values that pin testImages, as `make release` pins them.
func releaseValues() map[string]any {
	digest := func(ref string) string { return ref[strings.Index(ref, "@")+1:] }
	img := func(ref string) map[string]any {
		name, _, err := splitRef(ref)
		if err != nil {
			panic(err)
		}
		return map[string]any{"repository": name[strings.LastIndex(name, "/")+1:], "digest": digest(ref)}
	}
	agents := map[string]any{"codex": nil, "opencode": nil, "gemini": nil}
	for k, ref := range testImages.Agents {
		agents[k] = img(ref)
	}
	return map[string]any{"images": map[string]any{
		"registry": "registry.example/shepherd", "tag": "v0.0.0-test",
		"manager": img(testImages.Manager), "runner": img(testImages.Runner), "agents": agents,
	}}
}

// helmLabels are the labels the chart adds to config/'s.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// normalized keys objects by kind/namespace/name, without Helm's labels, through JSON (so that
// both sides' numbers and empty fields compare alike).
func normalized(t *testing.T, manifest []byte, skip ...string) map[string]string {
	t.Helper()
	objs, err := splitObjects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		if kind := str(o, "kind"); kind == "" || strings.Contains(strings.Join(skip, ","), kind) {
			continue
		}
		labels := child(o, "metadata", "labels")
		for _, l := range helmLabels {
			delete(labels, l)
		}
		b, err := json.MarshalIndent(o, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		out[key(o)] = string(b)
	}
	return out
}

// The chart with the release's images renders exactly the objects of dist/install.yaml (and, with
// watchNamespaces, of dist/install-namespaced.yaml), CRDs included: one source.
func TestChartRendersTheRelease(t *testing.T) {
	g := NewWithT(t)
	work := t.TempDir()
	for _, m := range Manifests {
		want, err := Render(context.Background(), kubectl(t), repoRoot(), work, m, testImages)
		g.Expect(err).NotTo(HaveOccurred())
		values := releaseValues()
		if strings.Contains(m.File, "namespaced") {
			values["watchNamespaces"] = []string{exampleTenant}
		}
		got := normalized(t, []byte(template(t, values, "--include-crds")))
		exp := normalized(t, want, "Namespace")
		g.Expect(got).To(HaveLen(len(exp)), m.File)
		for k, v := range exp {
			g.Expect(got).To(HaveKey(k), m.File)
			g.Expect(got[k]).To(Equal(v), m.File+": "+k)
		}
	}
}

// matrix are the values the chart is linted, rendered and dry-run with.
var matrix = map[string]map[string]any{
	"default":    {},
	"namespaced": {"watchNamespaces": []string{"team-a", "team-b"}},
	"ha": {"manager": map[string]any{"replicas": 3, "kubeAPI": map[string]any{"qps": 250, "burst": 500}, "maxConcurrentReconciles": 32,
		"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "512Mi"}, "limits": map[string]any{"memory": "2Gi"}},
		"affinity": map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
			"weight": 100, "podAffinityTerm": map[string]any{"topologyKey": "kubernetes.io/hostname",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "manager"}}}}}}},
		"podAnnotations": map[string]any{"example.com/team": "platform"}},
		"egressProxy": map[string]any{"replicas": 2}},
	"monitoring": {"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true, "namespace": "monitoring"}},
		"argocd": map[string]any{"enabled": true}},
	"exposed": {"webhooks": map[string]any{
		"service": map[string]any{"type": "LoadBalancer", "annotations": map[string]any{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
		"ingress": map[string]any{"enabled": true, "className": "nginx", "host": "shepherd.example.com",
			"tls": []any{map[string]any{"secretName": "shepherd-tls", "hosts": []string{"shepherd.example.com"}}}},
		"httpRoute": map[string]any{"enabled": true, "hostnames": []string{"hooks.example.com"},
			"parentRefs": []any{map[string]any{"name": "public", "namespace": "gateway-system"}}}}},
	"closed": {"egressProxy": map[string]any{"enabled": false}, "networkPolicy": map[string]any{"enabled": false},
		"egress":           map[string]any{"clusterCIDRs": []string{"10.244.0.0/16", "10.96.0.0/12"}, "deniedCIDRs": []string{"169.254.0.0/16"}},
		"imagePullSecrets": []string{"mirror"}, "images": map[string]any{"registry": "localhost:5000/mirror", "pullPolicy": "Always"},
		"manager": map[string]any{"extraArgs": []string{"--webhook-max-body-bytes=1048576"}}},
}

// moduleDir is a module's directory in the module cache (downloaded from the proxy once).
func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", mod, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %v: %s", mod, err, out)
	}
	return m.Dir
}

// The CRDs of what the chart can install beyond Shepherd's own: the Prometheus Operator's and
// the Gateway API's, from their modules (the projects' own manifests).
const (
	prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	gatewayAPI         = "sigs.k8s.io/gateway-api@v1.6.3"
)

// Every value combination lints, renders, and is accepted by a real API server (server-side
// dry-run, so the API server validates every field against its schemas and the CRDs').
func TestChartMatrixAgainstTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	c := startCluster(t)
	prom := filepath.Join(moduleDir(t, prometheusOperator), "example", "prometheus-operator-crd")
	gw := filepath.Join(moduleDir(t, gatewayAPI), "config", "crd", "standard")
	c.must("apply", "--server-side", "-f", filepath.Join(prom, "monitoring.coreos.com_servicemonitors.yaml"),
		"-f", filepath.Join(prom, "monitoring.coreos.com_prometheusrules.yaml"), "-f", filepath.Join(gw, "gateway.networking.k8s.io_httproutes.yaml"))
	c.must("apply", "--server-side", "-f", filepath.Join(chartPath(), "crds"))
	for _, ns := range []string{installNamespace, "team-a", "team-b", "monitoring", "argocd"} {
		c.must("create", "namespace", ns)
	}
	g.Eventually(func() error {
		_, err := c.run("get", "servicemonitors,prometheusrules,httproutes,agentsessions", "-A")
		return err
	}).WithTimeout(time.Minute).Should(Succeed())
	for name, values := range matrix {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := runHelm(t, values, "lint", "--strict", chartPath(), "-n", installNamespace)
			g.Expect(err).NotTo(HaveOccurred(), out)
			file := filepath.Join(t.TempDir(), "rendered.yaml")
			g.Expect(os.WriteFile(file, []byte(template(t, values)), 0o644)).To(Succeed())
			out, err = c.run("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", file)
			g.Expect(err).NotTo(HaveOccurred(), out)
			checkMatrixCase(g, name, file)
		})
	}
}

// checkMatrixCase asserts what each matrix case's values must have changed.
func checkMatrixCase(g Gomega, name, file string) {
	b, err := os.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := splitObjects(b)
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string][]string{}
	args := map[string]string{}
	for _, o := range objs {
		kinds[str(o, "kind")] = append(kinds[str(o, "kind")], str(o, "metadata", "namespace")+"/"+str(o, "metadata", "name"))
		if str(o, "kind") == "Deployment" {
			j, _ := json.Marshal(o)
			args[str(o, "metadata", "name")] = string(j)
		}
	}
	mgr := args["shepherd-manager"]
	switch name {
	case "default":
		g.Expect(kinds).NotTo(HaveKey("PodDisruptionBudget"))
		g.Expect(kinds["APIService"]).To(HaveLen(1), "the unsharded install serves the dashboard's API")
		g.Expect(kinds["ClusterRole"]).To(ContainElement("/shepherd-manager-role"), "no shard, no suffix")
		g.Expect(kinds["ClusterRoleBinding"]).To(ContainElement("/shepherd-manager-rolebinding"))
		g.Expect(mgr).To(ContainSubstring(`"--leader-elect"`))
		g.Expect(mgr).NotTo(ContainSubstring("--watch-namespaces"))
	case "namespaced":
		g.Expect(kinds["ClusterRoleBinding"]).NotTo(ContainElement("/shepherd-manager-rolebinding"))
		g.Expect(kinds["RoleBinding"]).To(ContainElements("team-a/shepherd-manager", "team-b/shepherd-manager", "team-b/shepherd-egress-proxy"))
		g.Expect(mgr).To(ContainSubstring(`"--watch-namespaces=team-a,team-b"`))
		g.Expect(args["shepherd-egress-proxy"]).To(ContainSubstring(`"--watch-namespaces=team-a,team-b"`))
	case "ha":
		g.Expect(kinds["PodDisruptionBudget"]).To(ConsistOf(installNamespace + "/shepherd-manager"))
		g.Expect(mgr).To(And(ContainSubstring(`"replicas":3`), ContainSubstring(`"--kube-api-qps=250"`),
			ContainSubstring(`"--kube-api-burst=500"`), ContainSubstring(`"--max-concurrent-reconciles=32"`),
			ContainSubstring(`"podAntiAffinity"`), ContainSubstring(`"memory":"2Gi"`), ContainSubstring(`"example.com/team":"platform"`)))
	case "monitoring":
		g.Expect(kinds["ServiceMonitor"]).To(ConsistOf(installNamespace + "/shepherd-manager"))
		g.Expect(kinds["PrometheusRule"]).To(ConsistOf(installNamespace + "/shepherd-alerts"))
		g.Expect(kinds["ConfigMap"]).To(ConsistOf("monitoring/shepherd-grafana-dashboard", "argocd/argocd-cm"))
		// The alerts' annotations keep their Prometheus templates (Helm must not run them).
		g.Expect(string(b)).To(ContainSubstring("{{ $labels.namespace }}"))
	case "exposed":
		g.Expect(kinds["Ingress"]).To(ConsistOf(installNamespace + "/shepherd-webhooks"))
		g.Expect(kinds["HTTPRoute"]).To(ConsistOf(installNamespace + "/shepherd-webhooks"))
		g.Expect(string(b)).To(And(ContainSubstring("type: LoadBalancer"), ContainSubstring("aws-load-balancer-type: nlb")))
	case "closed":
		g.Expect(args).NotTo(HaveKey("shepherd-egress-proxy"))
		g.Expect(kinds).NotTo(HaveKey("NetworkPolicy"))
		g.Expect(kinds["ServiceAccount"]).NotTo(ContainElement(installNamespace + "/shepherd-egress-proxy"))
		g.Expect(mgr).To(And(ContainSubstring(`"--egress-proxy-url=none"`), ContainSubstring(`"--cluster-cidrs=10.244.0.0/16,10.96.0.0/12"`),
			ContainSubstring(`"--denied-cidrs=169.254.0.0/16"`), ContainSubstring(`"--webhook-max-body-bytes=1048576"`),
			ContainSubstring(`"image":"localhost:5000/mirror/shepherd-manager:0.1.0"`), ContainSubstring(`"imagePullPolicy":"Always"`),
			ContainSubstring(`"imagePullSecrets":[{"name":"mirror"}]`)))
	}
}

// TestChartShardsInstallSideBySide: two releases of the chart, each a shard of the cluster on
// its own namespaces, installed by Helm on one API server. Helm refuses to install an object
// another release owns, so both installing shows that they share nothing but the CRDs; each
// shard's bindings name its own roles; the dashboard's aggregated API (one per cluster) is the
// unsharded install's alone; uninstalling one shard leaves the other whole.
func TestChartShardsInstallSideBySide(t *testing.T) {
	g := NewWithT(t)
	c := startCluster(t)
	c.must("apply", "--server-side", "-f", filepath.Join(chartPath(), "crds"))
	for _, ns := range []string{"shepherd-a", "shepherd-b", "team-a", "team-b"} {
		c.must("create", "namespace", ns)
	}
	for _, shard := range []string{"a", "b"} {
		values := map[string]any{"shard": shard, "watchNamespaces": []string{"team-" + shard}}
		out, err := runHelm(t, values, "install", "shepherd", chartPath(), "-n", "shepherd-"+shard, "--kubeconfig", c.kubeconfig, "--skip-crds")
		g.Expect(err).NotTo(HaveOccurred(), "shard %s: %s", shard, out)
		manifest, err := runHelm(t, nil, "get", "manifest", "shepherd", "-n", "shepherd-"+shard, "--kubeconfig", c.kubeconfig)
		g.Expect(err).NotTo(HaveOccurred(), manifest)
		objs, err := splitObjects([]byte(manifest))
		g.Expect(err).NotTo(HaveOccurred())
		roles := map[string]bool{}
		for _, o := range objs {
			if k := str(o, "kind"); k == "ClusterRole" || k == "Role" {
				roles[k+"/"+str(o, "metadata", "name")] = true
			}
		}
		for _, o := range objs {
			kind, name, ns := str(o, "kind"), str(o, "metadata", "name"), str(o, "metadata", "namespace")
			g.Expect(kind).NotTo(Equal("APIService"), "shard %s: the aggregated API is one per cluster", shard)
			if ns == "" || ns != "shepherd-"+shard && ns != "team-"+shard {
				// Outside the shard's own namespaces: its name says whose it is.
				g.Expect(name).To(HaveSuffix("-"+shard), "shard %s: %s %s/%s", shard, kind, ns, name)
			}
			if rr, ok := o["roleRef"].(map[string]any); ok && strings.HasPrefix(rr["name"].(string), "shepherd-") {
				g.Expect(roles).To(HaveKey(rr["kind"].(string)+"/"+rr["name"].(string)), "shard %s: %s %s/%s binds a role of its own release", shard, kind, ns, name)
			}
		}
	}
	g.Expect(c.must("get", "clusterroles", "-o", "name")).To(And(
		ContainSubstring("clusterrole.rbac.authorization.k8s.io/shepherd-manager-role-a"),
		ContainSubstring("clusterrole.rbac.authorization.k8s.io/shepherd-manager-role-b")))
	out, err := runHelm(t, nil, "uninstall", "shepherd", "-n", "shepherd-a", "--kubeconfig", c.kubeconfig)
	g.Expect(err).NotTo(HaveOccurred(), out)
	left := c.must("get", "clusterroles,clusterrolebindings", "-o", "name")
	g.Expect(left).NotTo(ContainSubstring("shepherd-manager-role-a"))
	g.Expect(left).To(And(ContainSubstring("clusterrole.rbac.authorization.k8s.io/shepherd-manager-role-b"),
		ContainSubstring("clusterrolebinding.rbac.authorization.k8s.io/shepherd-manager-cluster-b")))
	g.Expect(c.must("get", "rolebindings", "-n", "team-b", "-o", "name")).To(ContainSubstring("shepherd-manager"))
}

// Values the chart refuses, each with a message that says what to fix.
func TestChartRefusesBadValues(t *testing.T) {
	for name, c := range map[string]struct {
		values map[string]any
		want   string
	}{
		"an unknown key":                {map[string]any{"manager": map[string]any{"replica": 2}}, "additional properties 'replica' not allowed"},
		"replicas without a leader":     {map[string]any{"manager": map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}}, "manager.replicas above 1 needs manager.leaderElection.enabled"},
		"too many reconciles":           {map[string]any{"manager": map[string]any{"maxConcurrentReconciles": 100}}, "maxConcurrentReconciles"},
		"an unpinnable digest":          {map[string]any{"images": map[string]any{"manager": map[string]any{"digest": "sha256:abc"}}}, "digest"},
		"the release namespace watched": {map[string]any{"watchNamespaces": []string{"team-a", installNamespace}}, "watchNamespaces lists the release namespace"},
		"a bad namespace":               {map[string]any{"watchNamespaces": []string{"Team_A"}}, "watchNamespaces"},
		"a route without a gateway":     {map[string]any{"webhooks": map[string]any{"httpRoute": map[string]any{"enabled": true}}}, "parentRefs must name the Gateway"},
		"a CIDR that is not one":        {map[string]any{"egress": map[string]any{"deniedCIDRs": []string{"169.254.0.0"}}}, "deniedCIDRs"},
		"a flag that is not one":        {map[string]any{"manager": map[string]any{"extraArgs": []string{"rm -rf /"}}}, "extraArgs"},
		"a shard watching everything":   {map[string]any{"shard": "a"}, "shard needs watchNamespaces"},
		"a shard that is no label":      {map[string]any{"shard": "Shard_A", "watchNamespaces": []string{"team-a"}}, "shard"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := runHelm(t, c.values, "template", "shepherd", chartPath(), "-n", installNamespace)
			g.Expect(err).To(HaveOccurred(), out)
			g.Expect(out).To(ContainSubstring(c.want))
		})
	}
}

func TestChartVersion(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{"v1.2.3": "1.2.3", "0.4.0-rc.1": "0.4.0-rc.1", "cc94054": "0.0.0-cc94054",
		"v0.3.0-4-gcc94054-dirty": "0.3.0-4-gcc94054-dirty", "main/feature_x": "0.0.0-main-feature-x"} {
		g.Expect(ChartVersion(in)).To(Equal(want), in)
	}
}

// The packaged chart of a release installs the release's images by digest with no values given.
func TestPackageChartPinsTheRelease(t *testing.T) {
	g := NewWithT(t)
	out := t.TempDir()
	tgz, err := PackageChart(context.Background(), helm(t), repoRoot(), out, "v0.0.0-test", testImages)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Base(tgz)).To(Equal("shepherd-0.0.0-test.tgz"))
	rendered, err := runHelm(t, nil, "template", "shepherd", tgz, "-n", installNamespace)
	g.Expect(err).NotTo(HaveOccurred(), rendered)
	g.Expect(rendered).To(And(ContainSubstring("image: "+testImages.Manager), ContainSubstring("--runner-image="+testImages.Runner),
		ContainSubstring("claude-code="+testImages.Agents["claude-code"]), ContainSubstring(`app.kubernetes.io/version: "v0.0.0-test"`)))
	// The values keep their comments: a user reads the packaged values.yaml.
	values, err := runHelm(t, nil, "show", "values", tgz)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(And(ContainSubstring("registry: registry.example/shepherd"), ContainSubstring("# Where the images are pulled from")))
	_, err = pinValues([]byte("images:\n  registry: x\n"), testImages, "v1")
	g.Expect(err).To(MatchError(ContainSubstring("no images entry with repository shepherd-agent-claude-code")), "the first missing, in order")
}

// Helm refuses to take over an argocd-cm that Argo CD's own install created, rather than
// overwrite its settings (docs/gitops.md says so); without one, it installs it.
func TestChartArgoCDConfigMapIsNotTakenOver(t *testing.T) {
	g := NewWithT(t)
	c := startCluster(t)
	for _, ns := range []string{installNamespace, "argocd"} {
		c.must("create", "namespace", ns)
	}
	c.must("apply", "--server-side", "-f", filepath.Join(chartPath(), "crds"))
	c.must("-n", "argocd", "create", "configmap", "argocd-cm", "--from-literal=url=https://argocd.example.com")
	home := t.TempDir()
	env := []string{"KUBECONFIG=" + c.kubeconfig, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	bin := helm(t)
	helmIn := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := helmIn("install", "shepherd", chartPath(), "-n", installNamespace, "--set", "argocd.enabled=true")
	g.Expect(err).To(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(`ConfigMap "argocd-cm" in namespace "argocd" exists and cannot be imported into the current release`))
	g.Expect(c.must("-n", "argocd", "get", "configmap", "argocd-cm", "-o", "jsonpath={.data.url}")).To(Equal("https://argocd.example.com"))

	c.must("-n", "argocd", "delete", "configmap", "argocd-cm")
	out, err = helmIn("install", "shepherd", chartPath(), "-n", installNamespace, "--set", "argocd.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(c.must("-n", "argocd", "get", "configmap", "argocd-cm", "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/part-of}")).To(Equal("argocd"),
		"Argo CD reads only the argocd-cm labelled part-of: argocd")
	out, err = helmIn("uninstall", "shepherd", "-n", installNamespace)
	g.Expect(err).NotTo(HaveOccurred(), out)
	_, err = c.run("-n", "argocd", "get", "configmap", "argocd-cm")
	g.Expect(err).To(HaveOccurred(), "uninstall removes the ConfigMap it installed")
}
