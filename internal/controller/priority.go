package controller

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// progressPriority is the queue priority of a session's news that moves it along: its runner
// reported, its pod or its Worktree changed. A new session's first reconcile has the default
// priority (0), and the objects of the initial list at a (re)start the low one (-100): so a
// session one step from Working is reconciled before the first reconciles of thousands of newer
// ones, and a fan-out's sessions reach Working roughly in the order they were created rather
// than all at the end (docs/performance.md, "Work in order").
const progressPriority = 10

// prioritized enqueues what h enqueues at progressPriority, when the controller's queue is
// controller-runtime's priority queue (the default); with another queue it changes nothing.
func prioritized(h handler.EventHandler) handler.EventHandler {
	return prioritizedHandler{h: h, priority: progressPriority}
}

type prioritizedHandler struct {
	h        handler.EventHandler
	priority int
}

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (p prioritizedHandler) Create(ctx context.Context, e event.CreateEvent, q requestQueue) {
	p.h.Create(ctx, e, p.queue(q))
}

func (p prioritizedHandler) Update(ctx context.Context, e event.UpdateEvent, q requestQueue) {
	p.h.Update(ctx, e, p.queue(q))
}

func (p prioritizedHandler) Delete(ctx context.Context, e event.DeleteEvent, q requestQueue) {
	p.h.Delete(ctx, e, p.queue(q))
}

func (p prioritizedHandler) Generic(ctx context.Context, e event.GenericEvent, q requestQueue) {
	p.h.Generic(ctx, e, p.queue(q))
}

func (p prioritizedHandler) queue(q requestQueue) requestQueue {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	return withPriority{PriorityQueue: pq, priority: p.priority}
}

// withPriority adds at its priority unless the caller names one.
type withPriority struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	priority int
}

func (w withPriority) Add(item reconcile.Request) {
	w.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (w withPriority) AddAfter(item reconcile.Request, after time.Duration) {
	w.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (w withPriority) AddRateLimited(item reconcile.Request) {
	w.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (w withPriority) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil {
		p := w.priority
		o.Priority = &p
	}
	w.PriorityQueue.AddWithOpts(o, items...)
}
