package main

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// podTimes is when this process first saw a pod, saw it bound to a node, and saw its (first)
// container running, from a watch. The kubelet reports container changes when its PLEG notices
// them (a relist every second), so the container times come from the runtime instead (cri.go);
// running only says when to read them.
type podTimes struct {
	name, uid string
	labels    map[string]string
	created   time.Time
	scheduled time.Time
	running   time.Time
	// last is the pod as last seen.
	last *corev1.Pod
}

// podWatch records podTimes for every pod of a namespace.
type podWatch struct {
	mu      sync.Mutex
	pods    map[string]*podTimes // by UID
	changed chan struct{}
}

func watchPods(ctx context.Context, cs kubernetes.Interface, namespace string) *podWatch {
	w := &podWatch{pods: map[string]*podTimes{}, changed: make(chan struct{})}
	go w.run(ctx, cs, namespace)
	return w
}

func (w *podWatch) run(ctx context.Context, cs kubernetes.Interface, namespace string) {
	for ctx.Err() == nil {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		for i := range list.Items {
			w.observe(&list.Items[i])
		}
		wi, err := cs.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				break // relist (the resource version expired)
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted {
				w.observe(p)
			}
		}
		wi.Stop()
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *podWatch) observe(p *corev1.Pod) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.pods[string(p.UID)]
	if t == nil {
		t = &podTimes{name: p.Name, uid: string(p.UID), labels: p.Labels, created: now}
		w.pods[string(p.UID)] = t
	}
	t.last = p.DeepCopy()
	if t.scheduled.IsZero() && p.Spec.NodeName != "" {
		t.scheduled = now
	}
	if len(p.Status.ContainerStatuses) > 0 && t.running.IsZero() {
		if st := p.Status.ContainerStatuses[0]; st.State.Running != nil || st.State.Terminated != nil {
			t.running = now
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// find returns a copy of the times of the pod that match, the newest first seen; ok is false
// when none was seen.
func (w *podWatch) find(match func(*podTimes) bool) (podTimes, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best *podTimes
	for _, t := range w.pods {
		if match(t) && (best == nil || t.created.After(best.created)) {
			best = t
		}
	}
	if best == nil {
		return podTimes{}, false
	}
	return *best, true
}

// waitFor waits until cond holds for a pod that match selects, or ctx ends.
func (w *podWatch) waitFor(ctx context.Context, match func(*podTimes) bool, cond func(podTimes) bool) (podTimes, error) {
	for {
		w.mu.Lock()
		changed := w.changed
		w.mu.Unlock()
		if t, ok := w.find(match); ok && cond(t) {
			return t, nil
		}
		select {
		case <-ctx.Done():
			t, _ := w.find(match)
			return t, ctx.Err()
		case <-changed:
		}
	}
}

func byName(name string) func(*podTimes) bool {
	return func(t *podTimes) bool { return t.name == name }
}
