package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/egress"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// IndexPodIP indexes Shepherd's pods by their IP, for the egress proxy to tell its clients.
const IndexPodIP = "status.podIP"

// SetupEgressIndexes registers the egress proxy's cache index.
func SetupEgressIndexes(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexPodIP, func(o client.Object) []string {
		pod := o.(*corev1.Pod)
		var ips []string
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		if len(ips) == 0 && pod.Status.PodIP != "" {
			ips = append(ips, pod.Status.PodIP)
		}
		return ips
	})
}

// EgressResolver tells the egress proxy who a client is and where it may go: the agent or
// checkout pod at the client's address (a pod cannot choose its source address: it has no
// CAP_NET_RAW), and its Project's spec.network.egress.hosts. The runner's container of that pod,
// when it proves itself with its projected token (Proxy-Authorization: Bearer), may also reach
// the model API's host, which the agent may not: the agent would reach it without the key, but
// could still send data out through it with a key of its own.
type EgressResolver struct {
	// Reader reads pods (indexed by IndexPodIP), Projects and AgentSessions.
	Reader client.Reader
	// Auth verifies runner tokens (runnerapi.Authenticator).
	Auth interface {
		Authenticate(ctx context.Context, token string) (runnerapi.Identity, error)
	}
}

var _ egress.Resolver = (*EgressResolver)(nil)

// PolicyFor implements egress.Resolver.
func (r *EgressResolver) PolicyFor(ctx context.Context, peer netip.Addr, proxyAuth string) (egress.Policy, error) {
	pod, err := r.podAt(ctx, peer)
	if err != nil {
		return egress.Policy{}, err
	}
	id := pod.Namespace + "/" + pod.Name
	p := &agentsv1alpha1.Project{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[agentsv1alpha1.LabelProject]}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return egress.Policy{}, fmt.Errorf("%w: the Project of pod %s is gone", egress.ErrUnknownClient, id)
		}
		return egress.Policy{}, fmt.Errorf("read the Project of pod %s: %w", id, err)
	}
	pol := egress.Policy{Identity: id}
	if n := p.Spec.Network; n != nil && n.Egress != nil {
		pol.Hosts = append(pol.Hosts, n.Egress.Hosts...)
	}
	if proxyAuth == "" {
		return pol, nil
	}
	token, ok := strings.CutPrefix(proxyAuth, "Bearer ")
	if !ok || r.Auth == nil {
		return egress.Policy{}, fmt.Errorf("%w: only the runner's token is accepted", egress.ErrProxyAuthRequired)
	}
	who, err := r.Auth.Authenticate(ctx, strings.TrimSpace(token))
	if err != nil || who.PodUID != pod.UID {
		// A token of another pod (stolen, or replayed from elsewhere) is worth nothing here.
		return egress.Policy{}, fmt.Errorf("%w: the token is not this pod's runner's", egress.ErrProxyAuthRequired)
	}
	if host := r.modelHost(ctx, pod, p); host != "" {
		pol.Hosts = append(pol.Hosts, host)
		pol.Identity = id + " (runner)"
	}
	return pol, nil
}

// podAt is the one running Shepherd pod with the address.
func (r *EgressResolver) podAt(ctx context.Context, peer netip.Addr) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.MatchingFields{IndexPodIP: peer.Unmap().String()}); err != nil {
		return nil, fmt.Errorf("find the pod at %s: %w", peer, err)
	}
	var found *corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
			pod.Labels[agentsv1alpha1.LabelManagedBy] != agentsv1alpha1.ManagedByValue {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%w: two pods at %s", egress.ErrUnknownClient, peer)
		}
		found = pod
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no agent pod at %s", egress.ErrUnknownClient, peer)
	}
	return found, nil
}

// modelHost is the host:port of the model API the pod's session uses ("" without one).
func (r *EgressResolver) modelHost(ctx context.Context, pod *corev1.Pod, p *agentsv1alpha1.Project) string {
	agent := p.Spec.Agent
	if name := pod.Labels[agentsv1alpha1.LabelSession]; name != "" {
		sess := &agentsv1alpha1.AgentSession{}
		if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, sess); err == nil {
			agent = mergeAgent(p.Spec.Agent, sess.Spec.Agent)
		}
	}
	m := agent.ModelAPI
	if m == nil {
		return ""
	}
	raw := string(m.URL)
	if raw == "" {
		raw = defaultModelURL(m.API)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// defaultModelURL is the upstream of a model API without agent.modelAPI.url (the runner's
// default too).
func defaultModelURL(api agentsv1alpha1.ModelAPIKind) string { return api.DefaultURL() }
