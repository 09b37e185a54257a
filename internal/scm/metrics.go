package scm

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Request kinds and outcomes used as metric labels.
const (
	KindREST    = "rest"
	KindGraphQL = "graphql"

	OutcomeOK                = "ok"
	OutcomeNotModified       = "not_modified"
	OutcomeRateLimited       = "rate_limited"
	OutcomeSecondaryLimited  = "secondary_rate_limited"
	OutcomeUnauthorized      = "unauthorized"
	OutcomeNotFound          = "not_found"
	OutcomeClientError       = "client_error"
	OutcomeServerError       = "server_error"
	OutcomeNetworkError      = "network_error"
	OutcomeRefusedBeforeSend = "refused_before_send"
)

// Metrics counts what adapters, the Poller and the webhook handler do. Create one with
// NewMetrics and share it: the metric names are registered once.
type Metrics struct {
	// Requests counts every HTTP request by provider, kind (rest, graphql), operation and outcome.
	// A request refused locally because a limit is known to be exhausted is counted with outcome
	// refused_before_send and never reaches the forge.
	Requests *prometheus.CounterVec
	// GraphQLPoints counts GraphQL rate-limit points as the forge reported them (rateLimit.cost).
	GraphQLPoints *prometheus.CounterVec
	// NotModified counts REST requests answered 304 from the ETag cache (free on GitHub).
	NotModified *prometheus.CounterVec
	// RateLimitRemaining is the last remaining budget seen, by identity and resource.
	RateLimitRemaining *prometheus.GaugeVec
	// RateLimitWaits counts waits for a limit to reset, by reason (primary, secondary).
	RateLimitWaits *prometheus.CounterVec
	// RateLimitWaitSeconds sums the time spent waiting.
	RateLimitWaitSeconds *prometheus.CounterVec
	// WebhookDeliveries counts webhook deliveries by event and outcome (accepted, duplicate,
	// bad_signature, too_large, ignored, bad_request).
	WebhookDeliveries *prometheus.CounterVec
	// PollerItems is the number of pull requests and branches a Poller watches.
	PollerItems *prometheus.GaugeVec
	// PollerMaxAge is the age of the stalest watched item after the last poll, in seconds.
	PollerMaxAge *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them on reg (the manager passes
// controller-runtime's metrics.Registry). A nil reg registers nothing, for tests.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_requests_total",
			Help: "SCM API requests by provider, kind (rest, graphql), operation and outcome.",
		}, []string{"provider", "kind", "op", "outcome"}),
		GraphQLPoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_graphql_points_total",
			Help: "GraphQL rate-limit points spent, as reported by the forge.",
		}, []string{"provider", "identity", "op"}),
		NotModified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_rest_not_modified_total",
			Help: "REST requests answered 304 Not Modified (served from the ETag cache, free on GitHub).",
		}, []string{"provider", "op"}),
		RateLimitRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shepherd_scm_ratelimit_remaining",
			Help: "Remaining rate-limit budget last reported by the forge.",
		}, []string{"provider", "identity", "resource"}),
		RateLimitWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_ratelimit_waits_total",
			Help: "Times a request waited for a rate limit to reset, by reason (primary, secondary).",
		}, []string{"provider", "identity", "reason"}),
		RateLimitWaitSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_ratelimit_wait_seconds_total",
			Help: "Seconds spent waiting for rate limits to reset.",
		}, []string{"provider", "identity", "reason"}),
		WebhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shepherd_scm_webhook_deliveries_total",
			Help: "Webhook deliveries by event and outcome.",
		}, []string{"event", "outcome"}),
		PollerItems: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shepherd_scm_poller_items",
			Help: "Pull requests and branches watched by a poller.",
		}, []string{"provider", "identity"}),
		PollerMaxAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shepherd_scm_poller_max_age_seconds",
			Help: "Age of the stalest watched item after the last poll.",
		}, []string{"provider", "identity"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.Requests, m.GraphQLPoints, m.NotModified,
		m.RateLimitRemaining, m.RateLimitWaits, m.RateLimitWaitSeconds, m.WebhookDeliveries,
		m.PollerItems, m.PollerMaxAge} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register scm metrics: create Metrics once and share it: %w", err)
			}
			return nil, fmt.Errorf("register scm metrics: %w", err)
		}
	}
	return m, nil
}

// OutcomeOf is the outcome label of an HTTP answer a forge gave (rate limits and 304s are told
// apart by the adapters before they ask).
func OutcomeOf(status int) string {
	switch {
	case status < 400:
		return OutcomeOK
	case status == http.StatusUnauthorized:
		return OutcomeUnauthorized
	case status == http.StatusNotFound:
		return OutcomeNotFound
	case status >= 500:
		return OutcomeServerError
	}
	return OutcomeClientError
}
