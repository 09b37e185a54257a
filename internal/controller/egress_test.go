package controller

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	. "github.com/shepherd-dev/shepherd/test/builders"
)

func TestEgressPolicySpec(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(proto corev1.Protocol, n int32) networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(n)
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
	}
	dns := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{port(udp, 53), port(tcp, 53)}}
	ipRule := func(cidr string, ports ...int32) networkingv1.NetworkPolicyEgressRule {
		r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}
		for _, n := range ports {
			r.Ports = append(r.Ports, port(tcp, n))
		}
		return r
	}
	forge := ipRule("140.82.112.0/20", 443)
	registry := ipRule("10.20.0.0/16")
	inCluster := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "shepherd-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{port(tcp, 8090)},
	}
	managerLabels := map[string]string{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"}

	cases := []struct {
		name string
		opts Options
		want []networkingv1.NetworkPolicyEgressRule
	}{
		{"a manager in the cluster: its pods, on the runner port", Options{
			RunnerURL: "http://10.96.0.12:8090", ManagerNamespace: "shepherd-system", ManagerPodLabels: managerLabels, RunnerPort: 8090,
		}, []networkingv1.NetworkPolicyEgressRule{dns, inCluster, forge, registry}},
		{"a manager outside the cluster at an IP address", Options{RunnerURL: "http://192.168.1.20:8090"},
			[]networkingv1.NetworkPolicyEgressRule{dns, ipRule("192.168.1.20/32", 8090), forge, registry}},
		{"an IPv6 manager on the default https port", Options{RunnerURL: "https://[fd00::5]/"},
			[]networkingv1.NetworkPolicyEgressRule{dns, ipRule("fd00::5/128", 443), forge, registry}},
		{"a manager known only by name: the allowlist must name it", Options{RunnerURL: "http://shepherd.example:8090"},
			[]networkingv1.NetworkPolicyEgressRule{dns, forge, registry}},
	}
	p := MakeProject("widgets", "ns").Obj()
	p.Spec.Network = &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Allow: []agentsv1alpha1.EgressRule{
		{CIDR: "140.82.112.0/20", Ports: []int32{443}}, {CIDR: "10.20.0.0/16"},
	}}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := egressPolicySpec(p, tc.opts)
			g.Expect(spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}), "egress only: default deny for what is not listed")
			g.Expect(spec.PodSelector.MatchLabels).To(Equal(map[string]string{agentsv1alpha1.LabelProject: "widgets", agentsv1alpha1.LabelComponent: componentAgent}))
			g.Expect(spec.Egress).To(Equal(tc.want))
		})
	}
}
