package scm

import (
	"errors"
	"fmt"
	"time"

	"github.com/shepherd-dev/shepherd/internal/netguard"
)

// Sentinel errors name what went wrong independently of the forge. Adapters return errors that
// match them with errors.Is; the Project and AgentSession controllers map them to conditions.
var (
	// ErrTokenRejected: the forge refused the credentials (401, a revoked token, a bad App key).
	ErrTokenRejected = errors.New("credentials rejected")
	// ErrPermissionDenied: the credentials are valid but may not do this (403 without a rate
	// limit, a missing App permission).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrRepositoryNotFound: the repository does not exist or the credentials cannot see it
	// (forges answer 404 for both).
	ErrRepositoryNotFound = errors.New("repository not found")
	// ErrNotFound: a pull request or issue does not exist.
	ErrNotFound = errors.New("not found")
	// ErrRateLimited: a primary or secondary rate limit is exhausted; see RateLimitError.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnavailable: the forge could not be reached or answered 5xx; retry with back-off.
	ErrUnavailable = errors.New("forge unavailable")
	// ErrHeadChanged: a merge was refused because the head moved; see HeadChangedError.
	ErrHeadChanged = errors.New("head commit changed")
	// ErrNotMergeable: the forge refused to merge (conflicts, protection rules, a draft).
	ErrNotMergeable = errors.New("not mergeable")
	// ErrInvalid: the forge refused the request's content (422), for example a pull request for
	// a branch without commits.
	ErrInvalid = errors.New("invalid request")
	// ErrUnsupported: the provider does not offer the operation.
	ErrUnsupported = errors.New("unsupported by this provider")
)

// RateLimitError reports an exhausted rate limit. It matches ErrRateLimited.
type RateLimitError struct {
	// Resource is the forge's name of the budget ("core", "graphql").
	Resource string
	// Secondary is true for a secondary (abuse) limit.
	Secondary bool
	// Reset is when requests may be made again.
	Reset time.Time
}

func (e *RateLimitError) Error() string {
	kind := "primary"
	if e.Secondary {
		kind = "secondary"
	}
	return fmt.Sprintf("%s rate limit for %q exhausted until %s", kind, e.Resource, e.Reset.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// HeadChangedError reports a merge refused because the pull request's head is not the commit the
// caller approved. It matches ErrHeadChanged.
type HeadChangedError struct {
	Expected string
	// Actual is the head the forge reported, when it said.
	Actual string
}

func (e *HeadChangedError) Error() string {
	if e.Actual == "" {
		return fmt.Sprintf("head is no longer %s", e.Expected)
	}
	return fmt.Sprintf("head is %s, not the expected %s", e.Actual, e.Expected)
}

// Is makes errors.Is(err, ErrHeadChanged) true.
func (e *HeadChangedError) Is(target error) bool { return target == ErrHeadChanged }

// APIError is a forge's refusal: the kind (one of the sentinels), the HTTP status and the forge's
// message. It matches its Kind with errors.Is.
type APIError struct {
	Kind    error
	Status  int
	Message string
	// Err is the underlying error (the HTTP client's, the library's), if any.
	Err error
}

func (e *APIError) Error() string {
	msg := e.Kind.Error()
	if e.Status != 0 {
		msg = fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	// A refused outbound address is a configuration to fix, not an outage: say which.
	var denied *netguard.DeniedError
	if errors.As(e.Err, &denied) {
		msg += ": " + denied.Error()
	}
	return msg
}

// Unwrap exposes both the kind and the cause.
func (e *APIError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Retryable reports whether an error is transient: a rate limit or an unavailable forge. Other
// errors need a change (credentials, configuration, the pull request) before a retry can help.
func Retryable(err error) bool {
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable)
}

// RetryAfter returns when a rate-limited operation may be retried, or the zero time.
func RetryAfter(err error) time.Time {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return rl.Reset
	}
	return time.Time{}
}
