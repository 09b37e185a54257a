package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-dev/shepherd/test/scenario"
)

// waitManager waits for the manager's Deployment to have a Ready replica.
func waitManager(ctx context.Context, cl client.Client) error {
	dep := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: scenario.ManagerNamespace, Name: "shepherd-manager"}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, key, dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return dep.Status.ReadyReplicas >= 1, nil
	})
	if err != nil {
		return fmt.Errorf("the manager (%s) has no Ready replica: %w", key, err)
	}
	return nil
}

// deleteNamespace deletes a namespace and waits until it is gone (scenario.DeleteNamespace).
func deleteNamespace(ctx context.Context, cl client.Client, name string) error {
	return scenario.DeleteNamespace(ctx, cl, name, 3*time.Minute)
}

// waitDefaultServiceAccount waits for the controller-manager to make the namespace's default
// ServiceAccount, which pods need.
func waitDefaultServiceAccount(ctx context.Context, cl client.Client, ns string) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, nil
	})
}

// podLogs saves the logs of every container of the namespace's pods while they run: Shepherd
// removes the agent pod when the session ends, and its logs with it.
type podLogs struct {
	cs        kubernetes.Interface
	namespace string
	dir       string
	out       *printer

	mu    sync.Mutex
	files map[string]bool
}

func (l *podLogs) run(ctx context.Context) {
	l.mu.Lock()
	l.files = map[string]bool{}
	l.mu.Unlock()
	for ctx.Err() == nil {
		pods, err := l.cs.CoreV1().Pods(l.namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range pods.Items {
				l.follow(ctx, &pods.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// follow starts streaming each container that has started and is not streamed yet.
func (l *podLogs) follow(ctx context.Context, pod *corev1.Pod) {
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, st := range statuses {
		if st.State.Running == nil && st.State.Terminated == nil {
			continue
		}
		name := fmt.Sprintf("%s.%s.log", pod.Name, st.Name)
		if st.RestartCount > 0 {
			name = fmt.Sprintf("%s.%s.%d.log", pod.Name, st.Name, st.RestartCount)
		}
		key := string(pod.UID) + "/" + name
		l.mu.Lock()
		seen := l.files[key]
		l.files[key] = true
		l.mu.Unlock()
		if seen {
			continue
		}
		go l.stream(ctx, pod.Name, st.Name, name)
	}
}

func (l *podLogs) stream(ctx context.Context, pod, container, name string) {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		l.out.line("(logs of %s/%s not saved: %v)", pod, container, err)
		return
	}
	// A second pod of the same name (a restored agent) appends to the same file.
	f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.out.line("(logs of %s/%s not saved: %v)", pod, container, err)
		return
	}
	defer func() { _ = f.Close() }()
	rc, err := l.cs.CoreV1().Pods(l.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		return // the pod went away first
	}
	defer func() { _ = rc.Close() }()
	_, _ = io.Copy(f, rc)
}

// count is the number of files saved.
func (l *podLogs) count() int {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return 0
	}
	return len(entries)
}
