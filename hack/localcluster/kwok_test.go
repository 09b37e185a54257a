package main

import (
	"context"
	"strings"
	"testing"
)

// TestKWOKEndsTheCheckoutStep: under KWOK's pod-ready stage a pod's containers run; Shepherd's
// checkout step (a container named prepare beside the agent's) ends instead, as a kubelet would
// report it, so that a session on a KWOK node can reach Working (bench-fanout) as it did when
// the step was an init container, which the stage already ends.
func TestKWOKEndsTheCheckoutStep(t *testing.T) {
	dir, err := moduleDir(context.Background(), kwokModule)
	if err != nil {
		t.Fatalf("KWOK's module: %v", err)
	}
	cfg, err := kwokConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg, `{{ if eq .name "prepare" }}`) || strings.Count(cfg, "reason: Completed") < 2 {
		t.Fatalf("the pod-ready stage does not end the checkout step:\n%s", cfg)
	}
	if strings.Contains(cfg, kwokRunning) {
		t.Fatal("the stage still runs every container")
	}
}
