package ui

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The API server publishes how it vouches for users to aggregated APIs in this ConfigMap: the
// CA of its front-proxy client certificate, the names that certificate may have, and the
// headers that carry the user (kube-apiserver's --requestheader-* flags).
const (
	AuthConfigMapNamespace = "kube-system"
	AuthConfigMapName      = "extension-apiserver-authentication"
)

// Review pacing: every page and stream is one authentication (the front-proxy certificate,
// no API call) and one or a few SubjectAccessReviews, cached briefly so that a revoked
// permission stops working within seconds, not minutes.
const (
	reviewQPS      = 20
	reviewBurst    = 50
	allowCacheTTL  = 10 * time.Second
	denyCacheTTL   = 10 * time.Second
	tokenReviewTTL = time.Minute
)

// Delegated is who a request is from and what they may do, as the API server says.
type Delegated struct {
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// Run keeps the front-proxy headers current (the ConfigMap is watched) until ctx ends; the
	// front-proxy CA is watched from NewDelegated on, until its ctx ends.
	Run func(ctx context.Context)
}

// NewDelegated reads the API server's front-proxy settings and builds the authenticator (the
// front proxy's mutual TLS and headers; a bearer token through TokenReview for a caller that
// comes straight to the Service) and the authorizer (SubjectAccessReview), on a client and a
// rate of their own.
func NewDelegated(ctx context.Context, c *rest.Config) (*Delegated, error) {
	cfg := rest.CopyConfig(c)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = reviewQPS, reviewBurst, nil
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("ui review client: %w", err)
	}
	// As k8s.io/apiserver's DelegatingAuthenticationOptions does: the front proxy's CA and its
	// headers, each from the ConfigMap, watched.
	frontCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("front-proxy-ca", AuthConfigMapNamespace, AuthConfigMapName,
		"requestheader-client-ca-file", kube)
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	front := headerrequest.NewRequestHeaderAuthRequestController(AuthConfigMapName, AuthConfigMapNamespace, kube,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers",
		"requestheader-extra-headers-prefix", "requestheader-allowed-names")
	// The API server writes the ConfigMap just after it starts: a manager started with a new
	// cluster waits for it a little.
	go frontCA.Run(ctx, 1)
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lastErr = front.RunOnce(ctx)
		if lastErr == nil && len(frontCA.CurrentCABundleContent()) == 0 {
			lastErr = errors.New("no requestheader-client-ca-file in it: start kube-apiserver with --requestheader-client-ca-file (the aggregation layer)")
		}
		return lastErr == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("read the API server's front-proxy settings (ConfigMap %s/%s; is the API server's aggregation layer on?): %w",
			AuthConfigMapNamespace, AuthConfigMapName, errors.Join(lastErr, err))
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 tokenReviewTTL,
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
		RequestHeaderConfig: &authenticatorfactory.RequestHeaderConfig{
			CAContentProvider:   frontCA,
			UsernameHeaders:     headerrequest.StringSliceProviderFunc(front.UsernameHeaders),
			UIDHeaders:          headerrequest.StringSliceProviderFunc(front.UIDHeaders),
			GroupHeaders:        headerrequest.StringSliceProviderFunc(front.GroupHeaders),
			ExtraHeaderPrefixes: headerrequest.StringSliceProviderFunc(front.ExtraHeaderPrefixes),
			AllowedClientNames:  headerrequest.StringSliceProviderFunc(front.AllowedClientNames),
		},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("ui authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("ui authorization: %w", err)
	}
	return &Delegated{Authenticator: authn, Authorizer: authz, Run: func(ctx context.Context) { front.Run(ctx, 1) }}, nil
}
