package main

import (
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" when valid
	}{
		{args: nil},
		{args: []string{"--kube-api-qps=500", "--kube-api-burst=1000", "--max-concurrent-reconciles=16"}},
		{args: []string{"--kube-api-qps=0"}, want: "--kube-api-qps must be more than 0"},
		{args: []string{"--kube-api-burst=0"}, want: "--kube-api-burst must be at least 1"},
		{args: []string{"--max-concurrent-reconciles=0"}, want: "--max-concurrent-reconciles must be between 1 and 64"},
		{args: []string{"--max-concurrent-reconciles=65"}, want: "--max-concurrent-reconciles must be between 1 and 64"},
		{args: []string{"--memory-limit-ratio=0"}},
		{args: []string{"--memory-limit-ratio=1"}},
		{args: []string{"--memory-limit-ratio=1.2"}, want: "--memory-limit-ratio must be between 0 and 1"},
		{args: []string{"--memory-limit-ratio=-0.1"}, want: "--memory-limit-ratio must be between 0 and 1"},
	} {
		var o options
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		o.bind(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: parse: %v", tc.args, err)
		}
		err := o.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestDefaultsAreValid(t *testing.T) {
	var o options
	o.bind(flag.NewFlagSet("manager", flag.ContinueOnError))
	if o.kubeAPIQPS != 100 || o.kubeAPIBurst != 200 || o.maxConcurrent != 16 {
		t.Errorf("defaults changed: qps %v burst %d reconciles %d (update docs/operations.md and docs/performance.md)", o.kubeAPIQPS, o.kubeAPIBurst, o.maxConcurrent)
	}
	if o.memLimitRatio != 0.9 {
		t.Errorf("--memory-limit-ratio default changed to %v (update docs/operations.md and values.yaml)", o.memLimitRatio)
	}
	if !o.secureMetrics || o.metricsAddr != ":8443" {
		t.Errorf("metrics are served without authentication by default (secure %v on %s): docs/metrics.md says otherwise", o.secureMetrics, o.metricsAddr)
	}
}

func TestCacheStripsManagedFields(t *testing.T) {
	opts := cacheOptions(nil)
	if opts.DefaultTransform == nil {
		t.Fatal("no default transform: cached objects keep their managedFields")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := opts.DefaultTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.Pod).ManagedFields; len(got) != 0 {
		t.Errorf("managedFields kept in the cache: %v", got)
	}
	if len(opts.ByObject) != 5 {
		t.Errorf("label-selected caches: %d kinds, want pods, claims, service accounts, network policies, config maps", len(opts.ByObject))
	}
}

func TestSlimPodKeepsWhatTheManagerReads(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "s-agent", UID: "u1", Labels: map[string]string{"agents.shepherd.dev/session": "s"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "p-agent",
			Containers: []corev1.Container{{Name: "agent", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: []corev1.ContainerStatus{{Name: "prepare"}}},
	}
	out, err := slimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.Name != "s-agent" || p.UID != "u1" || p.Labels["agents.shepherd.dev/session"] != "s" {
		t.Errorf("metadata lost: %+v", p.ObjectMeta)
	}
	if p.Spec.NodeName != "node-1" || p.Spec.ServiceAccountName != "p-agent" || len(p.Spec.Containers) != 0 || len(p.ManagedFields) != 0 {
		t.Errorf("spec not slimmed as expected: %+v", p.Spec)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.InitContainerStatuses) != 1 {
		t.Errorf("status lost: %+v", p.Status)
	}
	if _, err := slimPod("not a pod"); err != nil {
		t.Errorf("other objects pass through: %v", err)
	}
}
