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

	"golang.org/x/time/rate"
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
//
// The channel answers every pod, so a token costs a TokenReview only once it looks like one the
// API server could accept (precheck: a JWT of this audience, not expired, bound to a pod); a token
// the API server refused is remembered for NegativeTTL; and the reviews themselves are paced by
// Limiter, so that a flood of forged tokens can neither reach the API server nor starve the
// manager's other calls to it (the reviewer has a client and a rate limit of its own).
type Authenticator struct {
	Reviewer TokenReviewer
	Audience string
	TTL      time.Duration
	Clock    clock.PassiveClock
	// NegativeTTL is how long a refused token is refused without a review (default 1 minute).
	NegativeTTL time.Duration
	// Limiter paces TokenReviews; nil: unpaced. A review over the rate is not made: the caller
	// gets ErrReviewBusy (503, retry).
	Limiter *rate.Limiter

	mu         sync.Mutex
	cache      map[[32]byte]cached
	refused    map[[32]byte]time.Time
	reviews    int64
	prechecked int64
	negative   int64
}

// ErrReviewBusy: the token could not be reviewed now (the review rate is spent); retry.
var ErrReviewBusy = errors.New("token reviews are paced: retry")

// AuthStats counts what the Authenticator did, for tests and benchmarks.
type AuthStats struct {
	// Reviews made, tokens refused by the precheck, and by the negative cache.
	Reviews, Prechecked, NegativeHits int64
}

// Stats returns the counts so far.
func (a *Authenticator) Stats() AuthStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AuthStats{Reviews: a.reviews, Prechecked: a.prechecked, NegativeHits: a.negative}
}

// MaxTokenBytes bounds a bearer token: a projected service account token is about 1 KiB.
const MaxTokenBytes = 8 << 10

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
	exp, err := precheck(token, a.Audience, now)
	if err != nil {
		a.mu.Lock()
		a.prechecked++
		a.mu.Unlock()
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		return c.id, nil
	}
	if until, ok := a.refused[key]; ok && now.Before(until) {
		a.negative++
		a.mu.Unlock()
		return Identity{}, fmt.Errorf("%w: token refused a moment ago", ErrUnauthenticated)
	}
	a.mu.Unlock()
	if a.Limiter != nil && !a.Limiter.Allow() {
		return Identity{}, ErrReviewBusy
	}

	a.mu.Lock()
	a.reviews++
	a.mu.Unlock()
	st, err := a.Reviewer.Review(ctx, token, []string{a.Audience})
	if err != nil {
		return Identity{}, err
	}
	id, err := a.verdict(st)
	if err != nil {
		a.refuse(key, now)
		return Identity{}, err
	}
	hasExp := !exp.IsZero()
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

// verdict reads a TokenReview's answer.
func (a *Authenticator) verdict(st *authnv1.TokenReviewStatus) (Identity, error) {
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
	return identityOf(st.User)
}

// refuse remembers a refused token for NegativeTTL (bounded like the cache).
func (a *Authenticator) refuse(key [32]byte, now time.Time) {
	ttl := a.NegativeTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refused == nil || len(a.refused) >= maxCacheEntries {
		a.refused = map[[32]byte]time.Time{}
	}
	a.refused[key] = now.Add(ttl)
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

// claims are the parts of a projected service account token the precheck reads.
type claims struct {
	Aud audience `json:"aud"`
	Exp int64    `json:"exp"`
	Nbf int64    `json:"nbf"`
	K8s *struct {
		Pod *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// audience is the aud claim: a string or a list of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// clockSkew is how far a token's nbf may be ahead of the manager's clock.
const clockSkew = time.Minute

// precheck refuses, without asking anyone, a token the API server could not accept for this
// channel: not a JWT, not for the audience, expired or not yet valid, or not bound to a pod. It
// verifies nothing (the TokenReview does); it only keeps garbage from costing a review. It
// returns the token's expiry.
func precheck(token, aud string, now time.Time) (time.Time, error) {
	if len(token) > MaxTokenBytes {
		return time.Time{}, fmt.Errorf("%w: token longer than %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	head, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(head, &h) != nil || h.Alg == "" || strings.EqualFold(h.Alg, "none") {
		return time.Time{}, fmt.Errorf("%w: not a signed JWT", ErrUnauthenticated)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	var c claims
	if json.Unmarshal(payload, &c) != nil {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	if !slices.Contains(c.Aud, aud) {
		return time.Time{}, fmt.Errorf("%w: token is not for audience %q", ErrUnauthenticated, aud)
	}
	if c.Exp == 0 {
		return time.Time{}, fmt.Errorf("%w: token without expiry: mount a projected service account token", ErrUnauthenticated)
	}
	exp := time.Unix(c.Exp, 0)
	if !now.Before(exp) {
		return time.Time{}, fmt.Errorf("%w: token expired at %s", ErrUnauthenticated, exp.UTC().Format(time.RFC3339))
	}
	if c.Nbf != 0 && time.Unix(c.Nbf, 0).After(now.Add(clockSkew)) {
		return time.Time{}, fmt.Errorf("%w: token not valid before %s", ErrUnauthenticated, time.Unix(c.Nbf, 0).UTC().Format(time.RFC3339))
	}
	if c.K8s == nil || c.K8s.Pod == nil || c.K8s.Pod.Name == "" || c.K8s.Pod.UID == "" {
		return time.Time{}, fmt.Errorf("%w: token is not bound to a pod; mount a projected service account token", ErrUnauthenticated)
	}
	return exp, nil
}
