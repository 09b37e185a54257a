package runnertls_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnertls"
)

var names = []string{"shepherd-runner.shepherd-system.svc", "10.96.0.20", "127.0.0.1"}

func cert(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnsureMakesKeepsAndRenews(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b, changed, err := runnertls.Ensure(runnertls.Bundle{}, names, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	ca, srv := cert(t, b.CACert), cert(t, b.Cert)
	g.Expect(ca.IsCA).To(BeTrue())
	g.Expect(srv.CheckSignatureFrom(ca)).To(Succeed())
	g.Expect(srv.DNSNames).To(ConsistOf("shepherd-runner.shepherd-system.svc"))
	g.Expect(srv.IPAddresses).To(HaveLen(2))
	g.Expect(srv.ExtKeyUsage).To(ConsistOf(x509.ExtKeyUsageServerAuth))

	// Unchanged names, well within its life: nothing to do (a restart does not rotate).
	again, changed, err := runnertls.Ensure(b, []string{"127.0.0.1", "10.96.0.20", "shepherd-runner.shepherd-system.svc", "127.0.0.1"}, now.Add(24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse())
	g.Expect(again).To(Equal(b))

	// The Service got another address: a new certificate from the same CA.
	moved, changed, err := runnertls.Ensure(b, []string{"shepherd-runner.shepherd-system.svc", "10.96.0.21"}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(moved.CACert).To(Equal(b.CACert), "the CA stays: runners keep trusting it")
	g.Expect(cert(t, moved.Cert).IPAddresses[0].String()).To(Equal("10.96.0.21"))

	// Two thirds into the certificate's year: renewed, same CA.
	renewed, changed, err := runnertls.Ensure(b, names, now.Add(250*24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(renewed.CACert).To(Equal(b.CACert))
	g.Expect(cert(t, renewed.Cert).NotAfter).To(BeTemporally(">", cert(t, b.Cert).NotAfter))

	// The CA's key is gone (a Secret edited by hand): a new CA, and a certificate from it.
	lost := b
	lost.CAKey = nil
	fresh, changed, err := runnertls.Ensure(lost, names, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(fresh.CACert).NotTo(Equal(b.CACert))
	g.Expect(cert(t, fresh.Cert).CheckSignatureFrom(cert(t, fresh.CACert))).To(Succeed())

	// A key that does not match the CA certificate is no CA.
	mixed := b
	mixed.CAKey = fresh.CAKey
	_, changed, err = runnertls.Ensure(mixed, names, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())

	_, _, err = runnertls.Ensure(b, nil, now)
	g.Expect(err).To(HaveOccurred())

	g.Expect(runnertls.FromData(b.Data())).To(Equal(b))
}

// TestRunnerVerifiesTheManager: the runner's client trusts the CA file only, follows a change of
// the file (a rotation), and refuses a server the CA did not sign.
func TestRunnerVerifiesTheManager(t *testing.T) {
	g := NewWithT(t)
	b, _, err := runnertls.Ensure(runnertls.Bundle{}, []string{"127.0.0.1"}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	certs := &runnertls.Certificates{}
	g.Expect(certs.Set(b)).To(Succeed())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", certs.ServerConfig())
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"prompt":"hello"}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	url := "https://" + ln.Addr().String()

	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	g.Expect(os.WriteFile(caFile, b.CACert, 0o644)).To(Succeed())
	g.Expect(os.WriteFile(tokenFile, []byte("t"), 0o600)).To(Succeed())
	c, err := runnerapi.NewClient(url, tokenFile, caFile)
	g.Expect(err).NotTo(HaveOccurred())
	task, err := c.Task(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(task.Prompt).To(Equal("hello"))

	// Another CA in the file: the same server is refused on the next connection.
	other, _, err := runnertls.Ensure(runnertls.Bundle{}, []string{"127.0.0.1"}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(caFile, other.CACert, 0o644)).To(Succeed())
	g.Expect(os.Chtimes(caFile, time.Now().Add(time.Minute), time.Now().Add(time.Minute))).To(Succeed())
	c.HTTP.CloseIdleConnections()
	_, err = c.Task(t.Context())
	g.Expect(err).To(MatchError(ContainSubstring("certificate")))

	// The server rotates to the new CA's certificate: trusted again.
	g.Expect(certs.Set(other)).To(Succeed())
	c.HTTP.CloseIdleConnections()
	_, err = c.Task(t.Context())
	g.Expect(err).NotTo(HaveOccurred())

	// An https URL without a CA file is refused up front.
	_, err = runnerapi.NewClient(url, tokenFile, "")
	g.Expect(err).To(MatchError(ContainSubstring("--ca-file")))

	// A handshake before any certificate is set fails.
	empty := &runnertls.Certificates{}
	l, err := tls.Listen("tcp", "127.0.0.1:0", empty.ServerConfig())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = l.Close() }()
	go func() {
		conn, err := l.Accept()
		if err == nil {
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	conn, err := net.Dial("tcp", l.Addr().String())
	g.Expect(err).NotTo(HaveOccurred())
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the server has no certificate to verify
	g.Expect(tc.Handshake()).NotTo(Succeed())
}
