package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/workspace"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

// TestEnqueueAfterCoalesces: a burst of session events becomes one Project reconcile, after the
// delay and not before.
func TestEnqueueAfterCoalesces(t *testing.T) {
	g := NewWithT(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	const delay = 200 * time.Millisecond
	h := enqueueAfter(func(types.NamespacedName) time.Duration { return delay }, func(o client.Object) types.NamespacedName {
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.(*agentsv1alpha1.AgentSession).Spec.ProjectRef.Name}
	})
	ctx := context.Background()
	start := time.Now()
	for i := range 100 {
		s := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}}
		s.Spec.ProjectRef.Name = "widgets"
		switch i % 3 {
		case 0:
			h.Create(ctx, event.CreateEvent{Object: s}, q)
		case 1:
			h.Update(ctx, event.UpdateEvent{ObjectOld: s, ObjectNew: s}, q)
		default:
			h.Delete(ctx, event.DeleteEvent{Object: s}, q)
		}
	}
	g.Expect(q.Len()).To(BeZero(), "nothing is ready before the delay")
	g.Eventually(q.Len).WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(1))
	g.Expect(time.Since(start)).To(BeNumerically(">=", delay))
	item, _ := q.Get()
	g.Expect(item.NamespacedName).To(Equal(types.NamespacedName{Namespace: "ns", Name: "widgets"}))
	q.Done(item)
	g.Consistently(q.Len).WithTimeout(3*delay).Should(BeZero(), "the burst was one request")

	// A session without a Project name enqueues nothing.
	h.Create(ctx, event.CreateEvent{Object: &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}}, q)
	g.Consistently(q.Len).WithTimeout(3 * delay).Should(BeZero())
}

// TestCountDelayGrowsWithTheProject: a Project's count waits its base delay up to a thousand
// sessions, then a millisecond per session (a count reads them all), up to 30 s; never below
// the base; the count it waits by is the Project's own last one.
func TestCountDelayGrowsWithTheProject(t *testing.T) {
	for _, tc := range []struct {
		base     time.Duration
		sessions int
		want     time.Duration
	}{
		{time.Second, 0, time.Second},
		{time.Second, 10, time.Second},
		{time.Second, 1000, time.Second},
		{time.Second, 5000, 5 * time.Second},
		{time.Second, 10_000, 10 * time.Second},
		{time.Second, 100_000, 30 * time.Second},
		{time.Minute, 100_000, time.Minute},
		{50 * time.Millisecond, 20, 50 * time.Millisecond},
		{50 * time.Millisecond, 200, 200 * time.Millisecond},
	} {
		if got := coalesceDelay(tc.base, tc.sessions); got != tc.want {
			t.Errorf("coalesceDelay(%s, %d) = %s, want %s", tc.base, tc.sessions, got, tc.want)
		}
	}

	r := &ProjectReconciler{Deps: &Deps{}}
	big, small := types.NamespacedName{Namespace: "a", Name: "fleet"}, types.NamespacedName{Namespace: "b", Name: "fleet"}
	if got := r.countDelay(big); got != time.Second {
		t.Errorf("a Project not counted yet waits the default: %s", got)
	}
	r.counted.Store(big, 8000)
	r.counted.Store(small, 3)
	if got := r.countDelay(big); got != 8*time.Second {
		t.Errorf("a Project of 8000 sessions waits 8s, got %s", got)
	}
	if got := r.countDelay(small); got != time.Second {
		t.Errorf("another namespace's Project of 3 waits its own 1s, got %s", got)
	}
	r.forget(big)
	if got := r.countDelay(big); got != time.Second {
		t.Errorf("a deleted Project's count is forgotten: %s", got)
	}
}

// TestWorktreeObservedTimeMovesOnChangeOrAfterAMinute: runners report every few seconds; the
// Worktree's lastObservedTime (a status write each time it moves) follows them only when the
// facts change or a minute has passed.
func TestWorktreeObservedTimeMovesOnChangeOrAfterAMinute(t *testing.T) {
	g := NewWithT(t)
	base := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	wt := MakeWorktree("feature", "ns", "widgets", "feature/x").Obj()
	prepared := checkoutResult{OK: true, Finished: base, Result: workspace.Result{Path: "/x", Facts: workspace.Facts{Head: "aaaa"}}}
	status := func(live *runnerapi.WorkspaceReport, at time.Time) *metav1.Time {
		s := wtScope(func(s *worktreeScope) { s.result, s.hasRes, s.live, s.liveAt = prepared, true, live, at })
		setWorktreeStatus(wt, s, nil)
		return wt.Status.LastObservedTime
	}
	g.Expect(status(nil, time.Time{}).Time).To(Equal(base), "the prepare's time")
	g.Expect(status(&runnerapi.WorkspaceReport{Head: "aaaa"}, base.Add(5*time.Second)).Time).To(Equal(base), "same facts, 5s later: unchanged")
	g.Expect(status(&runnerapi.WorkspaceReport{Head: "aaaa"}, base.Add(59*time.Second)).Time).To(Equal(base), "same facts, 59s later: unchanged")
	g.Expect(status(&runnerapi.WorkspaceReport{Head: "aaaa"}, base.Add(61*time.Second)).Time).To(Equal(base.Add(61*time.Second)), "a minute later: refreshed")
	g.Expect(status(&runnerapi.WorkspaceReport{Head: "aaaa", Dirty: true}, base.Add(65*time.Second)).Time).To(Equal(base.Add(65*time.Second)), "dirty: at once")
	g.Expect(wt.Status.Dirty).To(BeTrue())
	g.Expect(status(&runnerapi.WorkspaceReport{Head: "bbbb", Dirty: true}, base.Add(66*time.Second)).Time).To(Equal(base.Add(66*time.Second)), "a new head: at once")
	g.Expect(wt.Status.Head).To(Equal("bbbb"))
}

func TestAgentResourcesDefaultRequests(t *testing.T) {
	q := resource.MustParse
	// The default limits: memory and disk, so that a runaway agent is stopped before the node is.
	lim := func(extra corev1.ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{corev1.ResourceMemory: q("4Gi"), corev1.ResourceEphemeralStorage: q("8Gi")}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name string
		in   *agentsv1alpha1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"nothing asked: the defaults", nil, corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("512Mi")}, Limits: lim(nil)}},
		{"requests asked: kept", &agentsv1alpha1.ResourceRequirements{Requests: agentsv1alpha1.ResourceList{CPU: ptrTo(q("2")), Memory: ptrTo(q("4Gi"))}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("4Gi")}, Limits: lim(nil)}},
		{"a limit below the default: the request follows it", &agentsv1alpha1.ResourceRequirements{Limits: agentsv1alpha1.ResourceList{CPU: ptrTo(q("100m")), Memory: ptrTo(q("4Gi"))}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("512Mi")},
				Limits:   lim(corev1.ResourceList{corev1.ResourceCPU: q("100m")})}},
		{"one request asked: the other defaulted", &agentsv1alpha1.ResourceRequirements{Requests: agentsv1alpha1.ResourceList{Memory: ptrTo(q("1Gi"))}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("1Gi")}, Limits: lim(nil)}},
		{"a request above the default limit: the limit follows it", &agentsv1alpha1.ResourceRequirements{Requests: agentsv1alpha1.ResourceList{Memory: ptrTo(q("16Gi"))}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("16Gi")},
				Limits: lim(corev1.ResourceList{corev1.ResourceMemory: q("16Gi")})}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := agentResources(c.in)
			g := NewWithT(t)
			g.Expect(got.Requests).To(HaveLen(len(c.want.Requests)))
			for k, v := range c.want.Requests {
				have := got.Requests[k]
				g.Expect(have.Cmp(v)).To(BeZero(), "request %s: %s", k, have.String())
			}
			g.Expect(got.Limits).To(HaveLen(len(c.want.Limits)))
			for k, v := range c.want.Limits {
				have := got.Limits[k]
				g.Expect(have.Cmp(v)).To(BeZero(), "limit %s: %s", k, have.String())
			}
		})
	}
}
