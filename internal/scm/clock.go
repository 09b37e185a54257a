package scm

import (
	"context"
	"time"
)

// Clock is the time source of adapters and the Poller. Tests and the benchmark inject a
// simulated clock so that rate-limit waits and poll intervals cost no real time.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx is done.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// OrReal returns c, or the real clock when c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return RealClock{}
	}
	return c
}
