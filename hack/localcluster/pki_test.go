package main

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPKI: the apiserver's certificate verifies for every address clients dial (the node IP
// from kubeconfigs, the `kubernetes` Service IP from in-cluster pods, its DNS names), and the
// component identities carry the names the Node and RBAC authorizers expect.
func TestPKI(t *testing.T) {
	g := NewWithT(t)
	l := newLayout(t.TempDir())
	nodeIP := net.ParseIP("192.0.2.10")
	g.Expect(writePKI(l, nodeIP)).To(Succeed())

	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, l.pki("ca.crt")))
	api := readCert(t, l.pki("apiserver.crt"))
	for _, host := range []string{"192.0.2.10", kubernetesSvc, "127.0.0.1", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		_, err := api.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: time.Now()})
		g.Expect(err).NotTo(HaveOccurred(), "apiserver certificate for %s", host)
	}
	kubelet := readCert(t, l.pki("kubelet-client.crt"))
	g.Expect(kubelet.Subject.CommonName).To(Equal("system:node:" + nodeName))
	g.Expect(kubelet.Subject.Organization).To(ConsistOf("system:nodes"))
	_, err := kubelet.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	prov := readCert(t, l.pki(cProvisioner+".crt"))
	g.Expect(prov.Subject.CommonName).To(Equal(provisionerUser), "the user the provisioner's ClusterRoleBinding names")
	g.Expect(prov.Subject.Organization).To(BeEmpty(), "no group: only its own ClusterRole applies")
	netpol := readCert(t, l.pki(cNetpol+".crt"))
	g.Expect(netpol.Subject.CommonName).To(Equal(netpolUser), "the user kube-router's ClusterRoleBinding names")
	g.Expect(netpol.Subject.Organization).To(BeEmpty())
	serving := readCert(t, l.pki("kubelet-serving.crt"))
	_, err = serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "192.0.2.10", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	g.Expect(err).NotTo(HaveOccurred(), "the apiserver verifies the kubelet at the node IP")
	for _, f := range []string{"sa.key", "sa.pub", "front-proxy-ca.crt", "front-proxy-client.crt", "admin.key"} {
		g.Expect(l.pki(f)).To(BeAnExistingFile())
	}
	st, err := os.Stat(l.pki("ca.key"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)), "private keys are readable by root only")
}

func TestUnescapeMountinfo(t *testing.T) {
	g := NewWithT(t)
	g.Expect(unescapeMountinfo(`/run/a\040b`)).To(Equal("/run/a b"))
	g.Expect(unescapeMountinfo(`/plain/path`)).To(Equal("/plain/path"))
}
