package controller

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/metrics"
	"github.com/shepherd-dev/shepherd/internal/netguard"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/runnertls"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// Deps is what the reconcilers share: the clients, the forge hub, the runner reports, the
// notification dispatcher and the metrics. The manager builds one and hands it to every
// reconciler.
type Deps struct {
	// Client writes through a metrics.CountingClient, so that every API write is counted.
	Client    client.Client
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Secrets   *SecretReader
	Hub       *scm.Hub
	// Notifier delivers notifications outside the cluster; nil delivers none.
	Notifier *notify.Dispatcher
	// Reports holds the runners' latest reports.
	Reports *ReportStore
	// Transcripts holds each session's transcript window, streamed by its runner.
	Transcripts *transcript.Store
	// runnerCerts is the runner channel's serving certificate (nil without TLS), which the UI
	// server shares; onCA hears of a new runner CA (the APIService's caBundle follows it).
	runnerCerts *runnertls.Certificates
	caMu        sync.Mutex
	onCA        []func()
	// Issues holds what the Projects' trackers said of their sessions' issues (closed ones);
	// nil watches none.
	Issues *issueWatch
	// Deliveries collects notification results for the sessions and the Projects' status.
	Deliveries *deliveryResults
	// Prices turn metered tokens into dollars (the shipped defaults under the operator's table).
	Prices pricing.Table
	// Now is the clock (time.Now in production; tests may inject one).
	Now func() time.Time
	// Options are the manager's settings that shape children.
	Options Options
	// Metrics are the manager's own metrics; nil records none.
	Metrics *metrics.Metrics
	// SCMMetrics count forge and tracker requests.
	SCMMetrics *scm.Metrics
	// RunnerCA is the runner channel's CA certificate, published in the Projects' namespaces;
	// nil when the channel is plain HTTP (tests, a manager outside the cluster).
	RunnerCA *runnerCA
	// Outbound is the transport of the manager's calls to addresses a Project names, through
	// Options.Outbound (Setup makes it once, so its connections are pooled); nil: the adapters'
	// default.
	Outbound http.RoundTripper

	trackerMu sync.Mutex
	// trackers keeps one tracker per Project, so that its HTTP client (ETag cache, rate-limit
	// state) lives across reconciles: an unchanged backlog query is answered 304.
	trackers map[types.NamespacedName]cachedTracker
}

type cachedTracker struct {
	digest  string
	tracker tracker.Tracker
}

// Options are settings from the manager's flags.
type Options struct {
	// DashboardURL is where people reach the API server's paths for the dashboard
	// (`kubectl shepherd dashboard`'s http://127.0.0.1:8001 by default): notifications link
	// each session's page under it. Empty links none.
	DashboardURL string
	// RunnerImage holds the runner binary (copied into agent containers) and git.
	RunnerImage string
	// AgentImages are the default images per agent type, used when neither the session nor the
	// Project names one.
	AgentImages map[agentsv1alpha1.AgentType]string
	// RunnerURL is the manager's runner endpoint as seen from agent pods.
	RunnerURL string
	// ManagerNamespace, ManagerPodLabels and RunnerPort locate the manager's pods for the
	// egress NetworkPolicy of a Project that restricts egress: agent pods must still reach the
	// runner channel. Without a namespace (a manager outside the cluster), the policy allows
	// RunnerURL's host when it is an IP address.
	ManagerNamespace string
	ManagerPodLabels map[string]string
	RunnerPort       int32
	// ImagePullPolicy of the children's containers (IfNotPresent unless set).
	ImagePullPolicy string
	// EgressProxyURL is the egress proxy as agent pods reach it (http://<address>:3128): the
	// agent's HTTP(S)_PROXY, and the runner's way to a named model API. Empty: none, and agent
	// pods reach only what the Project's egress CIDRs open.
	EgressProxyURL string
	// EgressProxyPodLabels and EgressProxyPort locate the egress proxy's pods (in
	// ManagerNamespace) for the agent pods' NetworkPolicy.
	EgressProxyPodLabels map[string]string
	EgressProxyPort      int32
	// DNSNamespace and DNSPodLabels select the cluster's DNS pods, the only DNS servers agent
	// pods may ask (kube-system, k8s-app=kube-dns by default).
	DNSNamespace string
	DNSPodLabels map[string]string
	// ClusterCIDRs are the cluster's pod and service ranges, and DeniedCIDRs other ranges an
	// agent may not reach unless a Project names them (link-local: cloud metadata). A Project's
	// egress CIDR that contains one excepts it.
	ClusterCIDRs []string
	DeniedCIDRs  []string
	// Outbound guards the manager's own calls to addresses Projects name (forge and tracker
	// APIs, notifications, the repository behind the git proxy); nil calls anything (tests).
	Outbound *netguard.Guard
	// AccessCheckInterval is how often a Project's repository access is re-checked.
	AccessCheckInterval time.Duration
	// SessionCountDelay is how long the Project controller lets session phase changes gather
	// before it counts them again (default 1s): one status write per burst, not per change. A
	// Project of more than a thousand sessions waits longer (coalesceDelay).
	SessionCountDelay time.Duration
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// caChanged tells the listeners that the runner CA changed.
func (d *Deps) caChanged() {
	d.caMu.Lock()
	fs := append([]func(){}, d.onCA...)
	d.caMu.Unlock()
	for _, f := range fs {
		f()
	}
}

func (d *Deps) onCAChange(f func()) {
	d.caMu.Lock()
	defer d.caMu.Unlock()
	d.onCA = append(d.onCA, f)
}
