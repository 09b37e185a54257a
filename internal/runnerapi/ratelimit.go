package runnerapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// Per-pod limits on the endpoints that call the forge: an agent steered into calling them in a
// loop (alternating pull request titles, fetching again and again) spends its own allowance, not
// the Project's forge budget. The bursts cover what a session does at its busiest (the runner
// opens its pull request once and updates it after a turn; git fetches and pushes a few times a
// turn).
var (
	// LimitPullRequest: 10 calls at once, then one every 6 seconds.
	LimitPullRequest = Limit{Every: 6 * time.Second, Burst: 10}
	// LimitTranscript: 50 batches at once, then ten a second (the runner sends at most one
	// every 100 ms; a batch holds up to transcript.MaxBatch entries).
	LimitTranscript = Limit{Every: 100 * time.Millisecond, Burst: 50}
	// LimitGit: 30 requests at once (a clone is 2 or 3), then one a second.
	LimitGit = Limit{Every: time.Second, Burst: 30}
)

// Limit is a token bucket: Burst calls at once, then one every Every.
type Limit struct {
	Every time.Duration
	Burst int
}

// podLimiter keeps a bucket per pod and endpoint.
type podLimiter struct {
	limit Limit

	mu      sync.Mutex
	buckets map[types.UID]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// maxBuckets bounds the pods remembered; idle ones are dropped first.
const maxBuckets = 20000

func newPodLimiter(l Limit) *podLimiter {
	return &podLimiter{limit: l, buckets: map[types.UID]*bucket{}}
}

// allow takes a token for pod, or says how long until one is there.
func (p *podLimiter) allow(pod types.UID, now time.Time) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.buckets[pod]
	if !ok {
		if len(p.buckets) >= maxBuckets {
			p.pruneLocked(now)
		}
		b = &bucket{lim: rate.NewLimiter(rate.Every(p.limit.Every), p.limit.Burst)}
		p.buckets[pod] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// pruneLocked drops the buckets idle long enough to be full again; if none is, all of them.
func (p *podLimiter) pruneLocked(now time.Time) {
	full := p.limit.Every * time.Duration(p.limit.Burst)
	for k, b := range p.buckets {
		if now.Sub(b.seen) > full {
			delete(p.buckets, k)
		}
	}
	if len(p.buckets) >= maxBuckets {
		clear(p.buckets)
	}
}

// limited refuses a pod's call over its allowance with 429 and Retry-After.
func (h *Handler) limited(l *podLimiter, next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, s Session) {
		if ok, wait := l.allow(s.PodUID, h.o.Clock.Now()); !ok {
			secs := int(wait/time.Second) + 1
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			h.fail(w, http.StatusTooManyRequests, "this pod calls the forge too often: retry in "+strconv.Itoa(secs)+"s")
			return
		}
		next(w, r, s)
	}
}
