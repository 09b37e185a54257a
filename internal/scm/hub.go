package scm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// HubOptions configure a Hub.
type HubOptions struct {
	// Metrics is shared by every adapter and poller the Hub makes.
	Metrics *Metrics
	// Clock for adapters and pollers (default the real clock).
	Clock Clock
	// Poller holds the defaults of every poller; OnChange is required (the controller turns it
	// into reconcile requests).
	Poller PollerOptions
	Logger logr.Logger
}

// Hub shares one Provider and one Poller between all the sessions that use the same forge with the
// same credentials, so that their pull requests are batched together and spend one budget
// knowingly. It is the manager's single entry point: controllers Connect with a Project's
// Config, Watch their sessions' pull requests, and the webhook handler Notifies it.
type Hub struct {
	opts HubOptions

	mu    sync.Mutex
	conns map[string]*Connection
	byKey map[types.NamespacedName]*Connection
	ctx   context.Context // set once Start runs
}

// Connection is a Provider and the Poller that reads through it.
type Connection struct {
	Provider Provider
	Poller   *Poller
	id       string
	cancel   context.CancelFunc
}

// NewHub returns an empty Hub.
func NewHub(opts HubOptions) *Hub {
	opts.Clock = OrReal(opts.Clock)
	return &Hub{opts: opts, conns: map[string]*Connection{}, byKey: map[types.NamespacedName]*Connection{}}
}

// connectionID identifies credentials without keeping them: a digest of what makes two Configs
// reach the same budget.
func connectionID(cfg Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", cfg.Provider, cfg.APIURL)
	h.Write(cfg.Token)
	if cfg.App != nil {
		fmt.Fprintf(h, "\x00app:%d:%d\x00", cfg.App.AppID, cfg.App.InstallationID)
		h.Write(cfg.App.PrivateKey)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Connect returns the Connection for cfg, creating it on first use. A Project whose Secret
// changed gets a new Connection; the old one goes away with its last watched session.
func (h *Hub) Connect(cfg Config) (*Connection, error) {
	id := connectionID(cfg)
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.conns[id]; ok {
		return c, nil
	}
	cfg.Metrics = h.opts.Metrics
	if cfg.Clock == nil {
		cfg.Clock = h.opts.Clock
	}
	if cfg.Identity == "" {
		// Label each budget apart in metrics without revealing the credentials.
		if cfg.App != nil {
			cfg.Identity = fmt.Sprintf("installation-%d", cfg.App.InstallationID)
		} else {
			cfg.Identity = "token-" + id[:8]
		}
	}
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	po := h.opts.Poller
	po.Clock = cfg.Clock
	po.Metrics = h.opts.Metrics
	po.Provider = p.Name()
	po.Identity = cfg.Identity
	po.Logger = h.opts.Logger.WithValues("scm", p.Name(), "identity", po.Identity)
	c := &Connection{Provider: p, Poller: NewPoller(p, po), id: id}
	h.conns[id] = c
	if h.ctx != nil {
		h.startLocked(c)
	}
	return c, nil
}

func (h *Hub) startLocked(c *Connection) {
	ctx, cancel := context.WithCancel(h.ctx)
	c.cancel = cancel
	go func() { _ = c.Poller.Start(ctx) }()
}

// Watch follows a session's pull request through c, leaving any Connection it used before.
func (h *Hub) Watch(key types.NamespacedName, c *Connection, w Watch) {
	h.mu.Lock()
	old, moved := h.byKey[key]
	h.byKey[key] = c
	if moved && old != c {
		old.Poller.Forget(key)
		h.pruneLocked(old)
	}
	h.mu.Unlock()
	c.Poller.Register(key, w)
}

// Forget stops following a session (it finished or was deleted).
func (h *Hub) Forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.byKey[key]
	if !ok {
		return
	}
	delete(h.byKey, key)
	c.Poller.Forget(key)
	h.pruneLocked(c)
}

// pruneLocked drops a Connection nobody watches through any more.
func (h *Hub) pruneLocked(c *Connection) {
	if c.Poller.Len() > 0 {
		return
	}
	for _, other := range h.byKey {
		if other == c {
			return
		}
	}
	if c.cancel != nil {
		c.cancel()
	}
	delete(h.conns, c.id)
}

// Get returns the last observation of a session's pull request.
func (h *Hub) Get(key types.NamespacedName) (Observation, bool) {
	h.mu.Lock()
	c, ok := h.byKey[key]
	h.mu.Unlock()
	if !ok {
		return Observation{}, false
	}
	return c.Poller.Get(key)
}

// Observed hands the forge's answer to the manager's own call about a session's pull request to
// the session's Poller (Poller.Observed).
func (h *Hub) Observed(key types.NamespacedName, pr *PullRequest) {
	h.mu.Lock()
	c, ok := h.byKey[key]
	h.mu.Unlock()
	if ok {
		c.Poller.Observed(key, pr)
	}
}

// Notify passes a webhook hint to every poller (each ignores repositories it does not watch).
// Wire it as the webhook handler's OnHint.
func (h *Hub) Notify(hint Hint) {
	h.mu.Lock()
	conns := make([]*Connection, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.Poller.Notify(hint)
	}
}

// Start runs the pollers until ctx ends (a controller-runtime manager.Runnable).
func (h *Hub) Start(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	for _, c := range h.conns {
		h.startLocked(c)
	}
	h.mu.Unlock()
	<-ctx.Done()
	return nil
}

// NeedLeaderElection keeps polling to the elected manager.
func (h *Hub) NeedLeaderElection() bool { return true }
