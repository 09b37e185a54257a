package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The metrics endpoint's reviews: a Prometheus scrapes every 15 to 60 s and its token's review is
// cached for a minute, so a few per second is plenty; past metricsInFlight requests at once the
// answer is 429 rather than a queue.
const (
	metricsReviewQPS   = 5
	metricsReviewBurst = 10
	metricsInFlight    = 8
	metricsReviewTTL   = time.Minute
)

// metricsAuth is the secure metrics endpoint's filter, controller-runtime's
// filters.WithAuthenticationAndAuthorization with three changes an outsider needs:
//   - the reviews run on a client and a rate limiter of their own, so scrapes with made-up tokens
//     cannot spend the reconcilers' share of the API server;
//   - a token the API server does not accept is 401 and a V(1) log line (controller-runtime
//     answers 500 and logs an error for each, so a flood of made-up tokens floods the log);
//   - at most metricsInFlight requests are in the filter at once; the rest are answered 429.
//
// Authentication is a TokenReview of the bearer token (cached for a minute), authorisation a
// SubjectAccessReview for GET /metrics: the metrics-reader ClusterRole (docs/metrics.md).
func metricsAuth(c *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
	cfg := rest.CopyConfig(c)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = metricsReviewQPS, metricsReviewBurst, nil
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics review client: %w", err)
	}
	authn, err := authenticationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	// The retry back-off of k8s.io/apiserver's options.DefaultAuthWebhookRetryBackoff, as
	// controller-runtime uses.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 metricsReviewTTL,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	authorizerFor, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization: %w", err)
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return limitInFlight(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, ok, err := authenticator.AuthenticateRequest(r)
			if !ok {
				// A made-up token comes back as an error from the review ("invalid bearer token"):
				// both are the client's, not the endpoint's.
				log.V(1).Info("Metrics request not authenticated", "remote", r.RemoteAddr, "reason", errString(err))
				http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
				return
			}
			attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
			decision, reason, err := authorizerFor.Authorize(r.Context(), attrs)
			switch {
			case err != nil:
				log.Error(err, "Metrics authorization failed", "user", res.User.GetName())
				http.Error(w, "authorization failed", http.StatusInternalServerError)
			case decision != authorizer.DecisionAllow:
				log.V(1).Info("Metrics request forbidden", "user", res.User.GetName(), "reason", reason)
				http.Error(w, fmt.Sprintf("Forbidden: %s may not get %s (bind it to the metrics-reader ClusterRole)", res.User.GetName(), r.URL.Path), http.StatusForbidden)
			default:
				next.ServeHTTP(w, r)
			}
		}), metricsInFlight), nil
	}, nil
}

func errString(err error) string {
	if err == nil {
		return "no bearer token"
	}
	return err.Error()
}

// limitInFlight answers 429 to a request that finds n others already being served.
func limitInFlight(next http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many metrics requests at once", http.StatusTooManyRequests)
		}
	})
}
