// Package webhook receives GitHub and Gitea webhooks for the manager: it verifies each delivery's
// X-Hub-Signature-256 with the secret of the Project the delivery's path names, drops repeated
// deliveries and turns the supported events into scm.Hint values ("these pull requests need a
// look"). It trusts nothing in a payload beyond routing. Gitea's deliveries (webhook type
// "gitea") carry GitHub's headers too (X-GitHub-Event, X-GitHub-Delivery, X-Hub-Signature-256)
// besides its own X-Gitea-*; the handler reads either, and routes Gitea's event names (parse.go)
// to the same hints.
//
// The receiver answers the internet, so it decides as much as it can before it reads a byte of
// the body, and bounds what it reads (docs/security.md, "The webhook receiver"):
//
//   - each Project has its own path, /hooks/<namespace>/<project>, so the secret is known before
//     the body is read, and a delivery is verified against that one Project's secret, never one
//     chosen across namespaces by what the body claims;
//   - events Shepherd does not route (installation, installation_repositories, star, …) are
//     answered 200 from their header alone, before any lookup;
//   - a wrong content type is answered 415, a missing signature 401, a declared length above the
//     cap 413, all without reading the body;
//   - the body is read under a cap (MaxBody), a deadline (BodyTimeout) and a budget of bytes read
//     at once (MaxInFlight × MaxBody, each delivery reserving its declared length), and hashed as
//     it streams in;
//   - nothing in a body is parsed before its signature verifies.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Defaults.
const (
	// DefaultMaxBody caps a delivery. The routed events' real payloads are 4–18 KiB (GitHub's
	// documented examples and Gitea 1.26's deliveries in testdata); a push of thousands of files
	// lists every path and can reach hundreds of KiB. 1 MiB keeps a margin of 50× over the largest
	// sample while bounding what MaxInFlight deliveries can hold to 16 MiB. A larger delivery is
	// answered 413 and counted (too_large); polling still sees its change.
	DefaultMaxBody = 1 << 20
	// DefaultMaxInFlight sizes the memory the bodies being read may hold together:
	// DefaultMaxInFlight × MaxBody (16 MiB). Each delivery reserves its declared length (MaxBody
	// when it declares none) before its body is read, so 16 bodies at the cap, or hundreds of real
	// 10 KiB deliveries, are read at once; a slow sender holds only what it declared. Others wait
	// up to DefaultAdmitWait, then get 503 (forges show the failure and let a human redeliver).
	DefaultMaxInFlight = 16
	// DefaultAdmitWait is how long a delivery waits for a slot.
	DefaultAdmitWait = 5 * time.Second
	// DefaultBodyTimeout bounds reading one body: a slow sender holds its slot no longer.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultDedupSize bounds the remembered delivery ids.
	DefaultDedupSize = 10000
	// PathPrefix starts every Project's path: PathPrefix + "<namespace>/<project>".
	PathPrefix = "/hooks/"
)

// ErrUnknownProject is what Lookup returns for a path that names no Project receiving webhooks
// (none by that name, or one without spec.scm.webhookSecretRef).
var ErrUnknownProject = errors.New("no Project receives webhooks at this path")

// Target is what verifies and routes the deliveries of one path: the Project's repository and
// webhook secret.
type Target struct {
	Repo   scm.Repo
	Secret []byte
}

// Options configure a Handler.
type Options struct {
	// Lookup returns the Target of the Project at namespace/name; ErrUnknownProject when there is
	// none. The manager reads it from its cache (the Project, then its Secret).
	Lookup func(ctx context.Context, project types.NamespacedName) (Target, error)
	// OnHint receives every verified delivery of a supported event (ping included, with an empty
	// hint, so that the Poller learns the repository's webhooks flow). It must not block long.
	OnHint func(scm.Hint)
	// MaxBody bounds a delivery's size (default DefaultMaxBody); larger ones get 413.
	MaxBody int64
	// MaxInFlight × MaxBody bounds the bytes of bodies read at once (default DefaultMaxInFlight).
	MaxInFlight int
	// AdmitWait is how long a delivery waits for a slot (default DefaultAdmitWait).
	AdmitWait time.Duration
	// BodyTimeout bounds reading one body (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// DedupSize is how many delivery ids are remembered to drop redeliveries (default 10000).
	DedupSize int
	Metrics   *scm.Metrics
	Logger    logr.Logger
}

// Handler is the webhook endpoint (http.Handler).
type Handler struct {
	opts Options
	seen *lru.Cache[string, struct{}]
	// budget is the bytes of bodies that may be read at once; reserved counts what is taken.
	budget   *semaphore.Weighted
	reserved atomic.Int64
}

// minReserve is what a delivery reserves at least: its buffers beyond the body.
const minReserve = 4 << 10

// NewHandler returns a Handler. Lookup and OnHint are required.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Lookup == nil || opts.OnHint == nil {
		return nil, errors.New("webhook handler: Lookup and OnHint are required")
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.AdmitWait <= 0 {
		opts.AdmitWait = DefaultAdmitWait
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.DedupSize <= 0 {
		opts.DedupSize = DefaultDedupSize
	}
	seen, err := lru.New[string, struct{}](opts.DedupSize)
	if err != nil {
		return nil, err
	}
	return &Handler{opts: opts, seen: seen, budget: semaphore.NewWeighted(int64(opts.MaxInFlight) * opts.MaxBody)}, nil
}

// Outcomes, the values of the deliveries metric's outcome label.
const (
	outcomeAccepted     = "accepted"
	outcomeIgnored      = "ignored"
	outcomeDuplicate    = "duplicate"
	outcomeOtherRepo    = "other_repository"
	outcomeBadSignature = "bad_signature"
	outcomeBadRequest   = "bad_request"
	outcomeNotFound     = "not_found"
	outcomeMediaType    = "unsupported_media_type"
	outcomeTooLarge     = "too_large"
	outcomeBusy         = "busy"
	outcomeTimeout      = "timeout"
)

func (h *Handler) count(event, outcome string) {
	if h.opts.Metrics != nil {
		if !Supported(event) {
			event = "other" // keep the label's values bounded
		}
		h.opts.Metrics.WebhookDeliveries.WithLabelValues(event, outcome).Inc()
	}
}

// ProjectPath is the path a Project's deliveries go to.
func ProjectPath(project types.NamespacedName) string {
	return PathPrefix + project.Namespace + "/" + project.Name
}

// parsePath reads /hooks/<namespace>/<project>; both must be valid object names.
func parsePath(p string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(p, PathPrefix)
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, name, ok := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// refuse answers a delivery whose body was not read (or not to its end): the connection is
// closed after the answer, so the server does not wait to drain what a slow sender holds back.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Connection", "close")
	reply(w, status, msg)
}

func reply(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// ServeHTTP verifies and routes one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	event := headerOr(r.Header, "X-GitHub-Event", "X-Gitea-Event")
	key, ok := parsePath(r.URL.Path)
	if !ok {
		h.count(event, outcomeNotFound)
		refuse(w, http.StatusNotFound, "deliveries go to "+PathPrefix+"<namespace>/<project>: the Project's status.webhook.path")
		return
	}
	if event == "" {
		h.count(event, outcomeBadRequest)
		refuse(w, http.StatusBadRequest, "no X-GitHub-Event or X-Gitea-Event header")
		return
	}
	if !Supported(event) {
		// Installation, installation_repositories, star and the rest: Shepherd does not use them,
		// and saying so costs nothing (no lookup, no body read, no signature check).
		h.count(event, outcomeIgnored)
		refuse(w, http.StatusOK, "event ignored")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.count(event, outcomeMediaType)
		refuse(w, http.StatusUnsupportedMediaType, "the webhook's content type must be application/json (GitHub: Content type \"application/json\"; Gitea: POST Content Type \"application/json\")")
		return
	}
	sig, ok := signatureOf(r.Header)
	if !ok {
		h.count(event, outcomeBadSignature)
		refuse(w, http.StatusUnauthorized, "missing X-Hub-Signature-256: set the webhook's secret to the Project's spec.scm.webhookSecretRef")
		return
	}
	if r.ContentLength > h.opts.MaxBody {
		h.count(event, outcomeTooLarge)
		refuse(w, http.StatusRequestEntityTooLarge, "payload above "+strconv.FormatInt(h.opts.MaxBody, 10)+" bytes")
		return
	}
	target, err := h.opts.Lookup(r.Context(), key)
	if err != nil {
		h.count(event, outcomeNotFound)
		refuse(w, http.StatusNotFound, fmt.Sprintf("no Project %s receives webhooks (it needs spec.scm.webhookSecretRef)", key))
		return
	}
	reserve := r.ContentLength
	if reserve < 0 {
		reserve = h.opts.MaxBody
	}
	reserve = max(reserve, minReserve)
	if !h.admit(r.Context(), reserve) {
		h.count(event, outcomeBusy)
		w.Header().Set("Retry-After", "5")
		refuse(w, http.StatusServiceUnavailable, "too many deliveries at once; redeliver later")
		return
	}
	body, mac, err := h.read(w, r, target.Secret)
	h.reserved.Add(-reserve)
	h.budget.Release(reserve)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			h.count(event, outcomeTooLarge)
			refuse(w, http.StatusRequestEntityTooLarge, "payload above "+strconv.FormatInt(h.opts.MaxBody, 10)+" bytes")
		case errors.Is(err, os.ErrDeadlineExceeded):
			h.count(event, outcomeTimeout)
			refuse(w, http.StatusRequestTimeout, "body not received in time")
		default:
			h.count(event, outcomeBadRequest)
			refuse(w, http.StatusBadRequest, "cannot read body")
		}
		return
	}
	if !verifySum(target.Secret, mac, sig) {
		h.count(event, outcomeBadSignature)
		reply(w, http.StatusUnauthorized, "signature does not verify with the Project's webhook secret")
		return
	}
	// Only verified deliveries are remembered, so forged ids cannot evict real ones; the id is
	// remembered per Project, so one Project's deliveries cannot mask another's.
	if delivery := headerOr(r.Header, "X-GitHub-Delivery", "X-Gitea-Delivery"); delivery != "" {
		id := key.String() + "\x00" + delivery
		if h.seen.Contains(id) {
			h.count(event, outcomeDuplicate)
			reply(w, http.StatusOK, "duplicate delivery")
			return
		}
		h.seen.Add(id, struct{}{})
	}
	hint, err := Parse(event, body)
	if err != nil {
		h.count(event, outcomeBadRequest)
		reply(w, http.StatusBadRequest, "malformed payload")
		return
	}
	if !hint.Repo.IsZero() && !hint.Repo.Equal(target.Repo) {
		// An organisation's or an App's hook pointed at this Project sends every repository's
		// events: the others are not this Project's.
		h.count(event, outcomeOtherRepo)
		reply(w, http.StatusAccepted, "not this Project's repository: ignored")
		return
	}
	// The signed body names this Project's repository (or none: an organisation's ping); routing
	// uses the Project's own spelling of it, and reaches this namespace's sessions only.
	hint.Repo, hint.Namespace, hint.Webhook = target.Repo, key.Namespace, true
	h.count(event, outcomeAccepted)
	h.opts.Logger.V(1).Info("Webhook delivery routed", "event", event, "project", key.String(), "repository", target.Repo.String())
	h.opts.OnHint(hint)
	reply(w, http.StatusAccepted, "accepted")
}

// admit reserves n bytes of the budget for reading a body, waiting up to AdmitWait.
func (h *Handler) admit(ctx context.Context, n int64) bool {
	if !h.budget.TryAcquire(n) {
		actx, cancel := context.WithTimeout(ctx, h.opts.AdmitWait)
		defer cancel()
		if h.budget.Acquire(actx, n) != nil {
			return false
		}
	}
	h.reserved.Add(n)
	return true
}

// Reserved is the bytes of bodies being read now (tests and benchmarks watch its peak).
func (h *Handler) Reserved() int64 { return h.reserved.Load() }

// read reads the body under the cap and the deadline, hashing it as it streams in.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, secret []byte) ([]byte, hash.Hash, error) {
	// The deadline is the connection's; a recorder in tests has none, and that is fine.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	mac := hmac.New(sha256.New, secret)
	size := r.ContentLength
	if size < 0 || size > h.opts.MaxBody {
		size = 0
	}
	// Sized from Content-Length (already bounded), so an honest body is one allocation.
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	_, err := buf.ReadFrom(io.TeeReader(http.MaxBytesReader(w, r.Body, h.opts.MaxBody), mac))
	return buf.Bytes(), mac, err
}

// signatureOf returns the delivery's hex HMAC-SHA256: GitHub's X-Hub-Signature-256
// ("sha256=<hex>"), or Gitea's X-Gitea-Signature (hex alone).
func signatureOf(hd http.Header) (string, bool) {
	if v := hd.Get("X-Hub-Signature-256"); v != "" {
		return strings.CutPrefix(v, "sha256=")
	}
	v := hd.Get("X-Gitea-Signature")
	return v, v != ""
}

// headerOr returns the first of the headers that is set.
func headerOr(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// Sign returns the X-Hub-Signature-256 value of body ("sha256=<hex>").
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether hexSig (without "sha256=") is body's HMAC-SHA256 under secret,
// comparing in constant time.
func Verify(secret, body []byte, hexSig string) bool {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return verifySum(secret, m, hexSig)
}

// verifySum compares a finished HMAC with hexSig in constant time. An empty secret verifies
// nothing.
func verifySum(secret []byte, m hash.Hash, hexSig string) bool {
	if len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	return hmac.Equal(m.Sum(nil), got)
}
