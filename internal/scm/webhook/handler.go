// Package webhook receives GitHub and Gitea webhooks for the manager: it verifies each delivery's
// X-Hub-Signature-256 with the repository's secret, drops repeated deliveries and turns the
// supported events into scm.Hint values ("these pull requests need a look"). It trusts nothing in
// a payload beyond routing. Gitea's deliveries (webhook type "gitea") carry GitHub's headers too
// (X-GitHub-Event, X-GitHub-Delivery, X-Hub-Signature-256) besides its own X-Gitea-*; the handler
// reads either, and routes Gitea's event names (parse.go) to the same hints.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// Defaults.
const (
	// DefaultMaxBody is GitHub's own cap on payloads (25 MB).
	DefaultMaxBody = 25 << 20
	// DefaultDedupSize bounds the remembered delivery ids.
	DefaultDedupSize = 10000
)

// Options configure a Handler.
type Options struct {
	// Secret returns the webhook secret of a repository; false when Shepherd knows none (the
	// delivery is refused). The manager looks it up from the Projects of that repository.
	Secret func(repo scm.Repo) ([]byte, bool)
	// OnHint receives every verified delivery of a supported event (ping included, with an empty
	// hint, so that the Poller learns the repository's webhooks flow). It must not block long.
	OnHint func(scm.Hint)
	// MaxBody bounds a delivery's size (default 25 MB); larger ones get 413.
	MaxBody int64
	// DedupSize is how many delivery ids are remembered to drop redeliveries (default 10000).
	DedupSize int
	Metrics   *scm.Metrics
	Logger    logr.Logger
}

// Handler is the webhook endpoint (http.Handler).
type Handler struct {
	opts Options
	seen *lru.Cache[string, struct{}]
}

// NewHandler returns a Handler. Secret and OnHint are required.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Secret == nil || opts.OnHint == nil {
		return nil, errors.New("webhook handler: Secret and OnHint are required")
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.DedupSize <= 0 {
		opts.DedupSize = DefaultDedupSize
	}
	seen, err := lru.New[string, struct{}](opts.DedupSize)
	if err != nil {
		return nil, err
	}
	return &Handler{opts: opts, seen: seen}, nil
}

func (h *Handler) count(event, outcome string) {
	if h.opts.Metrics != nil {
		if !Supported(event) {
			event = "other" // keep the label's values bounded
		}
		h.opts.Metrics.WebhookDeliveries.WithLabelValues(event, outcome).Inc()
	}
}

// ServeHTTP verifies and routes one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	event := headerOr(r.Header, "X-GitHub-Event", "X-Gitea-Event")
	delivery := headerOr(r.Header, "X-GitHub-Delivery", "X-Gitea-Delivery")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.count(event, "too_large")
			http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
			return
		}
		h.count(event, "bad_request")
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	sig, ok := strings.CutPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
	if !ok && r.Header.Get("X-Hub-Signature-256") == "" {
		// Gitea's own header: the same HMAC-SHA256, hex without a prefix.
		sig = r.Header.Get("X-Gitea-Signature")
		ok = sig != ""
	}
	if !ok {
		h.count(event, "bad_signature")
		http.Error(w, "missing X-Hub-Signature-256", http.StatusUnauthorized)
		return
	}
	// The secret is per repository, so the repository is read before the signature is checked;
	// nothing else is read until it is.
	repo, err := repositoryOf(body)
	if err != nil {
		h.count(event, "bad_signature")
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	secret, ok := h.opts.Secret(repo)
	if !ok || !Verify(secret, body, sig) {
		h.count(event, "bad_signature")
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	// Only verified deliveries are remembered, so forged ids cannot evict real ones.
	if delivery != "" {
		if h.seen.Contains(delivery) {
			h.count(event, "duplicate")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "duplicate delivery\n")
			return
		}
		h.seen.Add(delivery, struct{}{})
	}
	if !Supported(event) {
		h.count(event, "ignored")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event ignored\n")
		return
	}
	hint, err := Parse(event, body)
	if err != nil {
		h.count(event, "bad_request")
		http.Error(w, "malformed payload", http.StatusBadRequest)
		return
	}
	if hint.Repo != repo {
		// The signed body names one repository; routing uses exactly that one.
		hint.Repo = repo
	}
	// Verified: the repository's webhooks flow (the Poller relaxes its safety net on that).
	hint.Webhook = true
	h.count(event, "accepted")
	h.opts.Logger.V(1).Info("Webhook delivery routed", "event", event, "delivery", delivery, "repository", repo.String())
	h.opts.OnHint(hint)
	w.WriteHeader(http.StatusAccepted)
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
	if len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(m.Sum(nil), got)
}
