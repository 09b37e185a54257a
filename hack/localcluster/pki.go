package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough for any local session and short enough to be obviously local.
const certValidity = 365 * 24 * time.Hour

// certSpec is one certificate signed by the cluster CA.
type certSpec struct {
	file   string // base name under pki/: <file>.crt and <file>.key
	cn     string
	orgs   []string
	server bool
	client bool
	dns    []string
	ips    []net.IP
}

// clusterCerts lists every certificate the components use. The apiserver's covers the node IP
// (what kubeconfigs and the kubelet dial), the `kubernetes` Service IP (what in-cluster clients
// such as the manager dial through kube-proxy) and loopback; facts file, point 8.
func clusterCerts(nodeIP net.IP) []certSpec {
	loop := net.ParseIP("127.0.0.1")
	return []certSpec{
		{file: "apiserver", cn: cAPIServer, server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", nodeName},
			ips: []net.IP{nodeIP, net.ParseIP(kubernetesSvc), loop}},
		// The apiserver's client identity towards the kubelet (logs, exec, port-forward).
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true},
		{file: cAdmin, cn: "kubernetes-admin", orgs: []string{"system:masters"}, client: true},
		{file: "controller-manager", cn: "system:kube-controller-manager", client: true},
		{file: "scheduler", cn: "system:kube-scheduler", client: true},
		{file: cProxy, cn: "system:kube-proxy", client: true},
		// The volume provisioner: only the ClusterRole `up` binds to this user (storage.go).
		{file: cProvisioner, cn: provisionerUser, client: true},
		// kube-router's network-policy controller: only the ClusterRole `up` binds to it (netpol.go).
		{file: cNetpol, cn: netpolUser, client: true},
		// The Node authorizer and NodeRestriction know the kubelet by this name and group.
		{file: "kubelet-client", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, client: true},
		{file: "kubelet-serving", cn: nodeName, server: true, dns: []string{nodeName, "localhost"}, ips: []net.IP{nodeIP, loop}},
	}
}

// writePKI creates the cluster CA, the front-proxy CA (request-header authentication for
// aggregated APIs; without it every delegating component logs a missing CA bundle), every
// component certificate and the service-account key pair.
func writePKI(l layout, nodeIP net.IP) error {
	if err := os.MkdirAll(l.path("pki"), 0o700); err != nil {
		return err
	}
	ca, caKey, err := newCA(l, "ca", "shepherd-local-ca")
	if err != nil {
		return err
	}
	fp, fpKey, err := newCA(l, "front-proxy-ca", "shepherd-local-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := signCert(l, certSpec{file: "front-proxy-client", cn: "front-proxy-client", client: true}, fp, fpKey); err != nil {
		return err
	}
	for _, s := range clusterCerts(nodeIP) {
		if err := signCert(l, s, ca, caKey); err != nil {
			return err
		}
	}
	// Service-account tokens: the apiserver signs with sa.key and verifies with sa.pub; the
	// controller-manager signs the legacy token Secrets with sa.key too.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeKey(l.pki("sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(l.pki("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func newCA(l layout, file, cn string) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s key: %w", file, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create %s certificate: %w", file, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writeCertKey(l.pki(file), der, key)
}

func signCert(l layout, s certSpec, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate %s key: %w", s.file, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		DNSNames:              s.dns,
		IPAddresses:           s.ips,
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", s.file, err)
	}
	return writeCertKey(l.pki(s.file), der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func writeCertKey(base string, der []byte, key crypto.Signer) error {
	if err := os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(base+".key", key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal %s: %w", filepath.Base(path), err)
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
