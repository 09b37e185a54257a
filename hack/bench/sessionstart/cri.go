package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container runtime knows when each step of a pod happened to the nanosecond: the sandbox's
// creation, each container's creation, start and end. The pod status rounds them to seconds, and
// a watch sees them only once the kubelet's PLEG noticed (a relist every second), so the
// breakdown reads them from containerd's CRI socket (the node is this machine), before the pod
// and its containers are removed.

type criReader struct {
	conn    *grpc.ClientConn
	runtime criv1.RuntimeServiceClient
}

func dialCRI(ctx context.Context, sock string) (*criReader, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial containerd at %s: %w", sock, err)
	}
	r := &criReader{conn: conn, runtime: criv1.NewRuntimeServiceClient(conn)}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.runtime.Version(vctx, &criv1.VersionRequest{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("containerd's CRI at %s: %w", sock, err)
	}
	return r, nil
}

func (r *criReader) Close() error { return r.conn.Close() }

// containerTimes is one container's life as the runtime recorded it.
type containerTimes struct {
	name                       string
	created, started, finished time.Time
}

// runtimeTimes are a pod's sandbox creation and its containers, init containers first, in order.
type runtimeTimes struct {
	sandbox    time.Time
	containers []containerTimes
}

func fromNanos(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// read reads the pod's sandbox and the containers its status names.
func (r *criReader) read(ctx context.Context, pod *corev1.Pod) (runtimeTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out runtimeTimes
	sandboxes, err := r.runtime.ListPodSandbox(ctx, &criv1.ListPodSandboxRequest{Filter: &criv1.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)},
	}})
	if err != nil {
		return out, fmt.Errorf("list sandboxes of %s: %w", pod.Name, err)
	}
	for _, s := range sandboxes.GetItems() {
		if t := fromNanos(s.GetCreatedAt()); out.sandbox.IsZero() || t.Before(out.sandbox) {
			out.sandbox = t
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, st := range statuses {
		id, ok := strings.CutPrefix(st.ContainerID, "containerd://")
		if !ok || id == "" {
			return out, fmt.Errorf("container %s of %s has no containerd ID (%q)", st.Name, pod.Name, st.ContainerID)
		}
		resp, err := r.runtime.ContainerStatus(ctx, &criv1.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return out, fmt.Errorf("status of container %s of %s: %w", st.Name, pod.Name, err)
		}
		s := resp.GetStatus()
		out.containers = append(out.containers, containerTimes{name: st.Name,
			created: fromNanos(s.GetCreatedAt()), started: fromNanos(s.GetStartedAt()), finished: fromNanos(s.GetFinishedAt())})
	}
	// In the order they started (the kubelet lists a pod's containers by name).
	slices.SortStableFunc(out.containers, func(a, b containerTimes) int { return a.started.Compare(b.started) })
	return out, nil
}
