package restmapcache

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-dev/shepherd/test/benchcost"
)

// apiServer starts a real kube-apiserver and etcd (envtest) with three namespaces, a ConfigMap
// in each and a Node.
func apiServer(tb testing.TB) *rest.Config {
	tb.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		tb.Fatal("KUBEBUILDER_ASSETS is not set: run `make test` (or `make bench-restmapper`), or set it to $(hack/kube-binaries.sh envtest)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatalf("start envtest: %v", err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"a", "b", "c"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			tb.Fatal(err)
		}
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// namespacesCache is the manager's cache with --watch-namespaces=a,b,c: a multi-namespace cache,
// with the given mapper.
func namespacesCache(tb testing.TB, cfg *rest.Config, mapper meta.RESTMapper) cache.Cache {
	tb.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{HTTPClient: hc, Scheme: scheme.Scheme, Mapper: mapper,
		DefaultNamespaces: map[string]cache.Config{"a": {}, "b": {}, "c": {}}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	// Ask once for each kind read below, so that its informers start and sync.
	if err := c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "settings"}, &corev1.ConfigMap{}); err != nil {
		tb.Fatal(err)
	}
	if err := c.List(ctx, &corev1.NodeList{}); err != nil {
		tb.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		tb.Fatal("cache did not sync")
	}
	return c
}

func dynamicMapper(tb testing.TB, cfg *rest.Config) *counting {
	tb.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		tb.Fatal(err)
	}
	return &counting{RESTMapper: m}
}

// Against a real API server, the manager's multi-namespace cache reads namespaced and cluster
// kinds through the remembered mapper, and stops asking the mapper beneath once each kind is
// known; without it, every read asks.
func TestProviderAgainstAnAPIServer(t *testing.T) {
	cfg := apiServer(t)
	ctx := context.Background()
	if _, err := Provider(cfg, http.DefaultClient); err != nil {
		t.Fatalf("Provider: %v", err)
	}

	plain := dynamicMapper(t, cfg)
	beneath := dynamicMapper(t, cfg)
	for _, tc := range []struct {
		name   string
		mapper meta.RESTMapper
		calls  *counting
		// perRead is how many lookups each read below makes on the mapper beneath.
		perRead int64
	}{
		{name: "controller-runtime's dynamic mapper", mapper: plain, calls: plain, perRead: 1},
		{name: "remembered", mapper: New(beneath, 0), calls: beneath, perRead: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := namespacesCache(t, cfg, tc.mapper)
			lists := func() {
				var cms corev1.ConfigMapList
				if err := c.List(ctx, &cms); err != nil || len(cms.Items) != 3 {
					t.Fatalf("list ConfigMaps across the namespaces: %d, %v", len(cms.Items), err)
				}
				var nodes corev1.NodeList
				if err := c.List(ctx, &nodes); err != nil || len(nodes.Items) != 1 {
					t.Fatalf("list Nodes (cluster-scoped): %d, %v", len(nodes.Items), err)
				}
			}
			lists() // the first List of a kind's list type asks for it once
			before := tc.calls.calls.Load()
			const reads = 100
			for i := 0; i < reads; i++ {
				ns := []string{"a", "b", "c"}[i%3]
				var cm corev1.ConfigMap
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "settings"}, &cm); err != nil {
					t.Fatalf("get %s/settings: %v", ns, err)
				}
				if cm.Namespace != ns {
					t.Fatalf("read %s/%s", cm.Namespace, cm.Name)
				}
			}
			lists()
			if got := tc.calls.calls.Load() - before; got < tc.perRead*reads || (tc.perRead == 0 && got != 0) {
				t.Fatalf("%d reads asked the mapper beneath %d times, want %d per read", reads+2, got, tc.perRead)
			}
		})
	}
}

// BenchmarkCachedGet: one Get from the manager's multi-namespace cache (--watch-namespaces) of a
// real API server, with controller-runtime's dynamic mapper and with the remembered one, in the
// same run.
func BenchmarkCachedGet(b *testing.B) {
	cfg := apiServer(b)
	ctx := context.Background()
	get := func(c cache.Cache) func() {
		return func() {
			if err := c.Get(ctx, client.ObjectKey{Namespace: "b", Name: "settings"}, &corev1.ConfigMap{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	plain := measure(get(namespacesCache(b, cfg, dynamicMapper(b, cfg))))
	remembered := measure(get(namespacesCache(b, cfg, New(dynamicMapper(b, cfg), 0))))
	fmt.Fprintf(os.Stdout, "\nOne Get of a ConfigMap from a cache of three namespaces (envtest's API groups)\n")
	fmt.Fprintf(os.Stdout, "%-28s %10s %10s %10s   %s\n", "mapper", "ns/get", "B/get", "allocs", "vs dynamic (time, bytes, allocs)")
	for _, r := range []struct {
		name string
		c    benchcost.Cost
	}{{"dynamic (controller-runtime)", plain}, {"remembered", remembered}} {
		fmt.Fprintf(os.Stdout, "%-28s %10.0f %10.0f %10.1f   %.2f×, %.2f×, %.2f×\n", r.name, r.c.NS, r.c.Bytes, r.c.Allocs,
			r.c.NS/plain.NS, r.c.Bytes/plain.Bytes, r.c.Allocs/plain.Allocs)
	}
	b.ReportMetric(remembered.NS/plain.NS, "time-ratio")
	b.ReportMetric(remembered.Bytes/plain.Bytes, "bytes-ratio")
}

// measure warms f up, then returns its cost per call over at least a second.
func measure(f func()) benchcost.Cost {
	for i := 0; i < 1000; i++ {
		f()
	}
	return benchcost.Measure(1000, time.Second, f)
}
