// Package uienv runs Shepherd's aggregated API (internal/ui) behind a real kube-apiserver with
// its aggregation layer on (envtest, a front-proxy CA and client certificate as kubeadm
// configures them), so that requests take a user's path: kubectl or a browser through kubectl
// proxy → API server (authenticates the user) → UI server (checks the front proxy, asks
// SubjectAccessReviews). internal/ui's suite and `make bench-stream` use it.
package uienv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-dev/shepherd/internal/runnertls"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// Namespace and Service the APIService names, as config/ui ships them.
const (
	Namespace = "shepherd-system"
	Service   = "shepherd-api"
)

// Configure sets env's API server up for aggregation: a front-proxy CA and client certificate
// written to dir, the request-header flags, and routing to the endpoint's address.
func Configure(env *envtest.Environment, dir string) error {
	caFile, certFile, keyFile, err := frontProxy(dir)
	if err != nil {
		return err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", caFile)
	args.Set("requestheader-allowed-names", "front-proxy-client")
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", certFile)
	args.Set("proxy-client-key-file", keyFile)
	args.Set("enable-aggregator-routing", "true")
	return nil
}

// HostIP is an address of this machine that is not loopback: the API server refuses Endpoints
// on loopback, and the aggregator routes to the endpoint (--enable-aggregator-routing).
func HostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("this machine has no IPv4 address besides loopback: the API server's aggregator cannot reach a local server")
}

// Served is a UI server listening for the API server.
type Served struct {
	// Addr is where it listens (HostIP:port); CA signs its certificate (the APIService's
	// caBundle).
	Addr string
	CA   []byte
	srv  *http.Server
}

// Close stops the server.
func (s *Served) Close() error { return s.srv.Close() }

// Serve serves h over TLS on HostIP with a certificate from a CA of its own, as the manager
// serves the UI (the runner channel's certificates; the API server's front proxy shows its
// client certificate), and registers it with the API server: the Namespace, Service, Endpoints,
// EndpointSlice and the APIService as config/ui ships it. It returns once the API server finds
// the APIService Available.
func Serve(ctx context.Context, c client.Client, h http.Handler) (*Served, error) {
	ip, err := HostIP()
	if err != nil {
		return nil, err
	}
	bundle, _, err := runnertls.Ensure(runnertls.Bundle{}, []string{Service + "." + Namespace + ".svc", ip}, time.Now())
	if err != nil {
		return nil, err
	}
	certs := &runnertls.Certificates{}
	if err := certs.Set(bundle); err != nil {
		return nil, err
	}
	tlsCfg := certs.ServerConfig().Clone()
	tlsCfg.ClientAuth = tls.RequestClientCert
	l, err := tls.Listen("tcp", net.JoinHostPort(ip, "0"), tlsCfg)
	if err != nil {
		return nil, err
	}
	s := &Served{Addr: l.Addr().String(), CA: bundle.CACert, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	_, portS, _ := net.SplitHostPort(s.Addr)
	port, _ := strconv.Atoi(portS)
	if err := register(ctx, c, ip, int32(port), bundle.CACert); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func register(ctx context.Context, c client.Client, ip string, port int32, caBundle []byte) error {
	ready, name := true, "https"
	apisvc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": ui.APIServiceName},
		"spec": map[string]any{"group": ui.Group, "version": ui.Version, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": Namespace, "name": Service, "port": int64(443)}, "caBundle": caBundle}}}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: Service, Namespace: Namespace},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}}}},
		&corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: Service, Namespace: Namespace}, //nolint:staticcheck // the aggregator may still read Endpoints
			Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: ip}}, Ports: []corev1.EndpointPort{{Name: "https", Port: port}}}}}, //nolint:staticcheck
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: Service + "-1", Namespace: Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: Service}}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}}},
		apisvc,
	} {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	var conds []any
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(apisvc), apisvc); err != nil {
			return false, nil //nolint:nilerr // try again until the timeout
		}
		conds, _, _ = unstructured.NestedSlice(apisvc.Object, "status", "conditions")
		for _, cd := range conds {
			if m, ok := cd.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the APIService did not turn Available: %v: %w", conds, err)
	}
	return nil
}

// frontProxy makes the front-proxy CA and the API server's client certificate, as files.
func frontProxy(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-client"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	write := func(name, typ string, b []byte) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600)
	}
	if caFile, err = write("front-ca.crt", "CERTIFICATE", caDER); err != nil {
		return "", "", "", err
	}
	if certFile, err = write("front.crt", "CERTIFICATE", der); err != nil {
		return "", "", "", err
	}
	keyFile, err = write("front.key", "EC PRIVATE KEY", keyDER)
	return caFile, certFile, keyFile, err
}
