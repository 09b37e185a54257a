// Package notify delivers Shepherd's notifications to humans: signed JSON webhooks and Slack
// incoming webhooks, routed by priority. Kubernetes Events are emitted by the controllers
// themselves; this package covers the destinations outside the cluster.
//
// Delivery is at least once: the controller keeps undelivered notifications in the session's
// status, so a manager restart re-sends them, and every attempt carries the same delivery id
// (X-Shepherd-Delivery) for receivers to drop duplicates.
package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Notification is one thing a human may want to know.
type Notification struct {
	// ID is stable across retries and restarts: receivers deduplicate on it.
	ID string `json:"id"`
	// Type is the event, from the lifecycle vocabulary ("ci.failing", "merge.completed", ...).
	Type string `json:"type"`
	// Priority is urgent, action, warning or info.
	Priority agentsv1alpha1.Priority `json:"priority"`
	// Reason is the Kubernetes condition/event reason.
	Reason string `json:"reason,omitempty"`
	// Message is the human-readable text.
	Message string `json:"message"`
	// Namespace, Session and Project name the objects concerned.
	Namespace string `json:"namespace"`
	Session   string `json:"session,omitempty"`
	Project   string `json:"project,omitempty"`
	// PullRequestURL links the session's pull request, when there is one.
	PullRequestURL string `json:"pullRequestURL,omitempty"`
	// DashboardURL links the session's dashboard page (through `kubectl shepherd dashboard`, or
	// wherever the manager's --dashboard-url says people reach it).
	DashboardURL string `json:"dashboardURL,omitempty"`
	// Time is when the event happened.
	Time time.Time `json:"time"`
}

// Sender makes one delivery attempt.
type Sender interface {
	Send(ctx context.Context, n Notification) error
}

// PermanentError is a refusal that retrying cannot fix (a 4xx other than 408 and 429).
type PermanentError struct {
	Status int
	Body   string
}

func (e *PermanentError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("refused with HTTP %d", e.Status)
	}
	return fmt.Sprintf("refused with HTTP %d: %s", e.Status, e.Body)
}

// RetryAfterError asks the caller to wait before the next attempt (429 or 503 with Retry-After).
type RetryAfterError struct {
	Status int
	After  time.Duration
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("HTTP %d, retry after %s", e.Status, e.After)
}

// GiveUpError reports a notification abandoned after the retry policy ran out.
type GiveUpError struct {
	Attempts int
	Last     error
}

func (e *GiveUpError) Error() string {
	return fmt.Sprintf("gave up after %d attempts: %v", e.Attempts, e.Last)
}

func (e *GiveUpError) Unwrap() error { return e.Last }

// Policy bounds retries.
type Policy struct {
	// MaxAttempts is the most attempts per notification.
	MaxAttempts int
	// InitialBackoff doubles after each failure, up to MaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// MaxRetryAfter caps a receiver's Retry-After: a longer wait counts as a failure to deliver.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds one attempt.
	AttemptTimeout time.Duration
}

// DefaultPolicy: 5 attempts over about 15 seconds of back-off, Retry-After honoured up to 1m.
var DefaultPolicy = Policy{
	MaxAttempts:    5,
	InitialBackoff: time.Second,
	MaxBackoff:     8 * time.Second,
	MaxRetryAfter:  time.Minute,
	AttemptTimeout: 10 * time.Second,
}

// Sleeper waits for d or until ctx ends. Tests inject one that records instead of sleeping.
type Sleeper func(ctx context.Context, d time.Duration) error

// RealSleep is the Sleeper that really sleeps.
func RealSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Deliver sends n through s, retrying transient failures with exponential back-off and honouring
// Retry-After. It returns nil, a *PermanentError, a *GiveUpError, or the context's error.
func Deliver(ctx context.Context, s Sender, n Notification, p Policy, sleep Sleeper) error {
	if sleep == nil {
		sleep = RealSleep
	}
	backoff := p.InitialBackoff
	var last error
	for attempt := 1; attempt <= p.MaxAttempts; attempt++ {
		actx, cancel := context.WithTimeout(ctx, p.AttemptTimeout)
		err := s.Send(actx, n)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		var perm *PermanentError
		if errors.As(err, &perm) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt == p.MaxAttempts {
			break
		}
		wait := backoff
		var ra *RetryAfterError
		if errors.As(err, &ra) {
			if ra.After > p.MaxRetryAfter {
				return &GiveUpError{Attempts: attempt, Last: err}
			}
			wait = max(ra.After, wait)
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		backoff = min(backoff*2, p.MaxBackoff)
	}
	return &GiveUpError{Attempts: p.MaxAttempts, Last: last}
}

// classify turns an HTTP answer into nil or the right error type.
func classify(resp *http.Response, body string, now time.Time) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			return &RetryAfterError{Status: resp.StatusCode, After: d}
		}
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 &&
		resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
		return &PermanentError{Status: resp.StatusCode, Body: errorCode(body)}
	}
	return fmt.Errorf("HTTP %d", resp.StatusCode)
}

// errorCode keeps of a refusal's body only an error code such as Slack's channel_is_archived:
// a short word of lower-case letters, digits and underscores. Anything else is dropped, so that
// a notification URL aimed at an internal service cannot read that service's answers back
// through the Project's status.
func errorCode(body string) string {
	body = strings.TrimSpace(body)
	if body == "" || len(body) > 64 {
		return ""
	}
	for _, r := range body {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return ""
		}
	}
	return body
}

// parseRetryAfter reads delay-seconds or an HTTP date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Select returns the routes that receive priority p, in spec order.
func Select(routes []agentsv1alpha1.NotificationRoute, p agentsv1alpha1.Priority) []agentsv1alpha1.NotificationRoute {
	var out []agentsv1alpha1.NotificationRoute
	for _, r := range routes {
		for _, rp := range r.Priorities {
			if rp == p {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
