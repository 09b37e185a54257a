package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kwokTestConfig is the local cluster's KWOK configuration, from KWOK's module.
func kwokTestConfig(t *testing.T) string {
	t.Helper()
	dir, err := moduleDir(context.Background(), kwokModule)
	if err != nil {
		t.Fatalf("KWOK's module: %v", err)
	}
	cfg, err := kwokConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestKWOKEndsTheCheckoutStep: under KWOK's pod-ready stage a pod's containers run; Shepherd's
// checkout step (a container named prepare beside the agent's) ends instead, as a kubelet would
// report it, so that a session on a KWOK node can reach Working (bench-fanout) as it did when
// the step was an init container, which the stage already ends.
func TestKWOKEndsTheCheckoutStep(t *testing.T) {
	cfg := kwokTestConfig(t)
	if !strings.Contains(cfg, `{{ if eq .name "prepare" }}`) || strings.Count(cfg, "reason: Completed") < 2 {
		t.Fatalf("the pod-ready stage does not end the checkout step:\n%s", cfg)
	}
	if strings.Contains(cfg, kwokRunning) {
		t.Fatal("the stage still runs every container")
	}
}

// TestKWOKCheckoutStepWritesAResult renders the pod-ready stage's status as KWOK does (Go's
// text/template over the pod as JSON; KWOK's Quote is a JSON string) for a Shepherd pod and
// for another pod with a container named prepare: the Shepherd pod's step ends with a result
// the manager reads as a real step's (its path, and the pod's UID standing for the head), the
// other's with no message.
func TestKWOKCheckoutStepWritesAResult(t *testing.T) {
	cfg := kwokTestConfig(t)
	var tmpl string
	for _, doc := range strings.Split(cfg, "\n---\n") {
		var st struct {
			Metadata struct{ Name string }
			Spec     struct {
				Next struct{ StatusTemplate string }
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &st); err == nil && st.Metadata.Name == "pod-ready" {
			tmpl = st.Spec.Next.StatusTemplate
		}
	}
	if tmpl == "" {
		t.Fatalf("no pod-ready stage in:\n%s", cfg)
	}
	funcs := template.FuncMap{
		"Now":         func() string { return "2026-12-06T18:00:00Z" },
		"Quote":       func(s any) string { b, _ := json.Marshal(s); return string(b) },
		"NodeIPsWith": func(...any) []string { return nil },
		"PodIPsWith":  func(...any) []string { return nil },
	}
	tp, err := template.New("pod-ready").Funcs(funcs).Parse(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	render := func(labels map[string]string) corev1.ContainerStatus {
		t.Helper()
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "0b7c6d2e-uid", Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "prepare", Image: "r"}, {Name: "agent", Image: "a"}}}}
		raw, _ := json.Marshal(pod)
		var data map[string]any
		if err := json.Unmarshal(raw, &data); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := tp.Execute(&out, data); err != nil {
			t.Fatalf("render: %v", err)
		}
		var status corev1.PodStatus
		if err := yaml.Unmarshal(out.Bytes(), &status); err != nil {
			t.Fatalf("the rendered status is not YAML: %v\n%s", err, out.String())
		}
		for _, cs := range status.ContainerStatuses {
			if cs.Name == "prepare" {
				return cs
			}
		}
		t.Fatalf("no prepare status in:\n%s", out.String())
		return corev1.ContainerStatus{}
	}
	cs := render(map[string]string{"agents.shepherd.dev/worktree": "s-00001"})
	if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
		t.Fatalf("the checkout step did not end: %+v", cs.State)
	}
	var res struct {
		Path  string
		Facts struct{ Head string }
	}
	if err := json.Unmarshal([]byte(cs.State.Terminated.Message), &res); err != nil {
		t.Fatalf("message %q is not a result: %v", cs.State.Terminated.Message, err)
	}
	if res.Path != "/shepherd/workspace/worktrees/s-00001" || res.Facts.Head != "0b7c6d2e-uid" {
		t.Errorf("result = %+v, want the Worktree's path and the pod's UID as head", res)
	}
	if other := render(nil); other.State.Terminated == nil || other.State.Terminated.Message != "" {
		t.Errorf("a pod without the Worktree's label: %+v, want ended with no message", other.State)
	}
}
