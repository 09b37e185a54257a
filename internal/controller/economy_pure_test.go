package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// TestEnqueueAfterCoalesces: a burst of session events becomes one Project reconcile, after the
// delay and not before.
func TestEnqueueAfterCoalesces(t *testing.T) {
	g := NewWithT(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	const delay = 200 * time.Millisecond
	h := enqueueAfter(delay, func(o client.Object) types.NamespacedName {
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
