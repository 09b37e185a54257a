package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-dev/shepherd/test/scenario"
)

// The images this benchmark needs: the manager and the runner of this tree, and the test agent.
const (
	managerImage   = "shepherd-manager:latest"
	runnerImage    = "shepherd-runner:latest"
	testAgentImage = "shepherd-test-agent:latest"
	imagesToBuild  = "manager,runner,test-agent"
)

// command runs an external program with an argument list and a timeout; its output goes to out
// (indented) when out is set, and is returned.
func command(ctx context.Context, timeout time.Duration, dir string, out io.Writer, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	if out != nil {
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&buf, pw), io.MultiWriter(&buf, pw)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				fmt.Fprintf(out, "    | %s\n", sc.Text())
			}
			_, _ = io.Copy(io.Discard, pr)
		}()
		err := cmd.Run()
		_ = pw.Close()
		<-done
		if err != nil {
			return buf.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return buf.String(), nil
	}
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return buf.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(lastLines(buf.String(), 20)))
	}
	return buf.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clusterEnv is how this process reaches the cluster.
type clusterEnv struct {
	kubeconfig string
	kubectl    string
	cfg        *rest.Config
	cl         client.WithWatch
	cs         kubernetes.Interface
}

// localcluster runs `go run ./hack/localcluster <args>` in the checkout.
func (b *bench) localcluster(ctx context.Context, timeout time.Duration, out io.Writer, args ...string) (string, error) {
	return command(ctx, timeout, b.o.repo, out, "go", append([]string{"run", "./hack/localcluster"}, args...)...)
}

// setUp brings the cluster to what the benchmark needs, as hack/run-local.sh does: the cluster
// with no KWOK node, this tree's images loaded, config/default applied, and the manager rolled to
// the image just loaded. With -setup=false it only connects.
func (b *bench) setUp(ctx context.Context) error {
	out := b.out
	if b.o.setup {
		b.section("the local cluster (hack/localcluster up --kwok-nodes=0)")
		started := time.Now()
		if _, err := b.localcluster(ctx, time.Hour, out, "up", "--kwok-nodes=0"); err != nil {
			return err
		}
		b.line("cluster up in %.1fs", time.Since(started).Seconds())
	}
	if b.o.kubeconfig == "" {
		env, err := b.localcluster(ctx, 5*time.Minute, nil, "env")
		if err != nil {
			return err
		}
		b.o.kubeconfig = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(env), "export KUBECONFIG=")), `'"`)
	}
	dir, err := command(ctx, time.Hour, b.o.repo, nil, filepath.Join(b.o.repo, "hack", "kube-binaries.sh"), "kubectl")
	if err != nil {
		return err
	}
	b.env.kubeconfig = b.o.kubeconfig
	b.env.kubectl = filepath.Join(strings.TrimSpace(lastLines(dir, 1)), "kubectl")
	if err := b.connect(); err != nil {
		return err
	}
	if !b.o.setup {
		return b.waitManager(ctx)
	}

	b.section("images (hack/localcluster images --load --only %s)", imagesToBuild)
	started := time.Now()
	if _, err := b.localcluster(ctx, time.Hour, out, "images", "--load", "--only", imagesToBuild); err != nil {
		return err
	}
	b.line("images built and loaded in %.1fs", time.Since(started).Seconds())

	b.section("CRDs, RBAC and the manager (config/default)")
	started = time.Now()
	if _, err := b.kubectl(ctx, out, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(b.o.repo, "config", "default")); err != nil {
		return err
	}
	if _, err := b.kubectl(ctx, out, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/projects.agents.shepherd.dev", "crd/worktrees.agents.shepherd.dev", "crd/agentsessions.agents.shepherd.dev",
		"crd/budgetpolicies.agents.shepherd.dev", "crd/agenttasks.agents.shepherd.dev"); err != nil {
		return err
	}
	want, err := imageID(filepath.Join(b.o.repo, "bin", "images", "shepherd-manager_latest.tar"), managerImage)
	if err != nil {
		return err
	}
	if got := b.managerImageID(ctx); got != want {
		// Same tag, new image: start a new pod so that it runs what was just loaded.
		b.line("the manager runs %q, not the image just loaded (%s): restarting it", shortID(got), shortID(want))
		if _, err := b.kubectl(ctx, out, "-n", scenario.ManagerNamespace, "rollout", "restart", "deployment/shepherd-manager"); err != nil {
			return err
		}
	}
	if _, err := b.kubectl(ctx, out, "-n", scenario.ManagerNamespace, "rollout", "status", "deployment/shepherd-manager", "--timeout=180s"); err != nil {
		return err
	}
	if err := b.waitManager(ctx); err != nil {
		return err
	}
	b.line("manager rolled out in %.1fs, image %s", time.Since(started).Seconds(), shortID(want))
	return nil
}

func (b *bench) kubectl(ctx context.Context, out io.Writer, args ...string) (string, error) {
	return command(ctx, 5*time.Minute, b.o.repo, out, b.env.kubectl, append([]string{"--kubeconfig", b.env.kubeconfig}, args...)...)
}

func (b *bench) connect() error {
	// The benchmark watches and polls; the default 5 QPS would pace its own reads.
	cfg, cl, cs, err := scenario.Clients(b.env.kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	b.env.cfg, b.env.cl, b.env.cs = cfg, cl, cs
	return nil
}

// managerPods are the manager's pods that are not being deleted.
func (b *bench) managerPods(ctx context.Context) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.env.cl.List(ctx, &pods, client.InNamespace(scenario.ManagerNamespace),
		client.MatchingLabels{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"}); err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, nil
}

func (b *bench) managerImageID(ctx context.Context) string {
	pods, err := b.managerPods(ctx)
	if err != nil || len(pods) != 1 || len(pods[0].Status.ContainerStatuses) == 0 {
		return ""
	}
	return pods[0].Status.ContainerStatuses[0].ImageID
}

// waitManager waits for one Ready manager pod.
func (b *bench) waitManager(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.managerPods(ctx)
		if err != nil || len(pods) != 1 {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		for _, c := range pods[0].Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the manager (%s/shepherd-manager) has no Ready pod: %w (is it deployed? run without -setup=false)", scenario.ManagerNamespace, err)
	}
	return nil
}

// imageID is the image ID (config digest) of an archive written by `localcluster images`: what
// the kubelet reports as a container's imageID for an image without a registry digest.
func imageID(archive, ref string) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", archive, err)
	}
	h, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// shortID abbreviates an image ID (sha256: and 12 hex digits).
func shortID(s string) string {
	if len(s) > 19 {
		return s[:19]
	}
	return s
}

// resetNamespace deletes a namespace left by an interrupted run (its Worktrees annotated
// force-delete first, so that none holds it) and creates it anew, enforcing the restricted Pod
// Security Standard like any namespace agents run in.
func (b *bench) resetNamespace(ctx context.Context) error {
	err := b.env.cl.Get(ctx, client.ObjectKey{Name: b.o.namespace}, &corev1.Namespace{})
	switch {
	case err == nil:
		b.line("deleting the namespace %s left by an earlier run", b.o.namespace)
		if err := b.deleteNamespace(ctx); err != nil {
			return err
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	if err := b.env.cl.Create(ctx, scenario.RestrictedNamespace(b.o.namespace)); err != nil {
		return fmt.Errorf("create namespace %s: %w", b.o.namespace, err)
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := b.env.cl.Get(ctx, client.ObjectKey{Namespace: b.o.namespace, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, nil
	})
}

// deleteNamespace deletes the benchmark's namespace and waits until it is gone.
func (b *bench) deleteNamespace(ctx context.Context) error {
	return scenario.DeleteNamespace(ctx, b.env.cl, b.o.namespace, 5*time.Minute)
}

// setupInfo is what the benchmark ran on.
type setupInfo struct {
	node, kubelet, runtime, kernel, osImage string
	nodeCPU, nodeMem                        string
	hostCPUs                                int
	server                                  string
	gitImage, gitHost                       string
	managerImage                            string
	loadStart, loadEnd                      string
}

func (b *bench) readSetup(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := b.env.cl.List(ctx, &nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if _, fake := n.Annotations["kwok.x-k8s.io/node"]; fake {
			continue
		}
		i := n.Status.NodeInfo
		b.info.node, b.info.kubelet, b.info.runtime, b.info.kernel, b.info.osImage = n.Name, i.KubeletVersion, i.ContainerRuntimeVersion, i.KernelVersion, i.OSImage
		b.info.nodeCPU = n.Status.Capacity.Cpu().String()
		b.info.nodeMem = fmt.Sprintf("%.1f GiB", float64(n.Status.Capacity.Memory().Value())/(1<<30))
		break
	}
	if b.info.node == "" {
		return errors.New("no real node in the cluster")
	}
	v, err := b.env.cs.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	b.info.server = v.GitVersion
	if out, err := command(ctx, time.Minute, "", nil, "git", "version"); err == nil {
		b.info.gitHost = strings.TrimPrefix(strings.TrimSpace(out), "git version ")
	}
	b.info.managerImage = b.managerImageID(ctx)
	return nil
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// load1 is the 1-minute load average.
func load1() string {
	f := strings.Fields(loadAvg())
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// timeToRunning is the manager's own histogram shepherd_session_time_to_running_seconds (from
// the session's creationTimestamp, whole seconds, to status.startTime), by checkout label: sum and
// count.
type timeToRunning map[string][2]float64

// scrapeTimeToRunning reads the manager's metrics through its Service, from this host, as an
// allowed scraper (docs/metrics.md).
func (b *bench) scrapeTimeToRunning(ctx context.Context) (timeToRunning, error) {
	scraper, err := scenario.NewMetricsScraper(ctx, b.env.cs)
	if err != nil {
		return nil, err
	}
	body, err := scraper.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	out := timeToRunning{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, suffix := range []string{"_sum{", "_count{"} {
			prefix := "shepherd_session_time_to_running_seconds" + suffix
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			labels, value, ok := strings.Cut(strings.TrimPrefix(line, prefix), "} ")
			if !ok {
				continue
			}
			checkout := ""
			for _, kv := range strings.Split(labels, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok && k == "checkout" {
					checkout = strings.Trim(v, `"`)
				}
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil || checkout == "" {
				continue
			}
			e := out[checkout]
			e[i] = f
			out[checkout] = e
		}
	}
	return out, sc.Err()
}
