// Package runnertls gives the runner channel TLS without cert-manager: the manager makes its own
// certificate authority at first start, keeps it in a Secret of its namespace, issues the
// channel's serving certificate from it, renews that certificate before it expires, and
// publishes the CA certificate (never the key) for agent pods, which verify the manager with it.
//
// Lifetimes: the CA 10 years, the serving certificate 1 year, renewed when a third of its life is
// left. Rotating the CA by hand: delete the Secret; the manager makes a new CA and certificate at
// once and republishes the bundle; runners that still trust the old CA fail their requests and
// retry until the kubelet refreshes their projected bundle (about a minute), then go on.
package runnertls

import (
	"bytes"
	"crypto"
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
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// Keys of the Secret that holds the CA and the serving certificate.
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
)

// Lifetimes.
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	ServerLifetime = 365 * 24 * time.Hour
)

// Bundle is the CA and the serving certificate, as PEM.
type Bundle struct {
	CACert, CAKey, Cert, Key []byte
}

// FromData reads a bundle from a Secret's data; missing keys stay empty.
func FromData(data map[string][]byte) Bundle {
	return Bundle{CACert: data[KeyCACert], CAKey: data[KeyCAKey], Cert: data[KeyTLSCert], Key: data[KeyTLSKey]}
}

// Data is the bundle as a Secret's data.
func (b Bundle) Data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.CACert, KeyCAKey: b.CAKey, KeyTLSCert: b.Cert, KeyTLSKey: b.Key}
}

// Ensure returns b when it holds a usable CA and a serving certificate for exactly the names
// (DNS names and IP addresses) that is not due for renewal at now, and otherwise a bundle with
// what was missing made anew: a new CA when there is none or it is not usable (its key lost, a
// third of its life left), a new serving certificate signed by the CA when the CA changed, the
// names changed, or a third of the certificate's life is left. changed says whether it differs.
func Ensure(b Bundle, names []string, now time.Time) (out Bundle, changed bool, err error) {
	names = normalise(names)
	if len(names) == 0 {
		return b, false, errors.New("runnertls: the serving certificate needs at least one name")
	}
	ca, caKey, err := parseCA(b)
	if err != nil || due(ca, now) {
		caPEM, keyPEM, err := newCA(now)
		if err != nil {
			return b, false, err
		}
		b = Bundle{CACert: caPEM, CAKey: keyPEM}
		if ca, caKey, err = parseCA(b); err != nil {
			return b, false, err
		}
		changed = true
	}
	if !changed && serverCurrent(b, ca, names, now) {
		return b, false, nil
	}
	if b.Cert, b.Key, err = issue(ca, caKey, names, now); err != nil {
		return b, false, err
	}
	return b, true, nil
}

// due: a third of the certificate's life is left.
func due(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotAfter.Add(-life / 3))
}

func parseCA(b Bundle) (*x509.Certificate, crypto.Signer, error) {
	cert, err := parseCert(b.CACert)
	if err != nil {
		return nil, nil, err
	}
	key, err := parseKey(b.CAKey)
	if err != nil {
		return nil, nil, err
	}
	if !cert.IsCA {
		return nil, nil, errors.New("not a CA certificate")
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, nil, errors.New("the CA key does not match its certificate")
	}
	return cert, key, nil
}

func serverCurrent(b Bundle, ca *x509.Certificate, names []string, now time.Time) bool {
	cert, err := parseCert(b.Cert)
	if err != nil || due(cert, now) || cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	if _, err := tls.X509KeyPair(b.Cert, b.Key); err != nil {
		return false
	}
	return slices.Equal(certNames(cert), names)
}

func certNames(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return normalise(out)
}

func normalise(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			n = ip.String()
		}
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("runnertls: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Shepherd runner channel CA", Organization: []string{"shepherd.dev"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("runnertls: CA certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

func issue(ca *x509.Certificate, caKey crypto.Signer, names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("runnertls: serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("runnertls: serving certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(p []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// Certificates holds the serving certificate the channel's TLS listener presents; Set replaces
// it (a renewal) without a restart.
type Certificates struct {
	cert atomic.Pointer[tls.Certificate]
}

// Set installs the bundle's serving certificate.
func (c *Certificates) Set(b Bundle) error {
	kp, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return fmt.Errorf("runnertls: serving key pair: %w", err)
	}
	c.cert.Store(&kp)
	return nil
}

// GetCertificate is tls.Config's hook; until Set, handshakes fail.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if kp := c.cert.Load(); kp != nil {
		return kp, nil
	}
	return nil, errors.New("runnertls: no serving certificate yet")
}

// ServerConfig is the channel listener's TLS configuration.
func (c *Certificates) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// SameCA reports whether two PEM bundles hold the same certificates.
func SameCA(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }
