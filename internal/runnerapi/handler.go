package runnerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/gitproxy"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// Backend is what the channel means: the AgentSession controller implements it. Every method
// gets the caller's Session, already authenticated and authorised. Errors wrapping ErrNotFound,
// ErrConflict, ErrInvalid or ErrForbidden become 404, 409, 400 and 403; other errors become 500
// with a generic message (the error is logged, never sent).
type Backend interface {
	// Task returns the session's task.
	Task(ctx context.Context, s Session) (*Task, error)
	// Report records a change. The handler has already refused sequences at or below the last one
	// it accepted from the pod; a backend that persists the sequence (to survive a manager
	// restart) returns ErrConflict for one it has already seen.
	Report(ctx context.Context, s Session, r Report) error
	// Pending returns the messages not yet acknowledged, oldest first.
	Pending(ctx context.Context, s Session) ([]Message, error)
	// Ack marks message id delivered: ErrNotFound for an unknown id, ErrConflict for one already
	// acknowledged.
	Ack(ctx context.Context, s Session, id string) error
	// OpenPullRequest opens the session's pull request or updates its title and body.
	OpenPullRequest(ctx context.Context, s Session, req PullRequestRequest) (*PullRequestResult, error)
	// Transcript adds entries to the session's transcript window and returns the highest Seq it
	// held before them.
	Transcript(ctx context.Context, s Session, b transcript.Batch) (uint64, error)
	// GitRemote says where the caller's git goes: its repository with the credentials to add,
	// and the branch it may push. A checkout pod's caller (no session) gets its Worktree's
	// repository and no branch.
	GitRemote(ctx context.Context, s Session) (*GitRemote, error)
}

// Errors a Backend returns to choose the status code.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")
	ErrInvalid   = errors.New("invalid request")
	ErrForbidden = errors.New("forbidden")
)

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	Backend  Backend
	Reviewer TokenReviewer
	// Pods reads the caller's pod (the manager's cached client is fine).
	Pods client.Reader
	// LivePods, when set, reads the pod from the API server when Pods does not have it (or has
	// an older pod of the same name): a cache behind a busy API server may not have seen a pod
	// that was created a moment ago, and the runner would be refused for the cache's lag.
	LivePods client.Reader
	// Identify maps an authenticated pod to its caller, or refuses it (an error wrapping
	// ErrForbidden). Default: StandardIdentify with the pod naming of DefaultPodNames.
	Identify func(pod *corev1.Pod) (Session, error)
	// Audience the tokens must carry; default Audience.
	Audience string
	// CacheTTL bounds how long a token review is reused; default 10 minutes.
	CacheTTL time.Duration
	// ReviewRate and ReviewBurst pace the TokenReviews of tokens the cache does not know
	// (defaults 50 a second, bursts of 200: a fleet of 5000 runners whose tokens the kubelet
	// renews every ~48 minutes needs about 2 a second). Reviews over the rate are not made: the
	// runner gets 503 and retries.
	ReviewRate  float64
	ReviewBurst int
	// MaxWait caps a long poll; default 60s.
	MaxWait time.Duration
	// PollInterval is how often a long poll asks the Backend again when nobody calls Wake;
	// default 2s.
	PollInterval time.Duration
	// RequestTimeout bounds every other request; default 20s.
	RequestTimeout time.Duration
	// GitTransport reaches the forge's git; nil uses a default with timeouts.
	GitTransport http.RoundTripper
	Clock        clock.Clock
	Log          logr.Logger
}

// Handler is the manager side of the channel.
type Handler struct {
	o    HandlerOptions
	auth *Authenticator
	mux  *http.ServeMux

	mu       sync.Mutex
	seq      map[types.UID]seqEntry
	waiters  map[types.NamespacedName]chan struct{}
	podLocks sync.Map
}

type seqEntry struct {
	last uint64
	seen time.Time
}

// NewHandler returns the channel's http.Handler.
func NewHandler(o HandlerOptions) (*Handler, error) {
	if o.Backend == nil || o.Reviewer == nil || o.Pods == nil {
		return nil, fmt.Errorf("runnerapi: Backend, Reviewer and Pods are required")
	}
	if o.Audience == "" {
		o.Audience = Audience
	}
	if o.CacheTTL == 0 {
		// Long enough that a fleet of runners reporting every few seconds costs few TokenReviews
		// (5000 runners: ~8 a second instead of ~80), short enough to notice a revoked token;
		// a deleted pod is refused at once whatever the cache holds (the UID check).
		o.CacheTTL = 10 * time.Minute
	}
	if o.MaxWait == 0 {
		o.MaxWait = 60 * time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 20 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Identify == nil {
		o.Identify = StandardIdentify(DefaultPodNames)
	}
	if o.ReviewRate <= 0 {
		o.ReviewRate = 50
	}
	if o.ReviewBurst <= 0 {
		o.ReviewBurst = 200
	}
	h := &Handler{
		o: o,
		auth: &Authenticator{Reviewer: o.Reviewer, Audience: o.Audience, TTL: o.CacheTTL, Clock: o.Clock,
			Limiter: rate.NewLimiter(rate.Limit(o.ReviewRate), o.ReviewBurst)},
		seq:     map[types.UID]seqEntry{},
		waiters: map[types.NamespacedName]chan struct{}{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathTask, h.authed(h.task))
	mux.HandleFunc("POST "+PathReports, h.authed(h.report))
	mux.HandleFunc("GET "+PathMessages, h.authed(h.messages))
	mux.HandleFunc("POST "+PathMessages+"/{id}/ack", h.authed(h.ack))
	mux.HandleFunc("POST "+PathPullRequest, h.authed(h.limited(newPodLimiter(LimitPullRequest), h.pullRequest)))
	mux.HandleFunc("POST "+PathTranscript, h.authed(h.limited(newPodLimiter(LimitTranscript), h.transcript)))
	mux.HandleFunc(PathGit+"/", h.authed(h.limited(newPodLimiter(LimitGit), h.git)))
	h.mux = mux
	return h, nil
}

// AuthStats counts the channel's token reviews, prechecks and negative-cache hits.
func (h *Handler) AuthStats() AuthStats { return h.auth.Stats() }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Wake answers the session's waiting long polls now, for example after a message was added.
func (h *Handler) Wake(session types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch, ok := h.waiters[session]; ok {
		close(ch)
		delete(h.waiters, session)
	}
}

func (h *Handler) waiter(session types.NamespacedName) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.waiters[session]
	if !ok {
		ch = make(chan struct{})
		h.waiters[session] = ch
	}
	return ch
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, s Session)

// authed authenticates the token, reads its pod, and maps it to its session.
func (h *Handler) authed(next handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.o.RequestTimeout)
		defer cancel()
		if r.URL.Path != PathMessages && !strings.HasPrefix(r.URL.Path, PathGit+"/") {
			// Every call but the long poll and git (a first clone of a large repository) is
			// bounded as a whole; git bounds itself.
			r = r.WithContext(ctx)
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			h.fail(w, http.StatusUnauthorized, "missing bearer token")
			return
		}
		id, err := h.auth.Authenticate(ctx, strings.TrimSpace(token))
		if err != nil {
			if errors.Is(err, ErrUnauthenticated) {
				h.fail(w, http.StatusUnauthorized, err.Error())
				return
			}
			if errors.Is(err, ErrReviewBusy) {
				w.Header().Set("Retry-After", "1")
				h.fail(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			h.o.Log.Error(err, "Token review failed")
			h.fail(w, http.StatusServiceUnavailable, "token review failed; retry")
			return
		}
		var pod corev1.Pod
		key := types.NamespacedName{Namespace: id.Namespace, Name: id.PodName}
		err = h.o.Pods.Get(ctx, key, &pod)
		if h.o.LivePods != nil && (apierrors.IsNotFound(err) || err == nil && pod.UID != id.PodUID) {
			err = h.o.LivePods.Get(ctx, key, &pod)
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				h.fail(w, http.StatusUnauthorized, "the pod the token is bound to no longer exists")
				return
			}
			h.o.Log.Error(err, "Reading the runner's pod failed", "pod", id.PodName)
			h.fail(w, http.StatusServiceUnavailable, "could not read the pod; retry")
			return
		}
		if pod.UID != id.PodUID {
			h.fail(w, http.StatusUnauthorized, "the token is bound to an earlier pod of the same name")
			return
		}
		s, err := h.o.Identify(&pod)
		if err != nil {
			h.fail(w, http.StatusForbidden, err.Error())
			return
		}
		if !s.IsSession() && !strings.HasPrefix(r.URL.Path, PathGit+"/") {
			h.fail(w, http.StatusForbidden, fmt.Sprintf("pod %s/%s is a checkout pod: it may only use git", pod.Namespace, pod.Name))
			return
		}
		next(w, r, s)
	}
}

func (h *Handler) task(w http.ResponseWriter, r *http.Request, s Session) {
	t, err := h.o.Backend.Task(r.Context(), s)
	if err != nil {
		h.backendError(w, err)
		return
	}
	h.mu.Lock()
	if e := h.seq[s.PodUID]; e.last > t.LastSequence {
		t.LastSequence = e.last
	}
	h.mu.Unlock()
	h.ok(w, t)
}

var validActivity = map[agentsv1alpha1.ActivityState]bool{
	agentsv1alpha1.ActivityActive: true, agentsv1alpha1.ActivityReady: true, agentsv1alpha1.ActivityIdle: true,
	agentsv1alpha1.ActivityWaitingForInput: true, agentsv1alpha1.ActivityBlocked: true, agentsv1alpha1.ActivityExited: true,
}

var costRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

func validateReport(r *Report) error {
	switch {
	case r.Sequence == 0:
		return errors.New("sequence must be positive")
	case len(r.Summary) > 4096:
		return errors.New("summary longer than 4096 bytes")
	}
	if a := r.Activity; a != nil {
		if !validActivity[a.State] {
			return fmt.Errorf("unknown activity state %q", a.State)
		}
		if len(a.Question) > 4096 || len(a.Message) > 4096 {
			return errors.New("activity question or message longer than 4096 bytes")
		}
	}
	if r.Agent != nil && (len(r.Agent.SessionID) > 256 || len(r.Agent.Model) > 128) {
		return errors.New("agent session id or model too long")
	}
	if r.Usage != nil && r.Usage.CostUSD != "" && !costRE.MatchString(r.Usage.CostUSD) {
		return fmt.Errorf("costUSD %q is not a decimal number", r.Usage.CostUSD)
	}
	if r.Workspace != nil && r.Workspace.Setup != nil && len(r.Workspace.Setup.Error) > 4096 {
		return errors.New("setup error longer than 4096 bytes")
	}
	return nil
}

func (h *Handler) report(w http.ResponseWriter, r *http.Request, s Session) {
	var rep Report
	if !h.decode(w, r, &rep) {
		return
	}
	if err := validateReport(&rep); err != nil {
		h.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	// Hold the pod's lock across check, backend call and update, so two racing reports of one
	// pod cannot both pass the check; other pods are not held up.
	podLock, _ := h.podLocks.LoadOrStore(s.PodUID, &sync.Mutex{})
	podLock.(*sync.Mutex).Lock()
	defer podLock.(*sync.Mutex).Unlock()
	h.mu.Lock()
	e, seen := h.seq[s.PodUID]
	h.mu.Unlock()
	if seen && rep.Sequence <= e.last {
		h.replyJSON(w, http.StatusConflict, ErrorBody{
			Error:        fmt.Sprintf("report sequence %d is not after %d (replayed or out of order)", rep.Sequence, e.last),
			LastSequence: e.last})
		return
	}
	if err := h.o.Backend.Report(r.Context(), s, rep); err != nil {
		h.backendError(w, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.o.Clock.Now()
	h.seq[s.PodUID] = seqEntry{last: rep.Sequence, seen: now}
	// Forget pods not heard from for a day, so the map stays bounded.
	if len(h.seq) > 1000 {
		for uid, e := range h.seq {
			if now.Sub(e.seen) > 24*time.Hour {
				delete(h.seq, uid)
				h.podLocks.Delete(uid)
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) messages(w http.ResponseWriter, r *http.Request, s Session) {
	wait := time.Duration(0)
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			h.fail(w, http.StatusBadRequest, fmt.Sprintf("wait %q is not a duration", v))
			return
		}
		wait = min(d, h.o.MaxWait)
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait+h.o.RequestTimeout)
	defer cancel()
	deadline := h.o.Clock.Now().Add(wait)
	for {
		woken := h.waiter(s.NamespacedName)
		msgs, err := h.o.Backend.Pending(ctx, s)
		if err != nil {
			h.backendError(w, err)
			return
		}
		left := deadline.Sub(h.o.Clock.Now())
		if len(msgs) > 0 || left <= 0 {
			if msgs == nil {
				msgs = []Message{}
			}
			h.ok(w, MessageList{Messages: msgs})
			return
		}
		select {
		case <-woken:
		case <-h.o.Clock.After(min(left, h.o.PollInterval)):
		case <-ctx.Done():
			h.ok(w, MessageList{Messages: []Message{}})
			return
		}
	}
}

// messageIDRE accepts spec message ids (DNS labels) and the lifecycle's reaction message ids,
// which add dots ("ciFailed.a546db46f497.1") so that they never collide with spec ids.
var messageIDRE = regexp.MustCompile(`^[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?$`)

func (h *Handler) ack(w http.ResponseWriter, r *http.Request, s Session) {
	id := r.PathValue("id")
	if len(id) > 128 || !messageIDRE.MatchString(id) {
		h.fail(w, http.StatusBadRequest, fmt.Sprintf("message id %q is not valid", id))
		return
	}
	if err := h.o.Backend.Ack(r.Context(), s, id); err != nil {
		h.backendError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pullRequest(w http.ResponseWriter, r *http.Request, s Session) {
	var req PullRequestRequest
	if !h.decode(w, r, &req) {
		return
	}
	switch {
	case req.Branch == "" || req.Base == "" || req.Head == "":
		h.fail(w, http.StatusBadRequest, "branch, base and head are required")
		return
	case req.Title == "" || len(req.Title) > 256:
		h.fail(w, http.StatusBadRequest, "title must be 1 to 256 bytes")
		return
	case len(req.Body) > 65536:
		h.fail(w, http.StatusBadRequest, "body longer than 65536 bytes")
		return
	}
	res, err := h.o.Backend.OpenPullRequest(r.Context(), s, req)
	if err != nil {
		h.backendError(w, err)
		return
	}
	h.ok(w, res)
}

// git forwards smart HTTP to the caller's repository with the Project's credentials, which
// never leave the manager; pushes go to the session's branch only.
func (h *Handler) transcript(w http.ResponseWriter, r *http.Request, s Session) {
	if !s.IsSession() {
		h.fail(w, http.StatusForbidden, "a checkout pod has no transcript")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		h.fail(w, http.StatusUnsupportedMediaType, "content type must be application/json")
		return
	}
	b, err := transcript.DecodeBatch(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		h.fail(w, http.StatusBadRequest, "bad transcript batch: "+err.Error())
		return
	}
	before, err := h.o.Backend.Transcript(r.Context(), s, b)
	if err != nil {
		h.backendError(w, err)
		return
	}
	h.ok(w, transcript.BatchResult{Before: before})
}

func (h *Handler) git(w http.ResponseWriter, r *http.Request, s Session) {
	remote, err := h.o.Backend.GitRemote(r.Context(), s)
	if err != nil {
		h.backendError(w, err)
		return
	}
	u, err := url.Parse(remote.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		h.fail(w, http.StatusBadGateway, "the repository URL is not http(s): git over ssh is not proxied; use an https:// URL in spec.repository.url")
		return
	}
	p := &gitproxy.Proxy{
		Target: func(*http.Request) (gitproxy.Target, error) {
			return gitproxy.Target{URL: u, Header: remote.Header}, nil
		},
		Policy:    func(*http.Request) (gitproxy.Policy, error) { return gitproxy.BranchOnly(remote.Branch), nil },
		Transport: h.o.GitTransport,
		OnRefused: func(_ *http.Request, cmds []gitproxy.RefUpdate, err error) {
			refs := make([]string, 0, len(cmds))
			for _, c := range cmds {
				refs = append(refs, c.Ref)
			}
			h.o.Log.Info("Refused a push", "session", s.NamespacedName, "pod", s.PodName, "refs", refs, "reason", err.Error())
		},
	}
	http.StripPrefix(PathGit, p).ServeHTTP(w, r)
}

const maxBody = 1 << 20

func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		h.fail(w, http.StatusUnsupportedMediaType, "content type must be application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		h.fail(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	if dec.More() {
		h.fail(w, http.StatusBadRequest, "bad JSON body: trailing data")
		return false
	}
	return true
}

func (h *Handler) backendError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		h.fail(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrConflict):
		h.fail(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrInvalid):
		h.fail(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrForbidden):
		h.fail(w, http.StatusForbidden, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		h.fail(w, http.StatusGatewayTimeout, "the manager took too long; retry")
	default:
		h.o.Log.Error(err, "Runner request failed")
		h.fail(w, http.StatusInternalServerError, "internal error; retry")
	}
}

func (h *Handler) fail(w http.ResponseWriter, code int, msg string) {
	h.replyJSON(w, code, ErrorBody{Error: msg})
}

// ok answers 200 with v as JSON.
func (h *Handler) ok(w http.ResponseWriter, v any) { h.replyJSON(w, http.StatusOK, v) }

func (h *Handler) replyJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
