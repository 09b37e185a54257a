package scmtest

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestManualClockSleepsUntilMoved(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewManualClock(start)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, 10*time.Second) }()
	if err := c.WaitSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(9 * time.Second)
	if c.Sleepers() != 1 {
		t.Fatalf("woke before its time: %d sleepers", c.Sleepers())
	}
	c.Set(start.Add(10 * time.Second))
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if c.Sleepers() != 0 || !c.Now().Equal(start.Add(10*time.Second)) {
		t.Fatalf("after waking: %d sleepers at %s", c.Sleepers(), c.Now())
	}
}

func TestManualClockSleepEndsWithItsContext(t *testing.T) {
	c := NewManualClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Sleep(ctx, time.Hour) }()
	if err := c.WaitSleepers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel: %v", err)
	}
	if c.Sleepers() != 0 {
		t.Fatalf("a cancelled sleeper is still counted")
	}
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("a zero sleep returns at once: %v", err)
	}
}
