// Command manager runs Shepherd's controllers.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/memlimit"
	"github.com/shepherd-dev/shepherd/internal/netguard"
	"github.com/shepherd-dev/shepherd/internal/pricing"
	"github.com/shepherd-dev/shepherd/internal/restmapcache"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"

	// The forge and tracker adapters, as the manager registers them.
	_ "github.com/shepherd-dev/shepherd/internal/adapters"
)

// serviceAddress reads a Service of the manager's namespace and returns its cluster IP and the
// port that targets bind (or is named name), with the names a certificate for it must hold.
// priceTable is the shipped defaults under the operator's table: the file when one is named,
// else the ConfigMap's prices.json when it exists. A table that does not parse stops the
// manager: costs computed from half a table would be wrong without saying so.
func priceTable(cfg *rest.Config, namespace, configMap, file string) (pricing.Table, error) {
	if file != "" {
		t, err := pricing.Load(file)
		if err != nil {
			return pricing.Table{}, fmt.Errorf("--price-table: %w", err)
		}
		return t, nil
	}
	if namespace == "" || configMap == "" {
		return pricing.Defaults(), nil
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return pricing.Table{}, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: configMap}, &cm); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return pricing.Defaults(), nil
		}
		return pricing.Table{}, fmt.Errorf("read the price table ConfigMap %s/%s: %w", namespace, configMap, err)
	}
	raw, ok := cm.Data["prices.json"]
	if !ok {
		return pricing.Table{}, fmt.Errorf("the price table ConfigMap %s/%s has no key prices.json", namespace, configMap)
	}
	t, err := pricing.Overlay([]byte(raw))
	if err != nil {
		return pricing.Table{}, fmt.Errorf("the price table ConfigMap %s/%s: %w", namespace, configMap, err)
	}
	return t, nil
}

func serviceAddress(cfg *rest.Config, namespace, svcName, portName, bind string) (ip string, port int32, dnsNames []string, err error) {
	if namespace == "" {
		return "", 0, nil, fmt.Errorf("run in a pod with POD_NAMESPACE set so that Service %s can be found, or set the URL flag", svcName)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return "", 0, nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: svcName}, &svc); err != nil {
		return "", 0, nil, fmt.Errorf("read the Service %s/%s (or set the URL flag): %w", namespace, svcName, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return "", 0, nil, fmt.Errorf("the Service %s/%s has no cluster IP and port", namespace, svcName)
	}
	_, bindPort, _ := net.SplitHostPort(bind)
	port = svc.Spec.Ports[0].Port
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.String() == bindPort || p.Name == portName {
			port = p.Port
		}
	}
	dnsNames = []string{svcName + "." + namespace + ".svc", svcName + "." + namespace + ".svc.cluster.local"}
	return svc.Spec.ClusterIP, port, dnsNames, nil
}

// runnerURLFromService is the runner channel's URL from its Service's cluster IP (agent pods
// need no cluster DNS), https unless TLS is off, and the names its certificate must hold.
func runnerURLFromService(cfg *rest.Config, namespace, name, bind string, useTLS bool) (string, []string, error) {
	ip, port, names, err := serviceAddress(cfg, namespace, name, "runner", bind)
	if err != nil {
		return "", nil, err
	}
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(ip, fmt.Sprint(port))), append(names, ip), nil
}

// cacheOptions selects what the manager caches: only its own children among pods, volumes,
// service accounts and network policies (by the managed-by label), so that memory does not grow
// with the cluster.
func cacheOptions(namespaces map[string]cache.Config) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue})
	return cache.Options{
		DefaultNamespaces: namespaces,
		// Nothing in the manager reads managedFields; without them each cached object is about
		// half the size, which is most of the manager's memory in a fan-out of thousands.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Label: managed, Transform: slimPod},
			&corev1.PersistentVolumeClaim{}: {Label: managed},
			&corev1.ServiceAccount{}:        {Label: managed},
			&networkingv1.NetworkPolicy{}:   {Label: managed},
			&corev1.ConfigMap{}:             {Label: managed},
		},
	}
}

// slimPod keeps of a cached pod what the manager reads: its metadata, its node and its status.
// The spec of an agent pod (three containers, their environment, mounts and security contexts)
// is most of its size, and the manager builds specs, it never reads them back (docs/performance.md
// measures the memory of a fan-out of thousands). Pods are only created and deleted, never
// updated from the cache, so nothing writes a slimmed spec back.
func slimPod(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.ManagedFields = nil
		pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName, ServiceAccountName: pod.Spec.ServiceAccountName}
	}
	return obj, nil
}

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(agentsv1alpha1.AddToScheme(scheme))
}

// options are the manager's command-line settings.
type options struct {
	metricsAddr     string
	probeAddr       string
	pprofAddr       string
	memLimitRatio   float64
	leaderElect     bool
	leaderElectID   string
	leaderElectNS   string
	watchNamespaces string
	secureMetrics   bool
	metricsCertDir  string
	enableHTTP2     bool

	runnerAddr       string
	runnerTLS        bool
	runnerTLSNames   string
	managerPodLabels string
	webhookAddr      string
	webhookMaxBody   int64
	runnerURL        string
	runnerService    string
	egressProxyURL   string
	egressService    string
	egressPodLabels  string
	egressPort       int
	dnsNamespace     string
	dnsPodLabels     string
	clusterCIDRs     string
	outboundAllow    string
	deniedCIDRs      string
	runnerImage      string
	agentImages      string
	uiAddr           string
	dashboardURL     string
	uiService        string
	imagePullPolicy  string
	priceTable       string
	priceTableCM     string

	kubeAPIQPS    float64
	kubeAPIBurst  int
	maxConcurrent int
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address Go's /debug/pprof handlers bind to, for profiling (\"\" or \"0\": off). Unauthenticated: bind it to loopback.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectID, "leader-election-id", "shepherd-manager.agents.shepherd.dev", "Name of the Lease used for leader election.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the manager's own namespace.")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS to clients whose bearer token the API server authenticates and authorises for GET /metrics (the metrics-reader ClusterRole; needs the metrics-auth RBAC in config/rbac). Off serves plain HTTP to anyone: only for a loopback address in development.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory with the metrics endpoint's tls.crt and tls.key (a cert-manager Certificate's Secret, for example); empty serves a self-signed certificate made at start.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics server (off by default: CVE-2023-44487, rapid reset).")
	fs.StringVar(&o.runnerAddr, "runner-bind-address", ":8090", "Address the runner channel (agent pods → manager) binds to; \"0\" disables it.")
	fs.BoolVar(&o.runnerTLS, "runner-tls", true, "Serve the runner channel over TLS with a certificate of the manager's own CA (kept in the Secret shepherd-runner-tls of $POD_NAMESPACE, published to agent pods as the ConfigMap shepherd-runner-ca). Off only for development.")
	fs.StringVar(&o.runnerTLSNames, "runner-tls-names", "", "More DNS names or IP addresses for the runner channel's certificate (comma-separated), besides the runner Service's names and cluster IP and --runner-url's host.")
	fs.StringVar(&o.managerPodLabels, "manager-pod-labels", "app.kubernetes.io/name=shepherd,app.kubernetes.io/component=manager",
		"Labels of the manager's own pods (key=value,...): a Project's egress NetworkPolicy lets agent pods reach the pods with these labels in $POD_NAMESPACE on the runner port.")
	fs.StringVar(&o.uiAddr, "ui-bind-address", "0", "Address the transcript API and dashboard bind to (an aggregated API: the APIService v1alpha1.ui.agents.shepherd.dev sends the API server's requests to --ui-service); \"0\" disables it. Needs --runner-tls (the certificate is the runner channel's) and the API server's aggregation layer.")
	fs.StringVar(&o.dashboardURL, "dashboard-url", "http://127.0.0.1:8001", "Where people reach the API server's paths for the dashboard: notifications link each session's page under it (the default is `kubectl shepherd dashboard`'s address); empty links none.")
	fs.StringVar(&o.uiService, "ui-service", "shepherd-api", "Service (in $POD_NAMESPACE) the APIService names: its DNS names go into the certificate.")
	fs.StringVar(&o.webhookAddr, "webhook-bind-address", ":8091", "Address the forge webhook receiver binds to; \"0\" disables it.")
	fs.Int64Var(&o.webhookMaxBody, "webhook-max-body-bytes", webhook.DefaultMaxBody, "Largest webhook delivery the receiver reads; larger ones are answered 413 (polling still sees their change).")
	fs.StringVar(&o.runnerURL, "runner-url", "", "URL of the runner channel as agent pods reach it; empty derives it from --runner-service.")
	fs.StringVar(&o.runnerService, "runner-service", "shepherd-runner", "Service (in the manager's namespace, from $POD_NAMESPACE) that exposes the runner channel; its cluster IP becomes the runner URL, so agent pods need no cluster DNS.")
	fs.StringVar(&o.egressProxyURL, "egress-proxy-url", "", "URL of the egress proxy as agent pods reach it (http://address:3128); empty derives it from --egress-proxy-service, \"none\" runs without one (agent pods then reach only the CIDRs Projects open).")
	fs.StringVar(&o.egressService, "egress-proxy-service", "shepherd-egress-proxy", "Service (in $POD_NAMESPACE) of the egress proxy; its cluster IP becomes the proxy URL.")
	fs.StringVar(&o.egressPodLabels, "egress-proxy-pod-labels", "app.kubernetes.io/name=shepherd,app.kubernetes.io/component=egress-proxy",
		"Labels of the egress proxy's pods (key=value,...), which the agent pods' NetworkPolicy lets them reach.")
	fs.IntVar(&o.egressPort, "egress-proxy-port", 3128, "Port of the egress proxy's pods.")
	fs.StringVar(&o.dnsNamespace, "dns-namespace", "kube-system", "Namespace of the cluster's DNS pods, the only DNS servers agent pods may ask.")
	fs.StringVar(&o.dnsPodLabels, "dns-pod-labels", "k8s-app=kube-dns", "Labels of the cluster's DNS pods (key=value,...).")
	fs.StringVar(&o.outboundAllow, "outbound-allow-cidrs", "", "Ranges the manager may call at addresses Projects name (scm.apiURL, tracker.linear.apiURL, notification URLs, the repository URL) although they are loopback, link-local or the cluster's own (comma-separated CIDRs): an in-cluster forge, a forge on loopback in development. Empty: those are refused (docs/security.md).")
	fs.StringVar(&o.clusterCIDRs, "cluster-cidrs", "", "The cluster's pod and service ranges and the API server's addresses (comma-separated): a Project's egress CIDR that contains one excepts it unless it lies within it. Empty: read from the nodes' pod ranges, the ServiceCIDRs and the kubernetes Service's endpoints at start.")
	fs.StringVar(&o.deniedCIDRs, "denied-cidrs", "169.254.0.0/16,fe80::/10,100.64.0.0/10", "Ranges agent pods may not reach even inside a wider egress CIDR a Project opens (cloud metadata), unless the Project names them.")
	fs.StringVar(&o.runnerImage, "runner-image", "shepherd-runner:latest", "Image holding the runner binary, copied into every agent pod.")
	fs.StringVar(&o.agentImages, "agent-images", "claude-code=shepherd-agent-claude-code:latest,codex=shepherd-agent-codex:latest,opencode=shepherd-agent-opencode:latest,gemini=shepherd-agent-gemini:latest,aider=shepherd-agent-aider:latest",
		"Default image per agent type (type=image, comma-separated), used when neither the session nor the Project names one.")
	fs.StringVar(&o.imagePullPolicy, "image-pull-policy", "IfNotPresent", "Pull policy of agent and runner containers.")
	fs.StringVar(&o.priceTable, "price-table", "", "A JSON price table file (docs/cost.md) laid over the shipped defaults: models it names take its prices, USD per million tokens of each kind. Empty: --price-table-configmap.")
	fs.StringVar(&o.priceTableCM, "price-table-configmap", "shepherd-price-table", "A ConfigMap in $POD_NAMESPACE whose key prices.json is the price table laid over the defaults, read at start; absent (or unreadable): the shipped defaults alone.")
	fs.Float64Var(&o.memLimitRatio, "memory-limit-ratio", memlimit.DefaultRatio, "Share of the container's memory limit (its cgroup's) the Go runtime keeps its memory under, collecting harder near it rather than being killed at the limit; GOMEMLIMIT, when set, wins; 0: the runtime's default (no soft limit).")
	// client-go's own defaults (5 QPS, burst 10; controller-runtime raises them to 20/30) throttle
	// a fan-out of thousands of sessions long before the API server is busy: a session costs a
	// few writes to reach Working. docs/performance.md measures these settings.
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 100, "Queries per second the manager's Kubernetes client may send on average.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 200, "Queries the manager's Kubernetes client may send in a burst above --kube-api-qps.")
	fs.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", 16, "Reconciles each controller runs at once (different objects only; one object is never reconciled twice at the same time).")
}

// validate checks the numeric settings.
func (o *options) validate() error {
	switch {
	case o.kubeAPIQPS <= 0:
		return fmt.Errorf("--kube-api-qps must be more than 0, not %v", o.kubeAPIQPS)
	case o.kubeAPIBurst < 1:
		return fmt.Errorf("--kube-api-burst must be at least 1, not %d", o.kubeAPIBurst)
	case o.maxConcurrent < 1 || o.maxConcurrent > 64:
		return fmt.Errorf("--max-concurrent-reconciles must be between 1 and 64, not %d", o.maxConcurrent)
	case o.memLimitRatio < 0 || o.memLimitRatio > 1:
		return fmt.Errorf("--memory-limit-ratio must be between 0 and 1, not %v", o.memLimitRatio)
	}
	return nil
}

// images parses --agent-images.
func (o *options) images() (map[agentsv1alpha1.AgentType]string, error) {
	out := map[agentsv1alpha1.AgentType]string{}
	for _, kv := range strings.Split(o.agentImages, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--agent-images: %q is not type=image", kv)
		}
		out[agentsv1alpha1.AgentType(k)] = v
	}
	return out, nil
}

// namespaces parses --watch-namespaces into the cache's per-namespace configuration.
func (o *options) namespaces() (map[string]cache.Config, error) {
	if strings.TrimSpace(o.watchNamespaces) == "" {
		return nil, nil
	}
	out := map[string]cache.Config{}
	for _, ns := range strings.Split(o.watchNamespaces, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			return nil, errors.New("--watch-namespaces has an empty entry")
		}
		out[ns] = cache.Config{}
	}
	return out, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "egress-proxy" {
		zapOpts := zap.Options{}
		ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
		if err := runEgressProxy(os.Args[2:]); err != nil {
			ctrl.Log.Error(err, "Egress proxy exited with an error")
			os.Exit(1)
		}
		return
	}
	var o options
	o.bind(flag.CommandLine)
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(o); err != nil {
		ctrl.Log.Error(err, "Manager exited with an error")
		os.Exit(1)
	}
}

func run(o options) error {
	log := ctrl.Log.WithName("setup")
	if err := o.validate(); err != nil {
		return err
	}
	if o.memLimitRatio > 0 {
		limit, src, err := memlimit.Apply(memlimit.Root, o.memLimitRatio)
		switch {
		case err != nil:
			// Not fatal: the manager runs as it would have without a soft limit.
			log.Error(err, "Cannot read the container's memory limit: no soft memory limit")
		case src != memlimit.None:
			log.Info("Soft memory limit", "bytes", limit, "from", src)
		}
	}
	namespaces, err := o.namespaces()
	if err != nil {
		return err
	}
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if o.secureMetrics {
		metricsOpts.CertDir = o.metricsCertDir
		metricsOpts.FilterProvider = metricsAuth
	}
	images, err := o.images()
	if err != nil {
		return err
	}
	restCfg := ctrl.GetConfigOrDie()
	restCfg.QPS, restCfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	var tlsNames []string
	if o.runnerURL == "" && o.runnerAddr != "0" {
		if o.runnerURL, tlsNames, err = runnerURLFromService(restCfg, os.Getenv("POD_NAMESPACE"), o.runnerService, o.runnerAddr, o.runnerTLS); err != nil {
			return err
		}
		log.Info("Runner channel URL derived from its Service", "url", o.runnerURL)
	}
	if o.runnerTLS && o.runnerAddr != "0" {
		if u, err := url.Parse(o.runnerURL); err == nil && u.Hostname() != "" {
			tlsNames = append(tlsNames, u.Hostname())
		}
		for _, n := range strings.Split(o.runnerTLSNames, ",") {
			if n = strings.TrimSpace(n); n != "" {
				tlsNames = append(tlsNames, n)
			}
		}
		if o.uiAddr != "0" && o.uiAddr != "" {
			ns := os.Getenv("POD_NAMESPACE")
			tlsNames = append(tlsNames, o.uiService+"."+ns+".svc", o.uiService+"."+ns+".svc.cluster.local")
		}
		if !strings.HasPrefix(o.runnerURL, "https://") {
			return fmt.Errorf("--runner-url %q must be https:// while --runner-tls is on", o.runnerURL)
		}
	}
	leaderLabels, leaderLease, err := o.leader(log)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectID,
		LeaderElectionNamespace: o.leaderElectNS,
		// Releasing the lease on a clean shutdown lets a new replica take over at once.
		LeaderElectionReleaseOnCancel: true,
		// Each replica stamps its address on the Lease: a standby forwards runner calls and
		// webhook deliveries to the address of the Lease's holder.
		LeaderElectionLabels: leaderLabels,
		Cache:                cacheOptions(namespaces),
		// Every cached read asks whether its kind is namespaced; remembered (internal/restmapcache).
		MapperProvider: restmapcache.Provider,
		Controller:     ctrlconfig.Controller{MaxConcurrentReconciles: o.maxConcurrent},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	podLabels, err := labels.ConvertSelectorToLabelsMap(o.managerPodLabels)
	if err != nil {
		return fmt.Errorf("--manager-pod-labels: %w (want key=value,...)", err)
	}
	egressLabels, err := labels.ConvertSelectorToLabelsMap(o.egressPodLabels)
	if err != nil {
		return fmt.Errorf("--egress-proxy-pod-labels: %w (want key=value,...)", err)
	}
	dnsLabels, err := labels.ConvertSelectorToLabelsMap(o.dnsPodLabels)
	if err != nil {
		return fmt.Errorf("--dns-pod-labels: %w (want key=value,...)", err)
	}
	switch o.egressProxyURL {
	case "none":
		o.egressProxyURL = ""
	case "":
		ip, port, _, err := serviceAddress(restCfg, os.Getenv("POD_NAMESPACE"), o.egressService, "proxy", fmt.Sprintf(":%d", o.egressPort))
		if err != nil {
			return fmt.Errorf("egress proxy: %w (or set --egress-proxy-url, or none)", err)
		}
		o.egressProxyURL = fmt.Sprintf("http://%s", net.JoinHostPort(ip, fmt.Sprint(port)))
		log.Info("Egress proxy URL derived from its Service", "url", o.egressProxyURL)
	}
	clusterCIDRs := splitComma(o.clusterCIDRs)
	// The manager's own outbound calls to addresses Projects name (forge and tracker APIs,
	// notifications, the repository the git proxy forwards to) refuse the cluster's ranges.
	guard := &netguard.Guard{}
	for _, c := range clusterCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			guard.Deny = append(guard.Deny, p)
		}
	}
	for _, c := range splitComma(o.outboundAllow) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--outbound-allow-cidrs: %q: %w", c, err)
		}
		guard.Allow = append(guard.Allow, p)
	}
	if len(clusterCIDRs) == 0 {
		// Without --cluster-cidrs the ranges come from the cluster: a Project's wide egress CIDR
		// then still excepts the pods, the Services and the API server.
		c, err := client.New(restCfg, client.Options{})
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ranges, err := controller.DiscoverClusterRanges(dctx, c)
		cancel()
		if err != nil {
			return fmt.Errorf("find the cluster's pod, service and API server ranges (or set --cluster-cidrs): %w", err)
		}
		clusterCIDRs = ranges.All()
		log.Info("Cluster ranges found", "pods", ranges.Pods, "services", ranges.Services, "apiServer", ranges.APIServer)
		for _, c := range slices.Concat(ranges.Pods, ranges.Services) {
			if p, err := netip.ParsePrefix(c); err == nil {
				guard.Deny = append(guard.Deny, p)
			}
		}
		// The API server's own addresses are often the nodes' (a forge may run on a node): only
		// its ports are refused.
		for _, c := range ranges.APIServer {
			if p, err := netip.ParsePrefix(c); err == nil {
				for _, port := range []uint16{443, 6443} {
					guard.DenyAddrPorts = append(guard.DenyAddrPorts, netip.AddrPortFrom(p.Addr(), port))
				}
			}
		}
	}
	if o.uiAddr == "0" || o.uiAddr == "" {
		o.dashboardURL = "" // no dashboard to link
	}
	prices, err := priceTable(restCfg, os.Getenv("POD_NAMESPACE"), o.priceTableCM, o.priceTable)
	if err != nil {
		return err
	}
	log.Info("Price table", "date", prices.Date, "models", len(prices.Models))
	ctx := ctrl.SetupSignalHandler()
	if _, err := controller.Setup(ctx, mgr, controller.Config{
		Prices: &prices,
		Options: controller.Options{
			DashboardURL: o.dashboardURL, RunnerImage: o.runnerImage, AgentImages: images, RunnerURL: o.runnerURL, ImagePullPolicy: o.imagePullPolicy,
			ManagerNamespace: os.Getenv("POD_NAMESPACE"), ManagerPodLabels: podLabels, RunnerPort: bindPort(o.runnerAddr),
			EgressProxyURL: o.egressProxyURL, EgressProxyPodLabels: egressLabels, EgressProxyPort: int32(o.egressPort),
			DNSNamespace: o.dnsNamespace, DNSPodLabels: dnsLabels, ClusterCIDRs: clusterCIDRs, DeniedCIDRs: splitComma(o.deniedCIDRs),
			Outbound: guard,
		},
		RunnerBindAddress:  o.runnerAddr,
		RunnerTLSNames:     tlsNames,
		UIBindAddress:      o.uiAddr,
		PodName:            os.Getenv("POD_NAME"),
		LeaderLease:        leaderLease,
		WebhookBindAddress: o.webhookAddr,
		WebhookMaxBody:     o.webhookMaxBody,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	log.Info("Starting manager", "metrics", o.metricsAddr, "probes", o.probeAddr, "leaderElection", o.leaderElect, "namespaces", o.watchNamespaces)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// leader is what leader election adds: the labels with which this replica stamps its address
// on the Lease ($POD_IP and the runner and webhook ports), and the Lease, which standbys read to
// forward to the leader. Without $POD_IP a standby cannot be found by the others: it still
// forwards to the leader, but a leader without it is unreachable from standbys until it restarts
// with it (config/manager sets it).
func (o *options) leader(log logr.Logger) (map[string]string, types.NamespacedName, error) {
	if !o.leaderElect {
		return nil, types.NamespacedName{}, nil
	}
	ns := o.leaderElectNS
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		return nil, types.NamespacedName{}, errors.New("--leader-elect needs --leader-election-namespace or $POD_NAMESPACE")
	}
	lease := types.NamespacedName{Namespace: ns, Name: o.leaderElectID}
	ip := os.Getenv("POD_IP")
	if ip == "" {
		log.Info("POD_IP is not set: standbys cannot forward runner calls and webhook deliveries to this replica when it leads")
		return nil, lease, nil
	}
	labels, err := controller.LeaderLabels(ip, int(bindPort(o.runnerAddr)), int(bindPort(o.webhookAddr)))
	if err != nil {
		return nil, lease, err
	}
	return labels, lease, nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// bindPort is the port of a listen address such as ":8090" (0 when it has none).
func bindPort(addr string) int32 {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}
