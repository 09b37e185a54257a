package scenario

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Where config/default serves the manager's metrics, and the ClusterRole a scraper is bound to.
const (
	MetricsService       = "shepherd-manager-metrics"
	MetricsReaderRole    = "shepherd-metrics-reader"
	metricsScraper       = "shepherd-e2e-metrics-scraper"
	metricsScrapeTimeout = 10 * time.Second
)

// MetricsScraper reads the manager's metrics the way docs/metrics.md tells a Prometheus to:
// HTTPS to the metrics Service, with the bearer token of a ServiceAccount bound to the
// metrics-reader ClusterRole. The endpoint's certificate is the manager's self-signed one, so it
// is not verified.
type MetricsScraper struct {
	URL   string
	token string
	http  *http.Client
}

// NewMetricsScraper makes (once) a ServiceAccount in the manager's namespace bound to the
// metrics-reader role, and requests a token for it.
func NewMetricsScraper(ctx context.Context, cs kubernetes.Interface) (*MetricsScraper, error) {
	svc, err := cs.CoreV1().Services(ManagerNamespace).Get(ctx, MetricsService, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the manager's metrics Service: %w", err)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.ClusterIP == "" {
		return nil, fmt.Errorf("service %s/%s has no cluster IP and port", ManagerNamespace, MetricsService)
	}
	_, err = cs.CoreV1().ServiceAccounts(ManagerNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: metricsScraper},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("scraper ServiceAccount: %w", err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: metricsScraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: metricsScraper, Namespace: ManagerNamespace}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("scraper ClusterRoleBinding: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ManagerNamespace).CreateToken(ctx, metricsScraper, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("scraper token: %w", err)
	}
	return &MetricsScraper{
		URL:   fmt.Sprintf("https://%s/metrics", net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))),
		token: tr.Status.Token,
		http: &http.Client{Timeout: metricsScrapeTimeout, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's self-signed metrics certificate
		}},
	}, nil
}

// Get reads the metrics once, with the scraper's token when withToken; it returns the status code
// and the body (at most 16 MiB).
func (m *MetricsScraper) Get(ctx context.Context, withToken bool) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return 0, "", err
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(body), err
}

// Scrape reads the metrics with the token and fails unless they are served.
func (m *MetricsScraper) Scrape(ctx context.Context) (string, error) {
	code, body, err := m.Get(ctx, true)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", m.URL, err)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", m.URL, code, body)
	}
	return body, nil
}
