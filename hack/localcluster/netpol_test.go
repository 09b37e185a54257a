package main

import (
	"testing"

	. "github.com/onsi/gomega"
)

// Lines of what `iptables -S` printed on the local cluster with kube-router running, three pods
// and four policies (the e2e suite's NetworkPolicy spec).
const netpolSave = `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N KUBE-EXTERNAL-SERVICES
-N KUBE-FIREWALL
-N KUBE-FORWARD
-N KUBE-KUBELET-CANARY
-N KUBE-NODEPORTS
-N KUBE-NWPLCY-3S5WQIZCQQ7FPXHJ
-N KUBE-NWPLCY-DEFAULT
-N KUBE-POD-FW-4VJ5IATSYECZ5EF3
-N KUBE-PROXY-CANARY
-N KUBE-PROXY-FIREWALL
-N KUBE-ROUTER-FORWARD
-N KUBE-ROUTER-INPUT
-N KUBE-ROUTER-OUTPUT
-N KUBE-SERVICES
-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -j KUBE-FIREWALL
-A KUBE-POD-FW-4VJ5IATSYECZ5EF3 -s 10.244.0.3/32 -m comment --comment "run through default egress network policy chain" -j KUBE-NWPLCY-DEFAULT
`

func TestNetpolChains(t *testing.T) {
	g := NewWithT(t)
	g.Expect(netpolChains(netpolSave)).To(ConsistOf("KUBE-NWPLCY-3S5WQIZCQQ7FPXHJ", "KUBE-NWPLCY-DEFAULT",
		"KUBE-POD-FW-4VJ5IATSYECZ5EF3", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-INPUT", "KUBE-ROUTER-OUTPUT"),
		"kube-proxy's and the kubelet's chains are not kube-router's")
	g.Expect(jumpRuleNumbers(netpolSave)).To(Equal([]int{4, 1}), "every -A line counts, whatever its chain")
}

func TestJumpRuleNumbers(t *testing.T) {
	g := NewWithT(t)
	forward := `-P FORWARD ACCEPT
-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
`
	g.Expect(jumpRuleNumbers(forward)).To(Equal([]int{4, 1}), "highest first, the policy line is no rule")
	g.Expect(jumpRuleNumbers("-P OUTPUT ACCEPT\n-A OUTPUT -j KUBE-FIREWALL\n")).To(BeEmpty())
	g.Expect(jumpRuleNumbers("")).To(BeEmpty())
}

func TestNetpolIPSet(t *testing.T) {
	g := NewWithT(t)
	for _, name := range []string{"KUBE-SRC-PDWJMKLZDTZ3L57A", "KUBE-DST-GAVYOJD4AGBMXKT4", "inet6:KUBE-DST-GAVYOJD4AGBMXKT4", "TMP-7NDE3WXHGVAOLJ6P"} {
		g.Expect(netpolIPSet.MatchString(name)).To(BeTrue(), name)
	}
	for _, name := range []string{"KUBE-FW-X", "my-set", "TMP-short", "TMP-7NDE3WXHGVAOLJ6PX", "xKUBE-SRC-A"} {
		g.Expect(netpolIPSet.MatchString(name)).To(BeFalse(), name)
	}
}
