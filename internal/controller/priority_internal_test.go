package controller

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// TestProgressGoesFirst: with controller-runtime's priority queue, a session's progress (its
// runner's report) is handed out before the first reconciles of the sessions created before it,
// and a queue of another kind is left as it is.
func TestProgressGoesFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	sess := func(name string) *agentsv1alpha1.AgentSession {
		return &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	plain := &handler.EnqueueRequestForObject{}
	for i := range 100 {
		plain.Create(ctx, event.CreateEvent{Object: sess(fmt.Sprintf("new-%03d", i))}, q)
	}
	prioritized(&handler.EnqueueRequestForObject{}).Generic(ctx, event.GenericEvent{Object: sess("reported")}, q)
	item, _, _ := q.GetWithPriority()
	if item.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: "reported"}) {
		t.Fatalf("the first item handed out is %v, not the session that reported", item)
	}
	next, _, _ := q.GetWithPriority()
	if next.Name != "new-000" {
		t.Fatalf("then the oldest create: %v", next)
	}
}
