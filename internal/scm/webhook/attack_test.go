package webhook

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// countingBody is a request body that counts what the handler reads of it: the attack tests
// check that a refused delivery was refused before its body was read.
type countingBody struct {
	left int64
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > b.left {
		n = b.left
	}
	for i := range p[:n] {
		p[i] = 'x'
	}
	b.left -= n
	b.read.Add(n)
	return int(n), nil
}

func (b *countingBody) Close() error { return nil }

func hugeRequest(size int64, declared bool) (*http.Request, *countingBody) {
	body := &countingBody{left: size}
	req := httptest.NewRequest(http.MethodPost, ProjectPath(project), nil)
	req.Body = body
	req.ContentLength = -1
	if declared {
		req.ContentLength = size
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "pull_request")
	return req, body
}

// A 25 MiB unauthenticated body is refused without reading it: no signature, or a declared size
// above the cap. An undeclared (chunked) one is read up to the cap and no further.
func TestAttackHugeUnauthenticatedBody(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t)
	const size = 25 << 20

	req, body := hugeRequest(size, true)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusUnauthorized), "no signature")
	g.Expect(body.read.Load()).To(BeZero(), "nothing read without a signature")

	req, body = hugeRequest(size, true)
	req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(body.read.Load()).To(BeZero(), "a declared size above the cap is refused unread")

	req, body = hugeRequest(size, false)
	req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(body.read.Load()).To(BeNumerically("<=", DefaultMaxBody+64<<10), "read up to the cap only")
	g.Expect(s.hints).To(BeEmpty())
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("pull_request", "too_large"))).To(Equal(2.0))
}

// 64 slow senders at once, each declaring a body at the cap: at most MaxInFlight of them are read
// at a time (the budget is MaxInFlight × MaxBody bytes), each for BodyTimeout at most; the rest
// wait AdmitWait and are turned away. Every one of them is answered, and a real delivery gets
// through once they are gone.
func TestAttackSlowBodies(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t, func(o *Options) {
		o.MaxInFlight, o.MaxBody, o.BodyTimeout, o.AdmitWait = 4, 4096, 300*time.Millisecond, 200*time.Millisecond
	})
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := h.Reserved(); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	srv := httptest.NewServer(h)
	defer srv.Close()
	const senders = 64
	codes := make(chan int, senders)
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), time.Second)
			if err != nil {
				codes <- -1
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// Headers at once, then one byte of the declared 4096 and nothing more.
			_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n"+
				"X-GitHub-Delivery: slow-%d\r\nX-Hub-Signature-256: sha256=%s\r\nContent-Length: 4096\r\n\r\n{", ProjectPath(project), i, strings.Repeat("0", 64))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				codes <- -2
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(stop)
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	g.Expect(got[http.StatusRequestTimeout]+got[http.StatusServiceUnavailable]).To(Equal(senders), "every slow sender is answered: %v", got)
	g.Expect(got[http.StatusRequestTimeout]).To(BeNumerically(">=", 4))
	g.Expect(peak.Load()).To(BeNumerically("<=", 4*4096), "never more bytes read at once than the budget")
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("push", "busy"))).To(BeNumerically(">", 0))

	body := fakegithub.Fixture("webhooks/push.json")
	g.Expect(deliver(h, "push", "real", body, Sign(secret, body)).Code).To(Equal(http.StatusAccepted))
	g.Expect(s.hints).To(HaveLen(1))
}

// The forge's canonical case verifies against a Project URL typed in lower case: the hint carries
// the Project's spelling, and the Poller matches either.
func TestLowerCaseProjectVerifiesCanonicalDelivery(t *testing.T) {
	g := NewWithT(t)
	h, s, _ := newHandler(t, func(o *Options) {
		o.Lookup = func(context.Context, types.NamespacedName) (Target, error) {
			return Target{Repo: scm.Repo{Owner: "codertocat", Name: "hello-world"}, Secret: secret}, nil
		}
	})
	body := []byte(`{"action":"opened","number":2,"repository":{"full_name":"Codertocat/Hello-World"}}`)
	rec := deliver(h, "pull_request", "case", body, Sign(secret, body))
	g.Expect(rec.Code).To(Equal(http.StatusAccepted), rec.Body.String())
	g.Expect(s.hints).To(HaveLen(1))
	g.Expect(s.hints[0].Repo).To(Equal(scm.Repo{Owner: "codertocat", Name: "hello-world"}))
	g.Expect(s.hints[0].Namespace).To(Equal(project.Namespace), "the hint speaks for the path's namespace only")
}

// App and organisation hooks: installation events need no answer but 2xx, before any lookup or
// signature; a ping without a repository verifies and is acknowledged.
func TestInstallationAndPingDeliveries(t *testing.T) {
	g := NewWithT(t)
	lookups := 0
	h, s, _ := newHandler(t)
	inner := h.opts.Lookup
	h.opts.Lookup = func(ctx context.Context, key types.NamespacedName) (Target, error) {
		lookups++
		return inner(ctx, key)
	}
	for _, ev := range []string{"installation", "installation_repositories", "github_app_authorization", "star"} {
		body := []byte(`{"action":"created","installation":{"id":1}}`)
		rec := deliver(h, ev, "i-"+ev, body, "")
		g.Expect(rec.Code).To(Equal(http.StatusOK), ev)
	}
	g.Expect(lookups).To(BeZero(), "unused events cost no lookup")
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1,"hook":{"type":"Organization"},"organization":{"login":"octo-org"}}`)
	rec := deliver(h, "ping", "p1", ping, Sign(secret, ping))
	g.Expect(rec.Code).To(Equal(http.StatusAccepted), rec.Body.String())
	g.Expect(s.hints).To(HaveLen(1))
	g.Expect(s.hints[0].IsZero()).To(BeTrue())
	g.Expect(s.hints[0].Webhook).To(BeTrue(), "the ping says the Project's webhooks flow")
	g.Expect(deliver(h, "ping", "p2", ping, Sign([]byte("other"), ping)).Code).To(Equal(http.StatusUnauthorized))
}

// A form-encoded delivery (GitHub's other content type) is told what to change; a path that
// names no Project, or one that is not a Project path, is a 404 without a body read.
func TestWrongContentTypeAndPaths(t *testing.T) {
	g := NewWithT(t)
	h, _, _ := newHandler(t)
	body := fakegithub.Fixture("webhooks/push.json")
	req := httptest.NewRequest(http.MethodPost, ProjectPath(project), strings.NewReader("payload="+string(body)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", Sign(secret, body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusUnsupportedMediaType))
	g.Expect(rec.Body.String()).To(ContainSubstring("application/json"))

	for _, path := range []string{"/", "/webhook", "/hooks/team", "/hooks/Team/widgets", "/hooks/team/widgets/extra", "/hooks/../widgets", "/hooks/other/widgets"} {
		r, b := hugeRequest(1<<20, true)
		r.URL.Path = path
		r.Header.Set("X-Hub-Signature-256", Sign(secret, body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		g.Expect(rec.Code).To(Equal(http.StatusNotFound), path)
		g.Expect(b.read.Load()).To(BeZero(), path)
	}
}

// Slow senders that declare small bodies hold only what they declared: a real delivery is read
// while 64 of them hold their connections.
func TestSlowSmallSendersDoNotBlockRealDeliveries(t *testing.T) {
	g := NewWithT(t)
	h, s, _ := newHandler(t, func(o *Options) { o.BodyTimeout, o.AdmitWait = 2*time.Second, 200*time.Millisecond })
	srv := httptest.NewServer(h)
	defer srv.Close()
	var conns []net.Conn
	for i := range 64 {
		conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n"+
			"X-GitHub-Delivery: slow-%d\r\nX-Hub-Signature-256: sha256=%s\r\nContent-Length: 4096\r\n\r\n{", ProjectPath(project), i, strings.Repeat("0", 64))
		conns = append(conns, conn)
	}
	g.Eventually(h.Reserved).Should(BeNumerically(">=", 64*4096), "the slow senders are being read")
	body := fakegithub.Fixture("webhooks/push.json")
	g.Expect(deliver(h, "push", "real", body, Sign(secret, body)).Code).To(Equal(http.StatusAccepted))
	g.Expect(s.hints).To(HaveLen(1))
	g.Expect(conns).To(HaveLen(64))
}
