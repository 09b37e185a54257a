package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Every replica listens on the runner channel and the webhook receiver (the Services select them
// all), but only the elected one holds the state they feed: the runner reports, the message
// queues, the Poller's hints. A standby forwards each request to the leader, found through the
// leader-election Lease: each replica stamps its own address on the Lease with every write it
// makes to it (controller-runtime's LeaderElectionLabels), so the labels of a held Lease name its
// holder. During a leader change the standby holds the request and retries until a leader answers
// or it is elected itself, so a leader change loses no call (docs/operations.md, high
// availability).
const (
	LabelLeaderAddress     = "agents.shepherd.dev/leader-address"
	LabelLeaderRunnerPort  = "agents.shepherd.dev/leader-runner-port"
	LabelLeaderWebhookPort = "agents.shepherd.dev/leader-webhook-port"

	// forwardedHeader marks a request a standby forwarded: a replica that is not the leader
	// answers it 503 with notLeaderHeader instead of forwarding it again.
	forwardedHeader = "X-Shepherd-Forwarded"
	notLeaderHeader = "X-Shepherd-Not-Leader"

	// leaderCacheTTL is how long a standby trusts the Lease it read.
	leaderCacheTTL = time.Second
	// forwardBuffered is the largest body a standby holds to replay on a retry; a larger one (a
	// git push) is streamed once.
	forwardBuffered = 1 << 20
)

// LeaderLabels are the Lease labels a replica serving at ip stamps on the Lease: its address and
// its runner channel and webhook receiver ports (empty when a server is off). An IPv6 address is
// written as 32 hex digits (a label value holds no ':').
func LeaderLabels(ip string, runnerPort, webhookPort int) (map[string]string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, fmt.Errorf("the replica's address %q (POD_IP): %w", ip, err)
	}
	a = a.Unmap()
	v := a.String()
	if a.Is6() {
		b := a.As16()
		v = hex.EncodeToString(b[:])
	}
	out := map[string]string{LabelLeaderAddress: v}
	if runnerPort > 0 {
		out[LabelLeaderRunnerPort] = strconv.Itoa(runnerPort)
	}
	if webhookPort > 0 {
		out[LabelLeaderWebhookPort] = strconv.Itoa(webhookPort)
	}
	return out, nil
}

// errNoLeader: the Lease is free, expired or names no address; a leader change is under way.
var errNoLeader = errors.New("no leader holds the Lease")

// leaderLocator reads where the leader serves from the Lease.
type leaderLocator struct {
	reader  client.Reader
	lease   types.NamespacedName
	elected <-chan struct{}
	now     func() time.Time

	mu   sync.Mutex
	at   time.Time
	read *coordinationv1.Lease
}

// isLeader reports whether this replica is the elected one.
func (l *leaderLocator) isLeader() bool {
	select {
	case <-l.elected:
		return true
	default:
		return false
	}
}

// address returns host:port of the leader's server whose port label is portLabel; fresh skips
// the cached Lease (the last answer failed).
func (l *leaderLocator) address(ctx context.Context, portLabel string, fresh bool) (string, error) {
	lease, err := l.get(ctx, fresh)
	if err != nil {
		return "", err
	}
	return leaderAddress(lease, portLabel, l.now())
}

// leaderAddress is where the holder of lease serves the server whose port label is portLabel.
func leaderAddress(lease *coordinationv1.Lease, portLabel string, now time.Time) (string, error) {
	s := lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil ||
		now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds)*time.Second)) {
		return "", errNoLeader
	}
	host, port := lease.Labels[LabelLeaderAddress], lease.Labels[portLabel]
	if host == "" || port == "" {
		return "", fmt.Errorf("%w: the Lease %s/%s names no address (is POD_IP set?)", errNoLeader, lease.Namespace, lease.Name)
	}
	if len(host) == 32 {
		if b, err := hex.DecodeString(host); err == nil {
			host = netip.AddrFrom16([16]byte(b)).String()
		}
	}
	return net.JoinHostPort(host, port), nil
}

func (l *leaderLocator) get(ctx context.Context, fresh bool) (*coordinationv1.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !fresh && l.read != nil && l.now().Sub(l.at) < leaderCacheTTL {
		return l.read, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease := &coordinationv1.Lease{}
	if err := l.reader.Get(rctx, l.lease, lease); err != nil {
		return nil, fmt.Errorf("read the leader-election Lease %s: %w", l.lease, err)
	}
	l.read, l.at = lease, l.now()
	return lease, nil
}

// toLeader serves a request on the leader and forwards it there from a standby.
type toLeader struct {
	name      string
	locator   *leaderLocator
	portLabel string
	local     http.Handler
	// scheme is http or https; transport, for https, trusts the manager's own CA.
	scheme    string
	transport func() (http.RoundTripper, error)
	// budget is how long a standby keeps trying to hand a request over (a leader change takes
	// a few seconds when the old leader releases its Lease, up to its duration when it died).
	budget time.Duration
	// slots bounds the requests a standby holds at once (each up to forwardBuffered).
	slots chan struct{}
	log   logr.Logger
}

func (h *toLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.locator.isLeader() {
		h.local.ServeHTTP(w, r)
		return
	}
	if r.Header.Get(forwardedHeader) != "" {
		// Forwarded by a standby that took this replica for the leader: it asks again.
		w.Header().Set(notLeaderHeader, "1")
		http.Error(w, "this replica is not the leader", http.StatusServiceUnavailable)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests waiting for the leader", http.StatusServiceUnavailable)
		return
	}
	// The body is held so that it can be sent again to the next leader; a large one streams once.
	head, err := io.ReadAll(io.LimitReader(r.Body, forwardBuffered+1))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	replayable := len(head) <= forwardBuffered
	ctx, cancel := context.WithTimeout(r.Context(), h.budget)
	defer cancel()
	wait := 50 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		if h.locator.isLeader() {
			r.Body = io.NopCloser(bytes.NewReader(head))
			if !replayable {
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(head), r.Body))
			}
			h.local.ServeHTTP(w, r)
			return
		}
		var sent bool
		sent, last = h.forward(ctx, w, r, head, replayable, attempt > 0)
		if last == nil {
			return
		}
		if sent && !replayable {
			// A streamed body (a git push) went to a leader that did not answer: it cannot be
			// sent again; the client repeats it.
			http.Error(w, last.Error(), http.StatusBadGateway)
			return
		}
		select {
		case <-ctx.Done():
			h.log.Info("No leader took the request in time", "server", h.name, "path", r.URL.Path, "reason", last.Error())
			w.Header().Set("Retry-After", "1")
			http.Error(w, "no leader answered: "+last.Error(), http.StatusServiceUnavailable)
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// forward sends the request to the leader once. It returns nil when an answer was relayed; sent
// when the body was handed to a leader (a streamed body cannot be sent again).
func (h *toLeader) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, head []byte, replayable, fresh bool) (sent bool, err error) {
	addr, err := h.locator.address(ctx, h.portLabel, fresh)
	if err != nil {
		return false, err
	}
	rt, err := h.transport()
	if err != nil {
		return false, err
	}
	var failed error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = h.scheme, addr
			pr.Out.Header.Set(forwardedHeader, "1")
			pr.SetXForwarded()
		},
		Transport:     rt,
		FlushInterval: -1, // the runner's long poll answers when a message arrives
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(notLeaderHeader) != "" {
				return errNoLeader
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
	}
	out := r.Clone(ctx)
	out.Body = io.NopCloser(bytes.NewReader(head))
	out.ContentLength = int64(len(head))
	if !replayable {
		out.Body, out.ContentLength = io.NopCloser(io.MultiReader(bytes.NewReader(head), r.Body)), r.ContentLength
	}
	proxy.ServeHTTP(w, out)
	if failed != nil {
		return true, fmt.Errorf("forward to the leader at %s: %w", addr, failed)
	}
	return true, nil
}

// leaderTransport is the standby's transport to the leader: plain, or TLS trusting the manager's
// own CA for the runner channel's name (every replica serves the same certificate).
type leaderTransport struct {
	ca         *runnerCA
	serverName string

	mu   sync.Mutex
	pem  []byte
	last http.RoundTripper
}

func (t *leaderTransport) get() (http.RoundTripper, error) {
	base := func() *http.Transport {
		return &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 0, // the long poll
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       time.Minute,
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ca == nil {
		if t.last == nil {
			t.last = base()
		}
		return t.last, nil
	}
	pem := t.ca.get()
	if pem == nil {
		return nil, errors.New("the runner channel's CA is not loaded yet")
	}
	if t.last != nil && bytes.Equal(pem, t.pem) {
		return t.last, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("the runner channel's CA does not parse")
	}
	tr := base()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: t.serverName, MinVersion: tls.VersionTLS12}
	t.pem, t.last = pem, tr
	return tr, nil
}

// runnerServerName is the name the runner channel's certificate carries and agent pods dial: the
// runner URL's host.
func runnerServerName(runnerURL string) string {
	u, err := url.Parse(runnerURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
