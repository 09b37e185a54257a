package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func kwokNodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// kwokNode is a fake node: annotated for KWOK, and tainted so that only pods that tolerate the
// taint (scale tests) land on it, never the real workloads of the e2e suite.
func kwokNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		// Agent pods limit their ephemeral storage (8Gi by default), which is then their
		// request: a node without this capacity fits none of them.
		corev1.ResourceEphemeralStorage: resource.MustParse("2Ti"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      map[string]string{"type": cKwok, corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokNodeAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
		},
	}
}

// createKwokNodes creates the fake nodes in parallel: one at a time runs at ~8/s (facts file).
func createKwokNodes(ctx context.Context, cs kubernetes.Interface, n int) error {
	const workers = 16
	next := make(chan int)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				_, err := cs.CoreV1().Nodes().Create(ctx, kwokNode(kwokNodeName(i)), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("create %s: %w", kwokNodeName(i), err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func kwokNodesReady(ctx context.Context, cs kubernetes.Interface, n int) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return err
	}
	ready := 0
	for _, node := range nodes.Items {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < n {
		return fmt.Errorf("%d of %d KWOK nodes Ready", ready, n)
	}
	return nil
}
