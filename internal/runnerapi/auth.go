package runnerapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Extra keys the API server sets on a token bound to a pod.
const (
	ExtraPodName = "authentication.kubernetes.io/pod-name"
	ExtraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// TokenReviewer asks the API server whether a token is valid for the audiences.
type TokenReviewer interface {
	Review(ctx context.Context, token string, audiences []string) (*authnv1.TokenReviewStatus, error)
}

// NewTokenReviewer reviews tokens with the TokenReview API through c. The manager's service
// account needs `create` on tokenreviews.authentication.k8s.io.
func NewTokenReviewer(c client.Client) TokenReviewer { return &apiReviewer{c: c} }

type apiReviewer struct{ c client.Client }

func (r *apiReviewer) Review(ctx context.Context, token string, audiences []string) (*authnv1.TokenReviewStatus, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences}}
	if err := r.c.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	return &tr.Status, nil
}

// Identity is who a valid token speaks for.
type Identity struct {
	Namespace      string
	ServiceAccount string
	PodName        string
	PodUID         types.UID
}

// ErrUnauthenticated: the token is missing, invalid, expired, for another audience, or not
// bound to a pod.
var ErrUnauthenticated = errors.New("unauthenticated")

// Authenticator validates runner tokens and caches the answers by token hash, until the cache TTL
// or the token's own expiry, whichever comes first.
type Authenticator struct {
	Reviewer TokenReviewer
	Audience string
	TTL      time.Duration
	Clock    clock.PassiveClock

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	id      Identity
	expires time.Time
}

const maxCacheEntries = 10000

// Authenticate returns the identity of token or an error wrapping ErrUnauthenticated.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	now := a.Clock.Now()
	exp, hasExp := tokenExpiry(token)
	if hasExp && !now.Before(exp) {
		return Identity{}, fmt.Errorf("%w: token expired at %s", ErrUnauthenticated, exp.UTC().Format(time.RFC3339))
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		return c.id, nil
	}
	a.mu.Unlock()

	st, err := a.Reviewer.Review(ctx, token, []string{a.Audience})
	if err != nil {
		return Identity{}, err
	}
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "token rejected"
		}
		return Identity{}, fmt.Errorf("%w: %s", ErrUnauthenticated, msg)
	}
	if !slices.Contains(st.Audiences, a.Audience) {
		return Identity{}, fmt.Errorf("%w: token is not for audience %q", ErrUnauthenticated, a.Audience)
	}
	id, err := identityOf(st.User)
	if err != nil {
		return Identity{}, err
	}
	expires := now.Add(a.TTL)
	if hasExp && exp.Before(expires) {
		expires = exp
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil {
		a.cache = map[[32]byte]cached{}
	}
	if len(a.cache) >= maxCacheEntries {
		for k, c := range a.cache {
			if !now.Before(c.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCacheEntries {
			clear(a.cache)
		}
	}
	a.cache[key] = cached{id: id, expires: expires}
	return id, nil
}

func identityOf(u authnv1.UserInfo) (Identity, error) {
	parts := strings.Split(u.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return Identity{}, fmt.Errorf("%w: %q is not a service account", ErrUnauthenticated, u.Username)
	}
	pod, uid := first(u.Extra[ExtraPodName]), first(u.Extra[ExtraPodUID])
	if pod == "" || uid == "" {
		return Identity{}, fmt.Errorf("%w: token is not bound to a pod; mount a projected service account token", ErrUnauthenticated)
	}
	return Identity{Namespace: parts[2], ServiceAccount: parts[3], PodName: pod, PodUID: types.UID(uid)}, nil
}

func first(v authnv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// tokenExpiry reads the exp claim of a JWT without verifying it (the API server verifies); it is
// only used to stop caching a token past its expiry.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}
