package scmtest

import (
	"context"
	"sync"
	"time"
)

// ManualClock is a simulated clock that moves only when told. Unlike Clock, whose Sleep advances
// time itself, a Sleep here blocks until a driver has moved the clock past its end (or its
// context ends), so that goroutines waiting on their own schedule (a Poller's Start loop inside a
// manager) follow simulated time. The driver steps time with Set or Advance and learns that the
// sleepers are idle again with WaitSleepers.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*manualWaiter]struct{}
	// changed is closed (and replaced) whenever the set of sleepers changes.
	changed chan struct{}
}

type manualWaiter struct {
	until time.Time
	done  chan struct{}
}

// NewManualClock starts at t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{now: t, waiters: map[*manualWaiter]struct{}{}, changed: make(chan struct{})}
}

// Now returns the simulated time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep blocks until the clock has moved d past now, or ctx ends.
func (c *ManualClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c.mu.Lock()
	w := &manualWaiter{until: c.now.Add(d), done: make(chan struct{})}
	c.waiters[w] = struct{}{}
	c.changedLocked()
	c.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if _, ok := c.waiters[w]; ok {
			delete(c.waiters, w)
			c.changedLocked()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Set moves the clock to t and wakes the sleepers whose end has come.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	woke := false
	for w := range c.waiters {
		if !w.until.After(t) {
			close(w.done)
			delete(c.waiters, w)
			woke = true
		}
	}
	if woke {
		c.changedLocked()
	}
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Sleepers is the number of goroutines blocked in Sleep.
func (c *ManualClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitSleepers blocks until at least n goroutines are blocked in Sleep, or ctx ends.
func (c *ManualClock) WaitSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.waiters) >= n {
			c.mu.Unlock()
			return nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *ManualClock) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
