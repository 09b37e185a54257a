package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// runners simulates the runner of every agent pod that KWOK marks running: the kubelet's
// TokenRequest for the projected token (audience shepherd-runner, bound to the pod), then what
// the runner sends first: GET task, the prepare report with the workspace facts, the run's first
// Active report. The facts repeat what the local cluster's KWOK stage wrote as the checkout
// step's result (the pod's UID stands for the head: KWOK checks out nothing), as a real runner's
// repeat its checkout step's.
type runners struct {
	cs        kubernetes.Interface
	url       string
	tokenDir  string
	queue     chan *corev1.Pod
	seen      sync.Map // pod UID → struct{}
	started   atomic.Int64
	failures  atomic.Int64
	lastError atomic.Value // string

	mu sync.Mutex
	// seenAt and doneAt: by session, when its pod was first seen running and when its runner's
	// reports were accepted.
	seenAt, doneAt map[string]time.Time
}

func (r *runners) record(m map[string]time.Time, session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := m[session]; !ok {
		m[session] = time.Now()
	}
}

// times returns when session's pod was seen running and when its reports were accepted.
func (r *runners) times(session string) (seen, done time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seenAt[session], r.doneAt[session]
}

func startRunners(ctx context.Context, cs kubernetes.Interface, namespace, url, tokenDir string, workers int) (*runners, error) {
	if err := os.MkdirAll(tokenDir, 0o700); err != nil {
		return nil, err
	}
	r := &runners{cs: cs, url: url, tokenDir: tokenDir, queue: make(chan *corev1.Pod, 100000),
		seenAt: map[string]time.Time{}, doneAt: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = agentsv1alpha1.LabelComponent + "=agent"
		}))
	inf := f.Core().V1().Pods().Informer()
	offer := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			return
		}
		if _, dup := r.seen.LoadOrStore(pod.UID, struct{}{}); !dup {
			r.record(r.seenAt, pod.Labels[agentsv1alpha1.LabelSession])
			r.queue <- pod
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    offer,
		UpdateFunc: func(_, obj any) { offer(obj) },
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	for range workers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case pod := <-r.queue:
					if err := r.start(ctx, pod); err != nil && ctx.Err() == nil {
						r.failures.Add(1)
						r.lastError.Store(fmt.Sprintf("%s: %v", pod.Name, err))
					}
				}
			}
		}()
	}
	return r, nil
}

func (r *runners) lastErr() string {
	s, _ := r.lastError.Load().(string)
	return s
}

// start plays one pod's kubelet and runner.
func (r *runners) start(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	tr, err := r.cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{runnerapi.Audience},
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token request: %w", err)
	}
	file := filepath.Join(r.tokenDir, string(pod.UID))
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	defer os.Remove(file)
	cl, err := runnerapi.NewClient(r.url, file, "")
	if err != nil {
		return err
	}
	var task *runnerapi.Task
	if err := retry(ctx, func() (err error) { task, err = cl.Task(ctx); return err }); err != nil {
		return fmt.Errorf("task: %w", err)
	}
	wt := pod.Labels[agentsv1alpha1.LabelWorktree]
	now := time.Now().UTC()
	reports := []runnerapi.Report{
		{Sequence: task.LastSequence + 1, Time: now, Workspace: &runnerapi.WorkspaceReport{
			Path: "/shepherd/workspace/worktrees/" + wt, Branch: task.Branch, Head: string(pod.UID),
		}},
		{Sequence: task.LastSequence + 2, Time: now, Activity: &runnerapi.ActivityReport{State: agentsv1alpha1.ActivityActive, LastActivityTime: now}},
	}
	for _, rep := range reports {
		if err := retry(ctx, func() error { return cl.Report(ctx, rep) }); err != nil {
			return fmt.Errorf("report %d: %w", rep.Sequence, err)
		}
	}
	r.record(r.doneAt, pod.Labels[agentsv1alpha1.LabelSession])
	r.started.Add(1)
	return nil
}

// retry calls f until it succeeds, the error is final, or ctx ends. A 403 right after the pod
// starts is retried too: the manager may not have the pod in its cache yet.
func retry(ctx context.Context, f func() error) error {
	delay := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !runnerapi.Retryable(err) && !runnerapi.IsStatus(err, 403) && !runnerapi.IsStatus(err, 404) {
			var apiErr *runnerapi.APIError
			if errors.As(err, &apiErr) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
