package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// KWOK's fake nodes, as hack/localcluster makes them: labelled type=kwok and tainted so that only
// pods that tolerate the taint land there.
const (
	kwokLabel = "type"
	kwokValue = "kwok"
	kwokTaint = "kwok.x-k8s.io/node"
	// benchClass is the StorageClass of the benchmark's Project volume: statically provisioned
	// (KWOK pods mount nothing), bound at once.
	benchClass = "shepherd-bench-kwok"
)

type versions struct{ kube, etcd, kwok string }

// cluster is the local cluster, with an unthrottled client for watching and measuring.
type cluster struct {
	o          options
	kubeconfig string
	kubectl    string
	cfg        *rest.Config // unthrottled: measuring must not queue behind the clients measured
	cs         kubernetes.Interface
	cl         client.Client
	versions   versions
	// managerReplicas of an in-cluster manager scaled to 0 for the benchmark; restored by close.
	managerReplicas *int32
}

var scheme = scenario.Scheme()

// command runs name args with a timeout, streaming its output.
func command(ctx context.Context, timeout time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func output(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// startCluster brings the local cluster up with nodes KWOK nodes (replacing one with other
// settings), installs the CRDs and the benchmark's StorageClass, and stops an in-cluster manager.
func startCluster(ctx context.Context, o options, nodes int) (*cluster, error) {
	lc := strings.Fields(o.localcluster)
	logf("the local cluster with %d KWOK nodes (%s up)", nodes, o.localcluster)
	if err := command(ctx, time.Hour, lc[0], append(lc[1:], "up", fmt.Sprintf("--kwok-nodes=%d", nodes))...); err != nil {
		return nil, err
	}
	env, err := output(ctx, 5*time.Minute, lc[0], append(lc[1:], "env")...)
	if err != nil {
		return nil, err
	}
	c := &cluster{o: o}
	for _, line := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			c.kubeconfig = strings.Trim(v, `"'`)
		}
	}
	if c.kubeconfig == "" {
		return nil, fmt.Errorf("%s env printed no KUBECONFIG", o.localcluster)
	}
	dir, err := output(ctx, time.Hour, "hack/kube-binaries.sh", "kubectl")
	if err != nil {
		return nil, err
	}
	c.kubectl = filepath.Join(strings.TrimSpace(dir), "kubectl")
	// No client-side limit for the observer: measuring must not queue behind what it measures.
	if c.cfg, c.cl, c.cs, err = scenario.Clients(c.kubeconfig, -1, -1); err != nil {
		return nil, err
	}
	if v, err := c.cs.Discovery().ServerVersion(); err == nil {
		c.versions.kube = v.GitVersion
	}
	// The binaries' cache directory is named after the versions: k8s-vX-etcd-vY-kwok-vZ.
	parts := strings.Split(filepath.Base(filepath.Dir(c.kubectl)), "-")
	for i := 0; i+1 < len(parts); i++ {
		switch parts[i] {
		case "etcd":
			c.versions.etcd = parts[i+1]
		case "kwok":
			c.versions.kwok = parts[i+1]
		}
	}
	if err := command(ctx, 2*time.Minute, c.kubectl, "--kubeconfig", c.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "config/crd/bases"); err != nil {
		return nil, err
	}
	if err := command(ctx, 2*time.Minute, c.kubectl, "--kubeconfig", c.kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/projects.agents.shepherd.dev", "crd/worktrees.agents.shepherd.dev", "crd/agentsessions.agents.shepherd.dev",
		"crd/budgetpolicies.agents.shepherd.dev", "crd/agenttasks.agents.shepherd.dev"); err != nil {
		return nil, err
	}
	if err := c.stopInClusterManager(ctx); err != nil {
		return nil, err
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: benchClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
	}
	if err := c.cl.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create StorageClass %s: %w", benchClass, err)
	}
	return c, nil
}

// stopInClusterManager scales a manager Deployment left by make run-local to 0: two managers
// would share the work and the measurement.
func (c *cluster) stopInClusterManager(ctx context.Context) error {
	dep := &appsv1.Deployment{}
	err := c.cl.Get(ctx, client.ObjectKey{Namespace: scenario.ManagerNamespace, Name: "shepherd-manager"}, dep)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if dep.Spec.Replicas != nil && *dep.Spec.Replicas == 0 {
		return nil
	}
	c.managerReplicas = ptr.To(ptr.Deref(dep.Spec.Replicas, 1))
	logf("scaling the in-cluster manager to 0 for the benchmark (restored at the end)")
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.Replicas = ptr.To[int32](0)
	return c.cl.Patch(ctx, dep, patch)
}

func (c *cluster) close(keep bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.managerReplicas != nil {
		dep := &appsv1.Deployment{}
		if err := c.cl.Get(ctx, client.ObjectKey{Namespace: scenario.ManagerNamespace, Name: "shepherd-manager"}, dep); err == nil {
			patch := client.MergeFrom(dep.DeepCopy())
			dep.Spec.Replicas = c.managerReplicas
			if err := c.cl.Patch(ctx, dep, patch); err != nil {
				logf("could not restore the in-cluster manager's replicas: %v", err)
			}
		}
	}
	if !keep {
		lc := strings.Fields(c.o.localcluster)
		if err := command(ctx, 5*time.Minute, lc[0], append(lc[1:], "down")...); err != nil {
			logf("%v", err)
		}
	}
}

// namespace creates a fresh namespace (deleting an earlier one of the same name first) and waits
// for its default ServiceAccount.
func (c *cluster) namespace(ctx context.Context, name string) error {
	if err := c.deleteNamespace(ctx, name); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.cl.Create(ctx, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.cl.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, nil
	})
}

// deleteNamespace deletes a namespace (scenario.DeleteNamespace: the manager must be running) and
// waits until it is gone.
func (c *cluster) deleteNamespace(ctx context.Context, name string) error {
	start := time.Now()
	if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		return nil
	}
	if err := scenario.DeleteNamespace(ctx, c.cl, name, 15*time.Minute); err != nil {
		return err
	}
	logf("namespace %s deleted in %s", name, time.Since(start).Round(time.Second))
	return nil
}

// dropNamespace deletes a benchmark namespace without its manager: it takes Shepherd's
// finalizers off the Worktrees and the sessions (workers at a time, with the creating client's
// settings), then deletes the namespace and waits until it is gone.
func (c *cluster) dropNamespace(ctx context.Context, name string, workers int) error {
	start := time.Now()
	if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		return nil
	}
	cl, err := c.creatingClient()
	if err != nil {
		return err
	}
	var objs []client.Object
	var wts agentsv1alpha1.WorktreeList
	if err := cl.List(ctx, &wts, client.InNamespace(name)); err != nil {
		return err
	}
	for i := range wts.Items {
		objs = append(objs, &wts.Items[i])
	}
	var sessions agentsv1alpha1.AgentSessionList
	if err := cl.List(ctx, &sessions, client.InNamespace(name)); err != nil {
		return err
	}
	for i := range sessions.Items {
		objs = append(objs, &sessions.Items[i])
	}
	if _, err := createAll(ctx, workers, len(objs), func(ctx context.Context, i int) error {
		o := objs[i]
		if len(o.GetFinalizers()) == 0 {
			return nil
		}
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		o.SetFinalizers(nil)
		return client.IgnoreNotFound(cl.Patch(ctx, o, patch))
	}); err != nil {
		return fmt.Errorf("drop the finalizers in %s: %w", name, err)
	}
	if err := c.cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})), nil
	}); err != nil {
		return fmt.Errorf("namespace %s still terminating: %w", name, err)
	}
	logf("namespace %s deleted in %s (manager stopped, finalizers dropped)", name, time.Since(start).Round(time.Second))
	return nil
}

// projectVolume is a PersistentVolume for the benchmark's Project: KWOK pods never mount it.
func projectVolume(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              benchClass,
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Ti")},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: "/var/empty/shepherd-bench-never-mounted",
			}},
		},
	}
}

// kwokScheduling places pods on the KWOK nodes only.
func kwokScheduling() (map[string]string, []corev1.Toleration) {
	return map[string]string{kwokLabel: kwokValue},
		[]corev1.Toleration{{Key: kwokTaint, Operator: corev1.TolerationOpEqual, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown memory"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
		}
	}
	return "unknown memory"
}
