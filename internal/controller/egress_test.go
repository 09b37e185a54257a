package controller

import (
	"fmt"
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
	pods := func(ns string, labels map[string]string, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: labels},
			}},
			Ports: ports,
		}
	}
	// DNS to the cluster's DNS pods only, never port 53 anywhere.
	dns := pods("kube-system", map[string]string{"k8s-app": "kube-dns"}, port(udp, 53), port(tcp, 53))
	ipRule := func(cidr string, except []string, ports ...int32) networkingv1.NetworkPolicyEgressRule {
		r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}}
		for _, n := range ports {
			r.Ports = append(r.Ports, port(tcp, n))
		}
		return r
	}
	managerLabels := map[string]string{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "manager"}
	proxyLabels := map[string]string{"app.kubernetes.io/name": "shepherd", "app.kubernetes.io/component": "egress-proxy"}
	manager := pods("shepherd-system", managerLabels, port(tcp, 8090))
	proxy := pods("shepherd-system", proxyLabels, port(tcp, 3128))
	denied := []string{"169.254.0.0/16"}
	cluster := []string{"10.244.0.0/16", "10.96.0.0/12"}

	cases := []struct {
		name    string
		opts    Options
		network *agentsv1alpha1.NetworkSpec
		model   agentsv1alpha1.HTTPURL
		want    []networkingv1.NetworkPolicyEgressRule
	}{
		{"closed by default: DNS, the manager's pods and the egress proxy's, nothing else", Options{
			RunnerURL: "https://10.96.0.12:8090", ManagerNamespace: "shepherd-system", ManagerPodLabels: managerLabels, RunnerPort: 8090,
			EgressProxyURL: "http://10.96.0.13:3128", EgressProxyPodLabels: proxyLabels, EgressProxyPort: 3128,
		}, nil, "", []networkingv1.NetworkPolicyEgressRule{dns, manager, proxy}},
		{"a manager and proxy outside the cluster at IP addresses", Options{RunnerURL: "https://192.168.1.20:8090", EgressProxyURL: "http://192.168.1.20:3128"},
			nil, "", []networkingv1.NetworkPolicyEgressRule{dns, ipRule("192.168.1.20/32", nil, 8090), ipRule("192.168.1.20/32", nil, 3128)}},
		{"an IPv6 manager on the default https port, no proxy", Options{RunnerURL: "https://[fd00::5]/"},
			nil, "", []networkingv1.NetworkPolicyEgressRule{dns, ipRule("fd00::5/128", nil, 443)}},
		{"a manager known only by name: the allowlist must name it", Options{RunnerURL: "https://shepherd.example:8090"},
			nil, "", []networkingv1.NetworkPolicyEgressRule{dns}},
		{"a model API given by address is opened on its port", Options{RunnerURL: "https://192.168.1.20:8090"},
			nil, "http://192.168.1.30:8089", []networkingv1.NetworkPolicyEgressRule{dns, ipRule("192.168.1.20/32", nil, 8090), ipRule("192.168.1.30/32", nil, 8089)}},
		{"the Project's networks, less metadata and the cluster's ranges unless named within them", Options{
			RunnerURL: "https://shepherd.example:8090", DeniedCIDRs: denied, ClusterCIDRs: cluster,
		}, &agentsv1alpha1.NetworkSpec{Egress: &agentsv1alpha1.EgressSpec{Allow: []agentsv1alpha1.EgressRule{
			{CIDR: "0.0.0.0/0", Ports: []int32{22}}, {CIDR: "140.82.112.0/20", Ports: []int32{443}}, {CIDR: "10.96.0.10/32", Ports: []int32{53}},
			{CIDR: "10.0.0.0/8"}, {CIDR: "::/0"},
		}}}, "", []networkingv1.NetworkPolicyEgressRule{dns,
			ipRule("0.0.0.0/0", []string{"169.254.0.0/16", "10.244.0.0/16", "10.96.0.0/12"}, 22),
			ipRule("140.82.112.0/20", nil, 443),
			ipRule("10.96.0.10/32", nil, 53),
			ipRule("10.0.0.0/8", []string{"10.244.0.0/16", "10.96.0.0/12"}),
			ipRule("::/0", nil),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := MakeProject("widgets", "ns").Obj()
			p.Spec.Network = tc.network
			if tc.model != "" {
				p.Spec.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic, URL: tc.model}
			}
			spec := egressPolicySpec(p, tc.opts, nil)
			g.Expect(spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress), "default deny both ways")
			g.Expect(spec.Ingress).To(BeEmpty(), "nothing may connect to an agent pod")
			g.Expect(spec.PodSelector.MatchLabels).To(Equal(map[string]string{agentsv1alpha1.LabelProject: "widgets"}))
			g.Expect(spec.PodSelector.MatchExpressions).To(ConsistOf(metav1.LabelSelectorRequirement{
				Key: agentsv1alpha1.LabelComponent, Operator: metav1.LabelSelectorOpIn, Values: []string{componentAgent, componentWorktree}}),
				"agent pods and checkout pods (which run setup commands) alike")
			g.Expect(spec.Egress).To(Equal(tc.want))
		})
	}
}

// Sessions that name a model API of their own by address (an AgentTask's Codex attempt in a
// Claude Code Project) get it opened in their Project's policy, once each, bounded.
func TestSessionModelAPIsInTheEgressPolicy(t *testing.T) {
	g := NewWithT(t)
	sess := func(url string) agentsv1alpha1.AgentSession {
		s := agentsv1alpha1.AgentSession{}
		if url != "" {
			s.Spec.Agent = &agentsv1alpha1.AgentSpec{ModelAPI: &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIOpenAI, URL: agentsv1alpha1.HTTPURL(url)}}
		}
		return s
	}
	urls := sessionModelURLs([]agentsv1alpha1.AgentSession{sess("http://192.168.1.31:9000"), sess(""), sess("http://192.168.1.30:8089"),
		sess("http://192.168.1.31:9000"), sess("https://api.openai.com")})
	g.Expect(urls).To(Equal([]string{"http://192.168.1.30:8089", "http://192.168.1.31:9000", "https://api.openai.com"}))
	p := MakeProject("widgets", "ns").Obj()
	p.Spec.Agent.ModelAPI = &agentsv1alpha1.ModelAPISpec{API: agentsv1alpha1.ModelAPIAnthropic, URL: "http://192.168.1.30:8089"}
	spec := egressPolicySpec(p, Options{}, urls)
	var blocks []string
	for _, r := range spec.Egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				blocks = append(blocks, to.IPBlock.CIDR+":"+r.Ports[0].Port.String())
			}
		}
	}
	g.Expect(blocks).To(Equal([]string{"192.168.1.30/32:8089", "192.168.1.31/32:9000"}), "the Project's once; a name goes through the egress proxy")
	metadata := egressPolicySpec(p, Options{DeniedCIDRs: []string{"169.254.0.0/16"}}, []string{"http://169.254.169.254:80", "http://192.168.1.31:9000"})
	for _, r := range metadata.Egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				g.Expect(to.IPBlock.CIDR).NotTo(HavePrefix("169.254."), "a session's model URL does not open cloud metadata")
			}
		}
	}
	g.Expect(metadata.Egress).To(HaveLen(len(spec.Egress)), "the other address is still opened")
	many := make([]agentsv1alpha1.AgentSession, 40)
	for i := range many {
		many[i] = sess(fmt.Sprintf("http://10.1.0.%d:80", i))
	}
	g.Expect(sessionModelURLs(many)).To(HaveLen(maxSessionModelURLs))
}
