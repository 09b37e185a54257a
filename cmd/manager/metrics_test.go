package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TestSecureMetrics serves the metrics endpoint as the manager does by default (HTTPS, bearer
// tokens reviewed by a real kube-apiserver) and tries it as an outsider would: no token, a valid
// token without the metrics-reader rule, made-up tokens in a flood. Only the reader is served,
// and the flood's TokenReviews stay within the filter's own rate.
func TestSecureMetrics(t *testing.T) {
	g := NewWithT(t)
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The filter's own rules (config/rbac/metrics_auth_role.yaml) and a scraper bound to the
	// reader rule (config/rbac/metrics_reader_role.yaml), as docs/metrics.md tells Prometheus.
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := func(name string) string {
		_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "default"}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	addr := freeAddr(t)
	hc, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	srv, err := metricsserver.NewServer(metricsserver.Options{
		BindAddress: addr, SecureServing: true, FilterProvider: metricsAuth, CertDir: t.TempDir(),
	}, cfg, hc)
	g.Expect(err).NotTo(HaveOccurred())
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = srv.Start(sctx) }()

	// The endpoint's certificate is self-signed (no --metrics-cert-dir): Prometheus is told to
	// skip its verification or is given a cert-manager one (docs/metrics.md).
	httpc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test's self-signed endpoint
		MaxIdleConnsPerHost: 64,
	}}
	get := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		g.Expect(err).NotTo(HaveOccurred())
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	g.Eventually(func() int { code, _ := get(""); return code }).WithTimeout(30 * time.Second).Should(Equal(http.StatusUnauthorized))

	code, body := get(stranger)
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	code, body = get(reader)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("# TYPE"), "the registry's metrics")

	// Plain HTTP to the TLS port is no way round it.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err == nil {
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "Go's TLS server answers plain HTTP with 400")
	}

	before := tokenReviews(ctx, g, cs)
	const flood, workers = 400, 32
	start := time.Now()
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				c, _ := get(fmt.Sprintf("garbage-%d-%d", i, time.Now().UnixNano()))
				mu.Lock()
				codes[c]++
				mu.Unlock()
			}
		})
	}
	for i := range flood {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	reviews := tokenReviews(ctx, g, cs) - before
	t.Logf("flood of %d made-up tokens in %s: answers %v, %v TokenReviews", flood, elapsed, codes, reviews)
	g.Expect(codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests]).To(Equal(flood), "every made-up token refused: %v", codes)
	g.Expect(codes[http.StatusTooManyRequests]).To(BeNumerically(">", 0), "past the in-flight bound the answer is 429")
	bound := float64(metricsReviewBurst) + metricsReviewQPS*elapsed.Seconds() + 2
	g.Expect(reviews).To(BeNumerically("<=", bound), "the flood's reviews are paced by the filter's own limiter")

	// The flood over, the reader is served again.
	code, _ = get(reader)
	g.Expect(code).To(Equal(http.StatusOK))
}

// tokenReviews reads the API server's count of TokenReview creations.
func tokenReviews(ctx context.Context, g Gomega, cs kubernetes.Interface) float64 {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		g.Expect(err).NotTo(HaveOccurred(), line)
		total += v
	}
	return total
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
