package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Transition is a phase the session entered, when this process saw it.
type Transition struct {
	Phase agentsv1alpha1.SessionPhase
	At    time.Time
	// Session is the object that carried the new phase.
	Session *agentsv1alpha1.AgentSession
}

// PhaseLog records every phase a session passes through, from a watch: each status write is an
// event, so even a phase that lasts a fraction of a second is seen.
type PhaseLog struct {
	key   client.ObjectKey
	start time.Time
	on    func(t Transition, prev *Transition)

	mu      sync.Mutex
	ts      []Transition
	latest  *agentsv1alpha1.AgentSession
	changed chan struct{}
}

// WatchPhases watches the session (which need not exist yet) until ctx ends. on, when set, is
// called for each new phase, with the one before (nil for the first).
func WatchPhases(ctx context.Context, cl client.WithWatch, key client.ObjectKey, on func(t Transition, prev *Transition)) *PhaseLog {
	l := &PhaseLog{key: key, start: time.Now(), on: on, changed: make(chan struct{})}
	go l.run(ctx, cl)
	return l
}

// Start is when the watch started.
func (l *PhaseLog) Start() time.Time { return l.start }

func (l *PhaseLog) run(ctx context.Context, cl client.WithWatch) {
	sel := fields.OneTermEqualSelector("metadata.name", l.key.Name)
	for ctx.Err() == nil {
		var list agentsv1alpha1.AgentSessionList
		if err := cl.List(ctx, &list, &client.ListOptions{Namespace: l.key.Namespace, FieldSelector: sel}); err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for i := range list.Items {
			l.observe(&list.Items[i])
		}
		w, err := cl.Watch(ctx, &agentsv1alpha1.AgentSessionList{}, &client.ListOptions{Namespace: l.key.Namespace, FieldSelector: sel,
			Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*agentsv1alpha1.AgentSession); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				l.observe(s)
			}
			if ev.Type == watch.Error {
				break // relist (the resource version expired)
			}
		}
		w.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l *PhaseLog) observe(s *agentsv1alpha1.AgentSession) {
	l.mu.Lock()
	l.latest = s.DeepCopy()
	n := len(l.ts)
	if s.Status.Phase == "" || (n > 0 && l.ts[n-1].Phase == s.Status.Phase) {
		l.mu.Unlock()
		return
	}
	t := Transition{Phase: s.Status.Phase, At: time.Now(), Session: s.DeepCopy()}
	var prev *Transition
	if n > 0 {
		p := l.ts[n-1]
		prev = &p
	}
	l.ts = append(l.ts, t)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	if l.on != nil {
		l.on(t, prev)
	}
}

// Transitions returns the phases seen so far.
func (l *PhaseLog) Transitions() []Transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ts)
}

// Phases returns the phases seen so far, in order.
func (l *PhaseLog) Phases() []agentsv1alpha1.SessionPhase {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]agentsv1alpha1.SessionPhase, 0, len(l.ts))
	for _, t := range l.ts {
		out = append(out, t.Phase)
	}
	return out
}

// Latest is the session as last seen (nil before it exists).
func (l *PhaseLog) Latest() *agentsv1alpha1.AgentSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest == nil {
		return nil
	}
	return l.latest.DeepCopy()
}

// Len is the number of phases seen so far: a mark for WaitFor.
func (l *PhaseLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ts)
}

// ErroredError is returned by WaitFor when the session reached Errored.
type ErroredError struct {
	Session *agentsv1alpha1.AgentSession
	Phases  string
}

func (e *ErroredError) Error() string {
	var conds []string
	for _, c := range e.Session.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("session %s/%s Errored: %s\nphases:\n%s", e.Session.Namespace, e.Session.Name, strings.Join(conds, "; "), e.Phases)
}

// WaitFor waits, at most timeout, for a phase among want that the session entered at or after
// the mark from (a Len taken before the action that should cause it). Errored ends the wait.
func (l *PhaseLog) WaitFor(ctx context.Context, from int, timeout time.Duration, want ...agentsv1alpha1.SessionPhase) (Transition, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, t := range l.ts[min(from, len(l.ts)):] {
			if t.Phase == agentsv1alpha1.PhaseErrored {
				l.mu.Unlock()
				return t, &ErroredError{Session: t.Session, Phases: l.String()}
			}
			if slices.Contains(want, t.Phase) {
				l.mu.Unlock()
				return t, nil
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return Transition{}, ctx.Err()
		case <-deadline.C:
			return Transition{}, fmt.Errorf("session %s did not reach %v within %s; phases:\n%s", l.key, want, timeout, l.String())
		}
	}
}

// String lists the phases with the time each was entered (since the watch started) and how
// long it lasted.
func (l *PhaseLog) String() string {
	ts := l.Transitions()
	var b strings.Builder
	for i, t := range ts {
		lasted := ""
		if i+1 < len(ts) {
			lasted = fmt.Sprintf("  lasted %5.1fs", ts[i+1].At.Sub(t.At).Seconds())
		}
		fmt.Fprintf(&b, "  %-16s at %6.1fs%s\n", t.Phase, t.At.Sub(l.start).Seconds(), lasted)
	}
	return b.String()
}
