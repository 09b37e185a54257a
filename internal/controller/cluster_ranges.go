package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups=core,resources=services,verbs=get

// ClusterRanges are the ranges an agent may not reach through a wider CIDR a Project opens,
// found from the cluster itself when --cluster-cidrs is not set.
type ClusterRanges struct {
	// Pods are the nodes' pod ranges (spec.podCIDRs), Services the ServiceCIDRs' ranges.
	Pods, Services []string
	// APIServer are the API server's addresses as /32 or /128: the kubernetes Service's cluster
	// IP and its endpoints. A Project's CIDR that contains the node network would otherwise open
	// the API server on the nodes.
	APIServer []string
}

// All is every range, sorted and without duplicates.
func (r ClusterRanges) All() []string {
	out := slices.Concat(r.Pods, r.Services, r.APIServer)
	slices.Sort(out)
	return slices.Compact(out)
}

// DiscoverClusterRanges reads the cluster's pod, service and API server ranges with three list
// calls (at start: a node added later with a new pod range needs a restart, or --cluster-cidrs).
// A list the manager may not read, or a cluster without ServiceCIDRs (before Kubernetes 1.33),
// leaves that part empty rather than failing.
func DiscoverClusterRanges(ctx context.Context, c client.Reader) (ClusterRanges, error) {
	var r ClusterRanges
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return r, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, cidr := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				r.Pods = append(r.Pods, p.Masked().String())
			}
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := c.List(ctx, &cidrs); err == nil {
		for _, sc := range cidrs.Items {
			for _, cidr := range sc.Spec.CIDRs {
				if p, err := netip.ParsePrefix(cidr); err == nil {
					r.Services = append(r.Services, p.Masked().String())
				}
			}
		}
	}
	var eps discoveryv1.EndpointSliceList
	if err := c.List(ctx, &eps, client.InNamespace(corev1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return r, fmt.Errorf("list the kubernetes Service's endpoints: %w", err)
	}
	for _, s := range eps.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				r.APIServer = appendHost(r.APIServer, a)
			}
		}
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: "kubernetes"}, &svc); err == nil {
		for _, ip := range svc.Spec.ClusterIPs {
			r.APIServer = appendHost(r.APIServer, ip)
		}
	}
	r.Pods, r.Services, r.APIServer = sortCompact(r.Pods), sortCompact(r.Services), sortCompact(r.APIServer)
	return r, nil
}

func appendHost(out []string, ip string) []string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return out
	}
	return append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String())
}

func sortCompact(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
