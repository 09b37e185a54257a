package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/controller"
	"github.com/shepherd-dev/shepherd/internal/egress"
	"github.com/shepherd-dev/shepherd/internal/restmapcache"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// egressOptions are the flags of `manager egress-proxy`.
type egressOptions struct {
	bind            string
	probeAddr       string
	watchNamespaces string
	denied          string
	kubeAPIQPS      float64
	kubeAPIBurst    int
}

func (o *egressOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.bind, "bind-address", ":3128", "Address the egress proxy listens on.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose agent pods it serves; empty serves all.")
	fs.StringVar(&o.denied, "deny-cidrs", "", "Comma-separated ranges no allowed name may resolve to, on top of loopback, link-local (cloud metadata) and the other built-in ones: set the cluster's pod, service and node ranges.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 50, "Queries per second to the Kubernetes API.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 100, "Burst of queries to the Kubernetes API.")
}

// runEgressProxy runs the egress proxy: a process of its own (its own Deployment and service
// account, which may read pods, Projects and sessions and review tokens, and nothing else), so
// that the manager, which holds every Project's credentials, never carries agent traffic.
func runEgressProxy(args []string) error {
	var o egressOptions
	fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
	o.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	denied := egress.DefaultDenied()
	for _, c := range strings.Split(o.denied, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--deny-cidrs: %q is not a CIDR", c)
		}
		denied = append(denied, p)
	}
	var nsOpt options
	nsOpt.watchNamespaces = o.watchNamespaces
	namespaces, err := nsOpt.namespaces()
	if err != nil {
		return err
	}
	restCfg := ctrl.GetConfigOrDie()
	restCfg.QPS, restCfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	managed := labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue})
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: o.probeAddr,
		MapperProvider:         restmapcache.Provider,
		Cache: cache.Options{DefaultNamespaces: namespaces, DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: managed}}},
	})
	if err != nil {
		return fmt.Errorf("create the egress proxy's cache: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.SetupEgressIndexes(ctx, mgr); err != nil {
		return err
	}
	log := ctrl.Log.WithName("egress")
	auth := &runnerapi.Authenticator{Reviewer: runnerapi.NewTokenReviewer(mgr.GetClient()), Audience: runnerapi.Audience, TTL: 10 * time.Minute, Clock: clock.RealClock{}}
	srv, err := egress.New(egress.Config{
		Resolver: &controller.EgressResolver{Reader: mgr.GetClient(), Auth: auth},
		Denied:   denied,
		Log:      log,
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(&egressRunnable{srv: srv, addr: o.bind}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			return fmt.Errorf("cache not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	log.Info("Starting the egress proxy", "address", o.bind, "namespaces", o.watchNamespaces)
	return mgr.Start(ctx)
}

type egressRunnable struct {
	srv  *egress.Server
	addr string
}

// NeedLeaderElection: every replica proxies.
func (e *egressRunnable) NeedLeaderElection() bool { return false }

func (e *egressRunnable) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", e.addr)
	if err != nil {
		return fmt.Errorf("egress proxy: listen on %s: %w", e.addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- e.srv.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return e.srv.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}
