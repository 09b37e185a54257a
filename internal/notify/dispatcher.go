package notify

import (
	"context"
	"sync"
)

// Job is one notification for one route.
type Job struct {
	// Key identifies the job for de-duplication, e.g. namespace/session/notification-id/route.
	Key string
	// Route is the notification route's name, for status and metrics.
	Route string
	// Sender delivers to the route's destination.
	Sender       Sender
	Notification Notification
}

// Result is the outcome of a job: Err is nil on delivery, or a *PermanentError, a *GiveUpError,
// or a context error when the manager is stopping.
type Result struct {
	Job Job
	Err error
}

// Dispatcher delivers jobs in the background with a few workers, so that a slow receiver never
// blocks a reconcile. It implements controller-runtime's manager.Runnable.
type Dispatcher struct {
	Policy  Policy
	Sleep   Sleeper
	Workers int
	// OnResult is called once per job, from a worker goroutine.
	OnResult func(Result)

	once     sync.Once
	queue    chan Job
	mu       sync.Mutex
	inflight map[string]struct{}
}

// NewDispatcher returns a dispatcher with a queue of capacity jobs.
func NewDispatcher(workers, capacity int, policy Policy, onResult func(Result)) *Dispatcher {
	d := &Dispatcher{Policy: policy, Workers: workers, OnResult: onResult}
	d.init(capacity)
	return d
}

func (d *Dispatcher) init(capacity int) {
	d.once.Do(func() {
		d.queue = make(chan Job, capacity)
		d.inflight = map[string]struct{}{}
	})
}

// Enqueue queues j unless a job with the same key is queued or in flight. It reports false when
// the job was not queued (duplicate, or the queue is full: the caller retries on a later
// reconcile, since undelivered notifications stay in status).
func (d *Dispatcher) Enqueue(j Job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.inflight[j.Key]; ok {
		return false
	}
	select {
	case d.queue <- j:
		d.inflight[j.Key] = struct{}{}
		return true
	default:
		return false
	}
}

// Pending reports whether a job with key is queued or in flight.
func (d *Dispatcher) Pending(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.inflight[key]
	return ok
}

// Start runs the workers until ctx ends.
func (d *Dispatcher) Start(ctx context.Context) error {
	workers := max(d.Workers, 1)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-d.queue:
					err := Deliver(ctx, j.Sender, j.Notification, d.Policy, d.Sleep)
					d.mu.Lock()
					delete(d.inflight, j.Key)
					d.mu.Unlock()
					if d.OnResult != nil {
						d.OnResult(Result{Job: j, Err: err})
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection: only the leader delivers, so two replicas never both send.
func (d *Dispatcher) NeedLeaderElection() bool { return true }
