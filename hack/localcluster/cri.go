package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient talks to containerd's CRI plugin over its socket in the run directory.
type criClient struct {
	conn    *grpc.ClientConn
	runtime criv1.RuntimeServiceClient
}

func dialCRI(sock string) (*criClient, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial containerd at %s: %w", sock, err)
	}
	return &criClient{conn: conn, runtime: criv1.NewRuntimeServiceClient(conn)}, nil
}

func (c *criClient) Close() error { return c.conn.Close() }

// version is containerd's readiness probe: the CRI plugin answers only once it is loaded.
func (c *criClient) version(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.runtime.Version(ctx, &criv1.VersionRequest{})
	return err
}

// removeAllPods stops and removes every pod sandbox and container. Stopping a sandbox through
// CRI (not by killing its processes) runs the CNI DEL: the pod's veth, its IP in host-local, its
// /run/netns/cni-* mount and its iptables chains go with it.
func (c *criClient) removeAllPods(ctx context.Context) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := c.runtime.ListPodSandbox(lctx, &criv1.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, p := range pods.GetItems() {
		pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
		if _, err := c.runtime.StopPodSandbox(pctx, &criv1.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod %s/%s: %w", p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), err))
		} else if _, err := c.runtime.RemovePodSandbox(pctx, &criv1.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s/%s: %w", p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), err))
		}
		pcancel()
	}
	// Containers whose sandbox is already gone (none normally).
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if ctrs, err := c.runtime.ListContainers(cctx, &criv1.ListContainersRequest{}); err == nil {
		for _, ct := range ctrs.GetContainers() {
			if _, err := c.runtime.RemoveContainer(cctx, &criv1.RemoveContainerRequest{ContainerId: ct.GetId()}); err != nil {
				errs = append(errs, fmt.Errorf("remove container %s: %w", ct.GetId(), err))
			}
		}
	}
	return len(pods.GetItems()), errors.Join(errs...)
}

// imageID is the ID (config digest) of the image ref in containerd's CRI namespace, or "" when
// it has no such image.
func (c *criClient) imageID(ctx context.Context, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := criv1.NewImageServiceClient(c.conn).ImageStatus(ctx, &criv1.ImageStatusRequest{Image: &criv1.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("image status of %s: %w", ref, err)
	}
	return resp.GetImage().GetId(), nil
}
