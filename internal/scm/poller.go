package scm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// Watch says what the Poller should follow for one session.
type Watch struct {
	Repo Repo
	// Number of the pull request; 0 until it is known, when the Poller finds it by Head.
	Number int
	// Head is the session's branch (and its owner for a fork; empty means the repository owner).
	Head Head
	// Base is the branch the pull request targets (optional; see RefreshRequest.Base).
	Base string
	// MaxAge overrides the Poller's MaxAge for this item (the Project's poll interval).
	MaxAge time.Duration
	// WebhookMaxAge overrides the Poller's WebhookMaxAge for this item (the Project's poll
	// interval while its webhooks flow). It is never shorter than the item's MaxAge.
	WebhookMaxAge time.Duration
}

// Observation is what the Poller last saw for one session.
type Observation struct {
	// PullRequest is nil when no pull request exists for the watched head (yet).
	PullRequest *PullRequest
	// CheckedAt is the start of the last successful refresh; zero before the first.
	CheckedAt time.Time
	// Err is the last refresh's error, nil after a success. On a rate limit, errors.Is(Err,
	// ErrRateLimited) and RetryAfter(Err) says until when.
	Err error
}

// PollerOptions tune a Poller. Zero values take the defaults.
type PollerOptions struct {
	// MaxAge is the longest any item goes without a refresh when no webhooks arrive for its
	// repository (default 1m): the Project's poll interval.
	MaxAge time.Duration
	// WebhookMaxAge replaces MaxAge for items of a repository from which a verified webhook
	// arrived within WebhookMaxAge: webhooks bring changes within seconds, polling is then only
	// the safety net for lost deliveries (default 10×MaxAge, at most 1h). A repository whose
	// webhooks fall silent for that long is polled at MaxAge again. Set it equal to MaxAge to keep
	// the poll interval strict whatever webhooks do.
	WebhookMaxAge time.Duration
	// DetailMaxAge bounds how old reviews, threads and individual checks may get when nothing the
	// cheap probe sees has changed (default 15m).
	DetailMaxAge time.Duration
	// HintDelay gathers the bursts of webhooks one change causes (a push brings a push, a
	// synchronize and a check suite) into one read (default 2s).
	//
	// It also paces first reads: a newly registered item is read at once, unless a call with
	// first reads went out less than HintDelay ago, when it waits for the next such call. The
	// registrations of a fan-out (thousands of sessions created within minutes) then share one
	// call per HintDelay whatever their rate, instead of one call each as fast as the forge
	// answers.
	HintDelay time.Duration
	// HintInterval paces the reads caused by webhooks alone, so that a busy installation pays at
	// most one call per interval however many deliveries arrive (default 15s: at most 240
	// one-point calls an hour, a twentieth of an installation's budget).
	HintInterval time.Duration
	// HintBurst is how many hint-driven reads may go out back to back before the pace of
	// HintInterval applies (a token bucket: one token comes back per HintInterval, up to
	// HintBurst; default 4). A quiet repository's webhooks are then read within HintDelay
	// each, even when they follow each other within seconds (CI reports on a push, a review
	// right after), while a busy installation still pays one call per HintInterval on average.
	// 1 restores the strict pace.
	HintBurst int
	// FactRecheck is how long after a webhook's facts were applied an item whose change implies
	// something only the forge computes (mergeability after its head or base moved) goes first
	// into the padding of the calls that go out anyway, read in full (default 4×HintInterval).
	FactRecheck time.Duration
	// BatchSize is how many items one call carries (default: the Refresher's BatchSize).
	BatchSize int
	// Clock drives scheduling (default the real clock).
	Clock Clock
	// OnChange is called, outside the Poller's lock, when what Get returns for a key changed in a
	// way a controller cares about (not for a mere refresh).
	OnChange func(key types.NamespacedName)
	// Metrics and the labels its gauges use.
	Metrics  *Metrics
	Provider string
	Identity string
	Logger   logr.Logger
}

// Poller keeps the pull requests of many sessions fresh with batched reads: every item is read at
// least once per MaxAge (its deadline), a webhook hint makes items due within seconds, and each
// call is filled with the items closest to their deadline, so that the number of calls, not of
// items, drives the cost.
type Poller struct {
	src  Refresher
	opts PollerOptions

	mu       sync.Mutex
	items    map[types.NamespacedName]*pollItem
	webhooks map[webhookKey]time.Time
	// required are the check names each base branch requires, as reads showed them
	// (keepRequiredNamesLocked).
	required map[string][]string
	// hintTAT is the hint budget (see HintBurst and hintReadyAtLocked): each hint-driven call
	// moves it HintInterval past the later of itself and the call's time.
	hintTAT time.Time
	// pausedUntil holds all calls after a rate limit or an outage.
	pausedUntil time.Time
	failures    int
	wake        chan struct{}
	// firstReadAt is when the last call carrying first reads went out (see HintDelay).
	firstReadAt time.Time
	// wakeAt is when the last Poll said the next call is due (zero: nothing is, or no Poll
	// yet). A new item due no sooner does not wake the loop: in a fan-out, most registrations
	// then cost no plan at all.
	wakeAt time.Time
	// due and pad are planLocked's scratch space, kept between plans: a plan looks at every
	// followed item (tens of thousands), and allocating its candidates each time made the
	// planning of a fan-out the manager's largest allocator.
	due, pad []cand
}

// cand is an item a plan considers, with its deadline.
type cand struct {
	it       *pollItem
	deadline time.Time
}

type pollItem struct {
	key   types.NamespacedName
	watch Watch
	// repoKey is watch.Repo.Key(), kept: a plan looks up every item's repository in webhooks.
	repoKey string
	// registered is when Register added the item: its first read is due from then on (see
	// deadlineLocked).
	registered time.Time
	// failedAt is when a read of the item last failed on its own (RefreshResult.Err): it is read
	// again one interval later, as if that failure were a read.
	failedAt time.Time
	obs      Observation
	// observed is false until the first answer (success or a per-item error).
	observed    bool
	fingerprint string
	contentHash uint64
	detailAt    time.Time
	// fullDue and probeDue are set by hints: when a full read (or a probe) is due earlier than
	// the deadline. Zero: not hinted.
	fullDue  time.Time
	probeDue time.Time
	// needFull forces a full read at the next call (new item, changed fingerprint).
	needFull bool
	// recheckAt, when set, is when the item goes first into the padding of calls, read in full:
	// a webhook's facts were applied, and what they imply only the forge computes (NeedLater).
	recheckAt time.Time
	// stale is true when facts (a webhook's, or the manager's own call's answer) changed the
	// item since its last full read: its probe would see a new fingerprint and be followed by a
	// full read in a query of its own, so whenever it is read it is read in full at once.
	stale bool
}

// NewPoller returns a Poller reading through src.
func NewPoller(src Refresher, opts PollerOptions) *Poller {
	if opts.MaxAge <= 0 {
		opts.MaxAge = time.Minute
	}
	if opts.WebhookMaxAge <= 0 {
		opts.WebhookMaxAge = min(10*opts.MaxAge, time.Hour)
	}
	opts.WebhookMaxAge = max(opts.WebhookMaxAge, opts.MaxAge)
	if opts.DetailMaxAge <= 0 {
		opts.DetailMaxAge = 15 * time.Minute
	}
	if opts.HintDelay <= 0 {
		opts.HintDelay = 2 * time.Second
	}
	if opts.HintInterval <= 0 {
		opts.HintInterval = 15 * time.Second
	}
	if opts.HintBurst <= 0 {
		opts.HintBurst = 4
	}
	if opts.FactRecheck <= 0 {
		opts.FactRecheck = 4 * opts.HintInterval
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = max(src.BatchSize(), 1)
	}
	opts.Clock = OrReal(opts.Clock)
	return &Poller{
		src:      src,
		opts:     opts,
		items:    map[types.NamespacedName]*pollItem{},
		webhooks: map[webhookKey]time.Time{},
		required: map[string][]string{},
		wake:     make(chan struct{}, 1),
	}
}

// webhookKey records where verified deliveries flow: a namespace's repository (case-folded).
type webhookKey struct{ namespace, repo string }

// webhookSeen is when a verified delivery last came for the item's repository, through its
// namespace's Project or (a hint without a namespace) for every namespace.
func (p *Poller) webhookSeen(it *pollItem) (time.Time, bool) {
	if len(p.webhooks) == 0 {
		return time.Time{}, false
	}
	repo := it.repoKey
	a, okA := p.webhooks[webhookKey{namespace: it.key.Namespace, repo: repo}]
	b, okB := p.webhooks[webhookKey{repo: repo}]
	if b.After(a) {
		a = b
	}
	return a, okA || okB
}

// Register starts or updates following a session. It is idempotent: the controller calls it on
// every reconcile. Changing the repository or head starts over; learning the number keeps the
// state. A new item is read at once, or with the other new items of a burst (HintDelay).
func (p *Poller) Register(key types.NamespacedName, w Watch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	it, ok := p.items[key]
	if ok && it.watch.Repo.Equal(w.Repo) && it.watch.Head == w.Head && it.watch.Base == w.Base && (it.watch.Number == w.Number || it.watch.Number == 0) {
		if it.watch.Repo != w.Repo {
			it.repoKey = w.Repo.Key()
		}
		it.watch = w
		return
	}
	it = &pollItem{key: key, watch: w, repoKey: w.Repo.Key(), needFull: true, registered: p.opts.Clock.Now()}
	p.items[key] = it
	p.setGauges()
	if p.wakeAt.IsZero() || p.deadlineLocked(it, it.registered).Before(p.wakeAt) {
		p.signal()
	}
}

// Forget stops following a session.
func (p *Poller) Forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.items, key)
	p.setGauges()
}

// Len is the number of followed sessions.
func (p *Poller) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.items)
}

// Get returns the last observation for a session; false before the first answer.
func (p *Poller) Get(key types.NamespacedName) (Observation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	it, ok := p.items[key]
	if !ok || !it.observed {
		return Observation{}, false
	}
	return it.obs, true
}

// Notify applies the facts a hint carries to the items they concern at once (ApplyFacts), and
// marks the items whose change it does not fully state as due within HintDelay; what can wait
// (mergeability after a push) rides in later calls from FactRecheck on. A hint
// from a webhook (Hint.Webhook) also records that the repository's webhooks are flowing (see
// WebhookMaxAge); the manager's own hints do not, or a repository without webhooks would be
// polled at WebhookMaxAge after each of them. It never calls the forge itself.
func (p *Poller) Notify(h Hint) {
	changed := p.notify(h)
	if p.opts.OnChange != nil {
		for _, k := range changed {
			p.opts.OnChange(k)
		}
	}
}

func (p *Poller) notify(h Hint) []types.NamespacedName {
	now := p.opts.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.Webhook {
		p.webhooks[webhookKey{namespace: h.Namespace, repo: h.Repo.Key()}] = now
	}
	due := now.Add(p.opts.HintDelay)
	hit := false
	var changed []types.NamespacedName
	for _, it := range p.items {
		if !it.watch.Repo.Equal(h.Repo) || (h.Namespace != "" && it.key.Namespace != h.Namespace) {
			continue
		}
		if it.obs.Err == nil && Concern(it.obs.PullRequest, h.Facts) {
			next, relevant, need := ApplyFacts(p.withLearnedLocked(it.obs.PullRequest), h.Facts)
			if relevant {
				if next != it.obs.PullRequest {
					it.obs.PullRequest, it.stale = next, true
					if sum := hashPR(next); sum != it.contentHash {
						it.contentHash = sum
						changed = append(changed, it.key)
					}
				}
				if need == NeedLater {
					// Neither a hint nor a deadline: from recheckAt on, the item rides first in
					// the calls that go out anyway (the padding of hinted and deadline calls),
					// and never spends the hint budget the reads that cannot wait need.
					if later := now.Add(p.opts.FactRecheck); it.recheckAt.IsZero() || it.recheckAt.After(later) {
						it.recheckAt = later
					}
				}
				if need != NeedNow {
					continue
				}
			}
		}
		full, probe := it.matches(h)
		if full {
			if it.fullDue.IsZero() || it.fullDue.After(due) {
				it.fullDue = due
			}
			hit = true
		} else if probe {
			if it.probeDue.IsZero() || it.probeDue.After(due) {
				it.probeDue = due
			}
			hit = true
		}
	}
	if hit {
		p.signal()
	}
	return changed
}

// Observed records what the forge answered the manager's own call about a session's pull
// request (it opened it, or updated its title and body): the answer is what Get returns at once,
// as a webhook's facts are, and OnChange is called. What the answer does not carry (checks,
// reviews, mergeability) comes with a full read within HintDelay; until then a pull request the
// Poller had not seen has no checks, no reviews and an unknown merge state, so that nothing is
// decided on them. It never calls the forge itself.
func (p *Poller) Observed(key types.NamespacedName, pr *PullRequest) {
	if pr == nil {
		return
	}
	p.mu.Lock()
	it, ok := p.items[key]
	if !ok {
		p.mu.Unlock()
		return
	}
	var next *PullRequest
	if cur := it.obs.PullRequest; cur != nil && cur.Number == pr.Number && it.obs.Err == nil {
		next, _, _ = ApplyFacts(p.withLearnedLocked(cur), []Fact{{Number: pr.Number, PullRequest: &PullRequestFact{
			State: pr.State, Draft: pr.Draft, Title: pr.Title, HeadSHA: pr.HeadSHA, BaseRef: pr.BaseRef,
			MergeCommitSHA: pr.MergeCommitSHA, UpdatedAt: pr.UpdatedAt,
		}}})
	} else {
		c := clonePR(pr)
		c.Mergeable, c.MergeState = MergeableUnknown, MergeStateUnknown
		c.Checks, c.Reviews, c.Threads, c.ReviewDecision = Checks{}, nil, nil, ""
		next = c
		it.observed, it.obs.Err = true, nil
	}
	it.obs.PullRequest, it.stale = next, true
	it.needFull = true
	if due := p.opts.Clock.Now().Add(p.opts.HintDelay); it.fullDue.IsZero() || it.fullDue.After(due) {
		it.fullDue = due
	}
	changed := false
	if sum := hashPR(next); sum != it.contentHash {
		it.contentHash, changed = sum, true
	}
	p.signal()
	p.mu.Unlock()
	if changed && p.opts.OnChange != nil {
		p.opts.OnChange(key)
	}
}

// matches says whether a hint asks for a full read of the item, or only a probe (its base moved).
func (it *pollItem) matches(h Hint) (full, probe bool) {
	pr := it.obs.PullRequest
	number := it.watch.Number
	if pr != nil {
		number = pr.Number
	}
	for _, n := range h.Numbers {
		if n != 0 && n == number {
			return true, false
		}
	}
	for _, b := range h.Branches {
		if b == it.watch.Head.Branch || (pr != nil && b == pr.Head.Branch) {
			return true, false
		}
	}
	if pr != nil {
		for _, s := range h.SHAs {
			if s != "" && s == pr.HeadSHA {
				return true, false
			}
		}
		for _, b := range h.Branches {
			if b == pr.BaseRef {
				return false, true
			}
		}
	}
	return false, false
}

func (p *Poller) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// maxAgeLocked is the deadline interval of an item: MaxAge (or its own), relaxed while the
// repository's webhooks flow.
func (p *Poller) maxAgeLocked(it *pollItem, now time.Time) time.Duration {
	age := p.opts.MaxAge
	if it.watch.MaxAge > 0 {
		age = it.watch.MaxAge
	}
	relaxed := p.opts.WebhookMaxAge
	if it.watch.WebhookMaxAge > 0 {
		relaxed = it.watch.WebhookMaxAge
	}
	if seen, ok := p.webhookSeen(it); ok && now.Sub(seen) < relaxed {
		age = max(age, relaxed)
	}
	return age
}

// deadline is when the item must have been refreshed again. A call goes out a little before, as
// a read's answer is as old as its request; an item whose own read failed (not the whole call:
// that pauses every call) is read again one interval after the failure. An item never read is
// due from its registration, but no sooner than HintDelay after the last call with first reads:
// a burst of registrations shares calls (see HintDelay).
func (p *Poller) deadlineLocked(it *pollItem, now time.Time) time.Time {
	last := it.obs.CheckedAt
	if it.obs.Err != nil && it.failedAt.After(last) {
		last = it.failedAt
	}
	if last.IsZero() {
		if p.firstReadAt.IsZero() {
			return it.registered
		}
		return later(it.registered, p.firstReadAt.Add(p.opts.HintDelay))
	}
	age := p.maxAgeLocked(it, now)
	lead := min(age/10, 5*time.Second)
	return last.Add(age - lead)
}

// hintReadyAtLocked is when the hint budget (HintBurst, HintInterval) allows the next
// hint-driven call: now, or later once the burst is spent. The budget is kept as the generic
// cell rate algorithm's theoretical arrival time (hintTAT), in whole nanoseconds: a call is
// allowed once now reaches hintTAT less the burst's tolerance.
func (p *Poller) hintReadyAtLocked(now time.Time) time.Time {
	tolerance := time.Duration(p.opts.HintBurst-1) * p.opts.HintInterval
	if at := p.hintTAT.Add(-tolerance); now.Before(at) {
		return at
	}
	return now
}

// plan is one round of calls.
type plan struct {
	reqs  []RefreshRequest
	items []*pollItem
	// hinted is true when the round was caused by hints alone.
	hinted bool
}

// planLocked picks the items due at now and pads the calls with the items closest to their
// deadline. It returns nil when nothing is due, with when something will be (zero: nothing is
// followed); when something is due, the plan and now (never zero: after a call, Poll returns it,
// and Start reads zero as "nothing followed").
//
// It runs at every wake-up (each registration, hint and call), over every followed item, so it
// allocates nothing per item: one pass finds what is due (into the Poller's scratch slice), and
// only when a call goes out does a second pass keep the BatchSize-1 best candidates for its
// padding in a bounded heap, rather than sorting all the others.
func (p *Poller) planLocked(now time.Time) (*plan, time.Time) {
	var next time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if now.Before(p.pausedUntil) {
		return nil, p.pausedUntil
	}
	due := p.due[:0]
	defer func() { clear(due); p.due = due[:0] }()
	anyDeadline := false
	hintReadyAt := p.hintReadyAtLocked(now)
	hintReady := !now.Before(hintReadyAt)
	for _, it := range p.items {
		d := p.deadlineLocked(it, now)
		switch p.dueLocked(it, now, d, hintReady) {
		case dueDeadline:
			anyDeadline = true
			due = append(due, cand{it: it, deadline: d})
		case dueHint:
			due = append(due, cand{it: it, deadline: d})
		case dueHintBudget:
			soon(hintReadyAt)
		default:
			soon(d)
			soon(it.fullDue)
			soon(it.probeDue)
		}
	}
	if len(due) == 0 {
		return nil, next
	}
	// Pad up to a whole number of calls with the items whose deadline comes first: in the same
	// call they cost nothing more, and they will not need a call of their own soon after. Items
	// whose facts left something to recheck (recheckAt passed) come before all of them.
	b := p.opts.BatchSize
	if room := ((len(due)+b-1)/b)*b - len(due); room > 0 {
		pad := p.pad[:0]
		for _, it := range p.items {
			d := p.deadlineLocked(it, now)
			if k := p.dueLocked(it, now, d, hintReady); k == dueDeadline || k == dueHint {
				continue
			}
			pad = keepBest(pad, cand{it: it, deadline: d}, room, now)
		}
		due = append(due, pad...)
		clear(pad)
		p.pad = pad[:0]
	}
	pl := &plan{hinted: !anyDeadline, reqs: make([]RefreshRequest, 0, len(due)), items: make([]*pollItem, 0, len(due))}
	slices.SortFunc(due, func(a, b cand) int { return a.deadline.Compare(b.deadline) })
	for _, c := range due {
		it := c.it
		full := it.needFull || it.stale || !it.observed || !it.fullDue.IsZero() && !now.Before(it.fullDue) ||
			(!it.recheckAt.IsZero() && !now.Before(it.recheckAt)) ||
			(it.obs.PullRequest != nil && now.Sub(it.detailAt) >= p.opts.DetailMaxAge)
		pl.reqs = append(pl.reqs, it.request(full))
		pl.items = append(pl.items, it)
	}
	return pl, now
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dueKind is why an item is (or is not yet) in a plan.
type dueKind int

const (
	notDue        dueKind = iota
	dueDeadline           // its deadline (or first read) came
	dueHint               // a hint made it due, and the hint budget allows a call
	dueHintBudget         // a hint made it due, but the hint budget holds the call
)

// dueLocked classifies an item at now; d is its deadlineLocked.
func (p *Poller) dueLocked(it *pollItem, now, d time.Time, hintReady bool) dueKind {
	switch {
	case d.IsZero() || !now.Before(d):
		return dueDeadline
	case (!it.fullDue.IsZero() && !now.Before(it.fullDue)) || (!it.probeDue.IsZero() && !now.Before(it.probeDue)):
		if hintReady {
			return dueHint
		}
		return dueHintBudget
	}
	return notDue
}

// padsBefore orders the candidates for a call's padding: those with something to recheck first,
// then by deadline.
func padsBefore(a, b cand, now time.Time) bool {
	ra := !a.it.recheckAt.IsZero() && !now.Before(a.it.recheckAt)
	rb := !b.it.recheckAt.IsZero() && !now.Before(b.it.recheckAt)
	if ra != rb {
		return ra
	}
	return a.deadline.Before(b.deadline)
}

// keepBest adds c to h, a max-heap (by padsBefore: the root pads last) of at most k elements,
// keeping the k that pad first: O(log k) per candidate, and no allocation once h has grown to k.
func keepBest(h []cand, c cand, k int, now time.Time) []cand {
	less := func(a, b cand) bool { return padsBefore(a, b, now) }
	if len(h) < k {
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			parent := (i - 1) / 2
			if !less(h[parent], h[i]) {
				break
			}
			h[parent], h[i] = h[i], h[parent]
			i = parent
		}
		return h
	}
	if k == 0 || !less(c, h[0]) {
		return h
	}
	h[0] = c
	for i := 0; ; {
		worst, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && less(h[worst], h[l]) {
			worst = l
		}
		if r < len(h) && less(h[worst], h[r]) {
			worst = r
		}
		if worst == i {
			return h
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}

func (it *pollItem) request(full bool) RefreshRequest {
	r := RefreshRequest{Ref: PRRef{Repo: it.watch.Repo, Number: it.watch.Number}, Head: it.watch.Head, Base: it.watch.Base, Full: full}
	if r.Ref.Number == 0 && it.obs.PullRequest != nil && it.obs.PullRequest.State == StateOpen {
		// Found earlier and still open: follow it by number (cheaper than a search by head).
		r.Ref.Number = it.obs.PullRequest.Number
	}
	return r
}

// Poll runs the calls that are due now and returns when the next one will be (zero when nothing
// is followed; now or earlier when something came due during the call, such as a recheck a slow
// call asked for). Start calls it in a loop; tests and the benchmark call it with a simulated clock.
func (p *Poller) Poll(ctx context.Context) (time.Time, error) {
	now := p.opts.Clock.Now()
	p.mu.Lock()
	pl, next := p.planLocked(now)
	if pl == nil {
		p.wakeAt = next
		p.mu.Unlock()
		return next, nil
	}
	for _, it := range pl.items {
		if it.obs.CheckedAt.IsZero() {
			p.firstReadAt = now
			break
		}
	}
	if pl.hinted {
		if p.hintTAT.Before(now) {
			p.hintTAT = now
		}
		p.hintTAT = p.hintTAT.Add(p.opts.HintInterval)
	}
	p.mu.Unlock()

	changed, err := p.run(ctx, pl, now)
	// A probe that saw a change is followed at once by a full read, so that the controller never
	// sees a new head with the old head's checks.
	for round := 0; err == nil && round < 2; round++ {
		p.mu.Lock()
		var follow *plan
		for _, it := range pl.items {
			if it.needFull && it.observed {
				if follow == nil {
					follow = &plan{}
				}
				follow.reqs = append(follow.reqs, it.request(true))
				follow.items = append(follow.items, it)
			}
		}
		p.mu.Unlock()
		if follow == nil {
			break
		}
		var more []types.NamespacedName
		more, err = p.run(ctx, follow, p.opts.Clock.Now())
		changed = append(changed, more...)
		pl = follow
	}
	if p.opts.OnChange != nil {
		for _, k := range dedupKeys(changed) {
			p.opts.OnChange(k)
		}
	}
	p.mu.Lock()
	p.setAgeGaugeLocked(p.opts.Clock.Now())
	_, next = p.planLocked(p.opts.Clock.Now())
	p.wakeAt = next
	p.mu.Unlock()
	return next, err
}

// run sends one plan and applies the answers. It returns the keys whose observation changed.
func (p *Poller) run(ctx context.Context, pl *plan, start time.Time) ([]types.NamespacedName, error) {
	results, err := p.src.Refresh(ctx, pl.reqs)
	p.mu.Lock()
	defer p.mu.Unlock()
	var changed []types.NamespacedName
	if err != nil {
		p.failures++
		pause := min(time.Duration(1<<min(p.failures, 10))*time.Second, p.opts.MaxAge)
		if reset := RetryAfter(err); !reset.IsZero() {
			pause = max(reset.Sub(start), time.Second)
		}
		p.pausedUntil = start.Add(pause)
		for _, it := range pl.items {
			if p.items[it.key] != it {
				continue
			}
			if it.obs.Err == nil || !sameErrClass(it.obs.Err, err) {
				changed = append(changed, it.key)
			}
			it.obs.Err = err
			it.observed = true
		}
		return changed, fmt.Errorf("refresh %d pull requests: %w", len(pl.reqs), err)
	}
	p.failures = 0
	for i, it := range pl.items {
		if i >= len(results) || p.items[it.key] != it {
			continue // forgotten or replaced while the call ran
		}
		res := results[i]
		full := pl.reqs[i].Full
		before := it.contentHash
		hadErr := it.obs.Err
		wasObserved := it.observed
		if res.Err != nil {
			it.obs.Err = res.Err
			it.observed = true
			it.failedAt = start
			if !wasObserved || hadErr == nil || !sameErrClass(hadErr, res.Err) {
				changed = append(changed, it.key)
			}
			continue
		}
		if !full && res.Fingerprint != it.fingerprint {
			// The cheap view changed: read everything before telling anyone. CheckedAt stays,
			// so that the item is still due if that read fails.
			it.needFull = true
			it.fingerprint = res.Fingerprint
			continue
		}
		it.obs.Err = nil
		it.obs.CheckedAt = start
		it.observed = true
		it.fingerprint = res.Fingerprint
		if full {
			it.needFull = false
			it.fullDue, it.recheckAt, it.stale = time.Time{}, time.Time{}, false
			it.detailAt = start
			p.keepRequiredNamesLocked(it.obs.PullRequest, res.PullRequest)
			it.obs.PullRequest = res.PullRequest
		} else if res.PullRequest != nil && it.obs.PullRequest != nil {
			// Same fingerprint: keep the details, take the fresh times.
			pr := *it.obs.PullRequest
			pr.FetchedAt = res.PullRequest.FetchedAt
			it.obs.PullRequest = &pr
		} else {
			it.obs.PullRequest = res.PullRequest
		}
		if !it.probeDue.IsZero() && !start.Before(it.probeDue.Add(-p.opts.HintDelay)) {
			it.probeDue = time.Time{}
		}
		if res.RecheckAfter > 0 {
			// The forge is still computing (a mergeability check): look again soon, at the pace of
			// hints, rather than at the next deadline.
			if due := start.Add(res.RecheckAfter); it.fullDue.IsZero() || due.Before(it.fullDue) {
				it.fullDue = due
			}
		}
		it.contentHash = hashPR(it.obs.PullRequest)
		if !wasObserved || it.contentHash != before || hadErr != nil {
			changed = append(changed, it.key)
		}
	}
	return changed, nil
}

// Start polls until ctx ends; it makes the Poller a controller-runtime manager.Runnable.
func (p *Poller) Start(ctx context.Context) error {
	for {
		next, err := p.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			p.opts.Logger.Info("Polling pull requests failed; backing off", "error", err.Error())
		}
		wait := time.Minute
		if !next.IsZero() {
			wait = max(next.Sub(p.opts.Clock.Now()), 50*time.Millisecond)
		}
		if err := p.sleep(ctx, wait); err != nil {
			return nil
		}
	}
}

// NeedLeaderElection keeps polling to the elected manager, so that replicas do not spend the
// budget twice.
func (p *Poller) NeedLeaderElection() bool { return true }

// sleep waits for d, an item becoming due (Register, Notify), or ctx; it fails only with ctx.
func (p *Poller) sleep(ctx context.Context, d time.Duration) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.wake:
			cancel()
		case <-sctx.Done():
		}
	}()
	_ = p.opts.Clock.Sleep(sctx, d)
	return ctx.Err()
}

func (p *Poller) setGauges() {
	if p.opts.Metrics != nil {
		p.opts.Metrics.PollerItems.WithLabelValues(p.opts.Provider, p.opts.Identity).Set(float64(len(p.items)))
	}
}

func (p *Poller) setAgeGaugeLocked(now time.Time) {
	if p.opts.Metrics == nil {
		return
	}
	var oldest time.Duration
	for _, it := range p.items {
		if !it.obs.CheckedAt.IsZero() {
			oldest = max(oldest, now.Sub(it.obs.CheckedAt))
		}
	}
	p.opts.Metrics.PollerMaxAge.WithLabelValues(p.opts.Provider, p.opts.Identity).Set(oldest.Seconds())
}

// hashPR digests what a controller reads from a pull request, leaving out the fetch times, so
// that a refresh that found nothing new triggers no reconcile.
func hashPR(pr *PullRequest) uint64 {
	if pr == nil {
		return 0
	}
	c := *pr
	c.FetchedAt, c.DetailsFetchedAt = time.Time{}, time.Time{}
	h := fnv.New64a()
	// %#v prints slices element by element and times through GoString, so equal content
	// hashes equally.
	_, _ = fmt.Fprintf(h, "%#v", c)
	return h.Sum64() | 1
}

// keepRequiredNamesLocked learns which checks the pull request's base requires (from the runs
// the forge marks required, per repository and base: one read teaches every pull request on
// that base), and carries the known names into a read whose forge still waits for some
// (Expected), so that a check fact for one of them can be placed (ApplyFacts).
func (p *Poller) keepRequiredNamesLocked(old, cur *PullRequest) {
	if cur == nil {
		return
	}
	base := baseKey(cur)
	learned := p.required[base]
	for _, r := range cur.Checks.Runs {
		switch {
		case r.Required && !slices.Contains(learned, r.Name) && len(learned) < maxRequiredNames:
			learned = append(learned, r.Name)
		case !r.Required && slices.Contains(learned, r.Name):
			// The base no longer requires it.
			learned = slices.DeleteFunc(learned, func(n string) bool { return n == r.Name })
		}
	}
	if len(learned) > 0 {
		p.required[base] = learned
	} else {
		delete(p.required, base)
	}
	if !cur.Checks.Expected {
		return
	}
	names := append(append([]string(nil), learned...), cur.Checks.RequiredNames...)
	if old != nil {
		names = append(names, KnownRequired(old.Checks)...)
	}
	var missing []string
	for _, n := range names {
		if !slices.ContainsFunc(cur.Checks.Runs, func(r Check) bool { return r.Name == n }) && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	cur.Checks.RequiredNames = missing
}

// withLearnedLocked is pr with the required names learned since it was read (from other pull
// requests on its base) while its forge waits for a required check; pr itself when nothing is new.
func (p *Poller) withLearnedLocked(pr *PullRequest) *PullRequest {
	if !pr.Checks.Expected {
		return pr
	}
	known := KnownRequired(pr.Checks)
	var add []string
	for _, n := range p.required[baseKey(pr)] {
		if !slices.Contains(known, n) {
			add = append(add, n)
		}
	}
	if len(add) == 0 {
		return pr
	}
	c := *pr
	c.Checks.RequiredNames = append(append([]string(nil), pr.Checks.RequiredNames...), add...)
	sort.Strings(c.Checks.RequiredNames)
	return &c
}

// baseKey names the base branch of pr for the required-check names learned per base.
func baseKey(pr *PullRequest) string { return pr.Repo.Key() + "\x00" + pr.BaseRef }

// maxRequiredNames bounds the required check names the Poller remembers per base branch.
const maxRequiredNames = 64

func sameErrClass(a, b error) bool {
	for _, s := range []error{ErrRateLimited, ErrUnavailable, ErrTokenRejected, ErrPermissionDenied, ErrRepositoryNotFound, ErrNotFound} {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return reflect.TypeOf(a) == reflect.TypeOf(b)
}

func dedupKeys(keys []types.NamespacedName) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
