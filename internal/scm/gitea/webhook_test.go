//go:build integration

package gitea

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	giteatest "github.com/shepherd-dev/shepherd/test/gitea"
)

// giteaProject is the Project whose path Gitea's hooks deliver to.
var giteaProject = types.NamespacedName{Namespace: "team", Name: "widgets"}

// delivery is one request Gitea sent, as it arrived.
type delivery struct {
	event, eventType string
	header           http.Header
	body             []byte
	status           int
}

// receiver runs the real webhook handler on loopback and records what Gitea delivered and which
// hints the handler produced.
type receiver struct {
	mu         sync.Mutex
	deliveries []delivery
	hints      []scm.Hint
	handler    *webhook.Handler
	metrics    *scm.Metrics
	srv        *httptest.Server
	onHint     func(scm.Hint)
}

func newReceiver(t *testing.T, repo scm.Repo, secret []byte) *receiver {
	t.Helper()
	g := NewWithT(t)
	m, err := scm.NewMetrics(nil)
	g.Expect(err).NotTo(HaveOccurred())
	r := &receiver{metrics: m}
	r.handler, err = webhook.NewHandler(webhook.Options{
		Lookup: func(_ context.Context, key types.NamespacedName) (webhook.Target, error) {
			if key != giteaProject {
				return webhook.Target{}, webhook.ErrUnknownProject
			}
			return webhook.Target{Repo: repo, Secret: secret}, nil
		},
		OnHint: func(h scm.Hint) {
			r.mu.Lock()
			r.hints = append(r.hints, h)
			f := r.onHint
			r.mu.Unlock()
			if f != nil {
				f(h)
			}
		},
		Metrics: m,
	})
	g.Expect(err).NotTo(HaveOccurred())
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		r.handler.ServeHTTP(rec, req)
		r.mu.Lock()
		r.deliveries = append(r.deliveries, delivery{event: req.Header.Get("X-GitHub-Event"), eventType: req.Header.Get("X-Gitea-Event-Type"),
			header: req.Header.Clone(), body: body, status: rec.Code})
		r.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// hint returns the hints of an event so far.
func (r *receiver) hintsOf(event string) []scm.Hint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []scm.Hint
	for _, h := range r.hints {
		if h.Event == event {
			out = append(out, h)
		}
	}
	return out
}

func (r *receiver) deliveriesOf(event string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.deliveries {
		if d.event == event {
			out = append(out, d)
		}
	}
	return out
}

// waitHint waits until a hint of the event satisfies match.
func (r *receiver) waitHint(t *testing.T, event string, match func(scm.Hint) bool) scm.Hint {
	t.Helper()
	var found scm.Hint
	NewWithT(t).Eventually(func() bool {
		for _, h := range r.hintsOf(event) {
			if match(h) {
				found = h
				return true
			}
		}
		return false
	}).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(BeTrue(), "no %s hint matched", event)
	return found
}

func TestGiteaDeliveriesAreVerifiedAndRouted(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	secret := []byte("gitea-webhook-secret")
	r := newReceiver(t, e.repo, secret)
	_, err := e.owner.CreateWebhook(ctx, e.repo.Owner, e.repo.Name, r.srv.URL+webhook.ProjectPath(giteaProject), string(secret))
	g.Expect(err).NotTo(HaveOccurred())
	// A second hook signs with a secret Shepherd does not know: every delivery of it is refused.
	_, err = e.owner.CreateWebhook(ctx, e.repo.Owner, e.repo.Name, r.srv.URL+webhook.ProjectPath(giteaProject), "not-the-secret")
	g.Expect(err).NotTo(HaveOccurred())

	head := e.commit("feature", map[string]string{"a.txt": "a\n"})
	h := r.waitHint(t, "push", func(h scm.Hint) bool { return slices.Contains(h.Branches, "feature") })
	g.Expect(h.SHAs).To(ConsistOf(head))
	g.Expect(h.Repo).To(Equal(e.repo))

	pr, err := e.p.CreatePullRequest(ctx, e.repo, scm.NewPullRequest{Head: scm.Head{Branch: "feature"}, Base: "main", Title: "Hooks"})
	g.Expect(err).NotTo(HaveOccurred())
	h = r.waitHint(t, "pull_request", func(h scm.Hint) bool { return slices.Contains(h.Numbers, pr.Number) })
	g.Expect(h.Branches).To(ContainElement("feature"))

	moved := e.commit("feature", map[string]string{"b.txt": "b\n"})
	h = r.waitHint(t, "pull_request", func(h scm.Hint) bool { return slices.Contains(h.SHAs, moved) })
	g.Expect(h.Numbers).To(ConsistOf(pr.Number))
	g.Expect(r.deliveryAction(t, "pull_request", moved)).To(Equal("synchronized"))

	e.status(moved, "ci/build", "failure")
	h = r.waitHint(t, "status", func(h scm.Hint) bool { return slices.Contains(h.SHAs, moved) })
	g.Expect(h.Numbers).To(BeEmpty())

	_, err = e.reviewer.Review(ctx, e.repo.Owner, e.repo.Name, pr.Number, "REQUEST_CHANGES", "no",
		giteatest.ReviewComment{Path: "b.txt", Line: 1, Body: "why b?"})
	g.Expect(err).NotTo(HaveOccurred())
	h = r.waitHint(t, "pull_request_rejected", func(h scm.Hint) bool { return slices.Contains(h.Numbers, pr.Number) })
	g.Expect(h.SHAs).To(ContainElement(moved))
	// A commenting review (Gitea's pull_request_comment).
	_, err = e.reviewer.Review(ctx, e.repo.Owner, e.repo.Name, pr.Number, "COMMENT", "thinking",
		giteatest.ReviewComment{Path: "a.txt", Line: 1, Body: "and a?"})
	g.Expect(err).NotTo(HaveOccurred())
	r.waitHint(t, "pull_request_comment", func(h scm.Hint) bool { return slices.Contains(h.Numbers, pr.Number) })

	_, err = e.reviewer.Review(ctx, e.repo.Owner, e.repo.Name, pr.Number, "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	r.waitHint(t, "pull_request_approved", func(h scm.Hint) bool { return slices.Contains(h.Numbers, pr.Number) })

	g.Expect(e.reviewer.CommentIssue(ctx, e.repo.Owner, e.repo.Name, pr.Number, "one more thing")).To(Succeed())
	r.waitHint(t, "issue_comment", func(h scm.Hint) bool { return slices.Contains(h.Numbers, pr.Number) })
	issue, err := e.owner.CreateIssue(ctx, e.repo.Owner, e.repo.Name, "A plain issue", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.owner.CommentIssue(ctx, e.repo.Owner, e.repo.Name, issue, "not a pull request")).To(Succeed())
	g.Eventually(func() int { return len(r.deliveriesOf("issue_comment")) }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 4))

	g.Expect(e.owner.DeleteBranch(ctx, e.repo.Owner, e.repo.Name, "feature")).To(Succeed())
	r.waitHint(t, "delete", func(h scm.Hint) bool { return slices.Contains(h.Branches, "feature") })

	// Every delivery carried GitHub's headers and Gitea's; half were signed with the wrong
	// secret and refused.
	r.mu.Lock()
	all := slices.Clone(r.deliveries)
	r.mu.Unlock()
	accepted, refused := 0, 0
	for _, d := range all {
		g.Expect(d.header.Get("X-GitHub-Delivery")).NotTo(BeEmpty())
		g.Expect(d.header.Get("X-Gitea-Event")).To(Equal(d.event))
		g.Expect(d.header.Get("X-Hub-Signature-256")).To(HavePrefix("sha256="))
		switch d.status {
		case http.StatusOK, http.StatusAccepted:
			if !webhook.Supported(d.event) {
				// An event Shepherd does not use (create, release) is answered 200 before its body
				// is read or its signature checked: it causes nothing, and that costs nothing.
				continue
			}
			accepted++
			g.Expect(webhook.Verify(secret, d.body, d.header.Get("X-Hub-Signature-256")[len("sha256="):])).To(BeTrue(), "accepted %s (%s), answered %d", d.event, d.eventType, d.status)
		case http.StatusUnauthorized:
			refused++
		default:
			t.Errorf("delivery %s answered %d", d.event, d.status)
		}
	}
	g.Expect(accepted).To(BeNumerically(">", 0))
	g.Expect(refused).To(BeNumerically(">", 0))
	badSig := 0.0
	for _, ev := range []string{"push", "pull_request", "status", "pull_request_rejected", "pull_request_approved", "pull_request_comment", "issue_comment", "delete"} {
		badSig += testutil.ToFloat64(r.metrics.WebhookDeliveries.WithLabelValues(ev, "bad_signature"))
	}
	g.Expect(badSig).To(BeNumerically(">=", 9))
	// No hint came from the issue that is not a pull request.
	for _, h := range r.hintsOf("issue_comment") {
		g.Expect(h.Numbers).NotTo(ContainElement(issue))
	}
	recordDeliveries(t, all, secret)
}

// deliveryAction returns the action of the pull_request delivery that carried sha.
func (r *receiver) deliveryAction(t *testing.T, event, sha string) string {
	t.Helper()
	for _, d := range r.deliveriesOf(event) {
		var p struct {
			Action      string `json:"action"`
			PullRequest struct {
				Head struct {
					SHA string `json:"sha"`
				} `json:"head"`
			} `json:"pull_request"`
		}
		if json.Unmarshal(d.body, &p) == nil && p.PullRequest.Head.SHA == sha {
			return p.Action
		}
	}
	return ""
}

// recordDeliveries writes one accepted delivery of each event to the webhook package's testdata
// when SHEPHERD_RECORD_GITEA_WEBHOOKS names that directory: how its Gitea fixtures were made.
func recordDeliveries(t *testing.T, all []delivery, secret []byte) {
	dir := os.Getenv("SHEPHERD_RECORD_GITEA_WEBHOOKS")
	if dir == "" {
		return
	}
	seen := map[string]bool{}
	for _, d := range all {
		name := d.eventType
		if d.status == http.StatusUnauthorized || seen[name] {
			continue
		}
		seen[name] = true
		var v any
		if err := json.Unmarshal(d.body, &v); err != nil {
			t.Fatalf("delivery %s is not JSON: %v", name, err)
		}
		b, _ := json.MarshalIndent(map[string]any{"event": d.event, "payload": v}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, name+".json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWebhooksDriveThePoller(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	secret := []byte("poller-secret")
	r := newReceiver(t, e.repo, secret)
	changed := make(chan types.NamespacedName, 64)
	// Polling alone would look once an hour: whatever the Poller sees after the first read, a
	// delivery brought it.
	poller := scm.NewPoller(e.p, scm.PollerOptions{MaxAge: time.Hour, HintDelay: 50 * time.Millisecond, HintInterval: 50 * time.Millisecond,
		OnChange: func(k types.NamespacedName) { changed <- k }, Logger: logr.Discard()})
	r.mu.Lock()
	r.onHint = poller.Notify
	r.mu.Unlock()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = poller.Start(pctx) }()
	_, err := e.owner.CreateWebhook(ctx, e.repo.Owner, e.repo.Name, r.srv.URL+webhook.ProjectPath(giteaProject), string(secret))
	g.Expect(err).NotTo(HaveOccurred())

	key := types.NamespacedName{Namespace: giteaProject.Namespace, Name: "session"}
	poller.Register(key, scm.Watch{Repo: e.repo, Head: scm.Head{Branch: "feature"}})
	g.Eventually(func() bool { _, ok := poller.Get(key); return ok }).WithTimeout(30 * time.Second).Should(BeTrue())
	obs, _ := poller.Get(key)
	g.Expect(obs.PullRequest).To(BeNil(), "no pull request yet")

	pr := e.open("feature")
	observed := func() *scm.PullRequest {
		o, _ := poller.Get(key)
		return o.PullRequest
	}
	g.Eventually(observed).WithTimeout(30 * time.Second).ShouldNot(BeNil())
	g.Expect(observed().Number).To(Equal(pr.Number))

	_, err = e.reviewer.Review(ctx, e.repo.Owner, e.repo.Name, pr.Number, "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() scm.ReviewDecision { return observed().ReviewDecision }).WithTimeout(30 * time.Second).Should(Equal(scm.ReviewApproved))

	e.status(pr.HeadSHA, "ci/build", "failure")
	g.Eventually(func() scm.ChecksState { return observed().Checks.State }).WithTimeout(30 * time.Second).Should(Equal(scm.ChecksFailing))
	g.Expect(observed().Checks.FailedChecks[0].URL).To(Equal("https://ci.example.com/ci/build/failure"))
	g.Expect(changed).NotTo(BeEmpty())
}
