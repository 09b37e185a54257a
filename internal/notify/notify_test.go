package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func sample() Notification {
	return Notification{
		ID: "s1-ci.failing-abc123", Type: "ci.failing", Priority: agentsv1alpha1.PriorityWarning,
		Reason: "ChecksFailed", Message: "test (ubuntu) failed <script>", Namespace: "team-a",
		Session: "widgets-42", Project: "widgets", PullRequestURL: "https://github.com/acme/widgets/pull/7",
		Time: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

// recordingSleep records the waits Deliver asks for instead of sleeping.
type recordingSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recordingSleep) sleep(_ context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
	return nil
}

func TestWebhookIsSignedAndCarriesTheDeliveryID(t *testing.T) {
	g := NewWithT(t)
	secret := []byte("s3cret")
	var gotBody []byte
	var gotHeaders http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		gotHeaders = r.Header.Clone()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	s := &WebhookSender{URL: srv.URL, Secret: secret, Client: srv.Client()}
	g.Expect(Deliver(context.Background(), s, sample(), DefaultPolicy, (&recordingSleep{}).sleep)).To(Succeed())
	g.Expect(Verify(secret, gotBody, gotHeaders.Get(SignatureHeader))).To(BeTrue())
	g.Expect(Verify([]byte("other"), gotBody, gotHeaders.Get(SignatureHeader))).To(BeFalse())
	g.Expect(gotHeaders.Get(DeliveryHeader)).To(Equal("s1-ci.failing-abc123"))
	g.Expect(gotHeaders.Get(EventHeader)).To(Equal("ci.failing"))
	var n Notification
	g.Expect(json.Unmarshal(gotBody, &n)).To(Succeed())
	g.Expect(n).To(Equal(sample()))
}

func TestDeliverRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []func(http.ResponseWriter)
		wantErr   func(error) bool
		wantCalls int32
		wantWaits []time.Duration
	}{
		{
			name:      "a 500 then success is retried after the initial back-off",
			answers:   []func(http.ResponseWriter){status(500), status(200)},
			wantErr:   func(err error) bool { return err == nil },
			wantCalls: 2, wantWaits: []time.Duration{time.Second},
		},
		{
			name:      "Retry-After in seconds is honoured when longer than the back-off",
			answers:   []func(http.ResponseWriter){retryAfter(429, "7"), status(204)},
			wantErr:   func(err error) bool { return err == nil },
			wantCalls: 2, wantWaits: []time.Duration{7 * time.Second},
		},
		{
			name:      "a 400 is permanent: no retry",
			answers:   []func(http.ResponseWriter){status(400)},
			wantErr:   func(err error) bool { var p *PermanentError; return errors.As(err, &p) && p.Status == 400 },
			wantCalls: 1,
		},
		{
			name:      "a Retry-After longer than the policy allows gives up at once",
			answers:   []func(http.ResponseWriter){retryAfter(503, "3600")},
			wantErr:   func(err error) bool { var g *GiveUpError; return errors.As(err, &g) && g.Attempts == 1 },
			wantCalls: 1,
		},
		{
			name:      "five failures give up with the back-off doubling up to its cap",
			answers:   []func(http.ResponseWriter){status(502), status(502), status(502), status(502), status(502)},
			wantErr:   func(err error) bool { var g *GiveUpError; return errors.As(err, &g) && g.Attempts == 5 },
			wantCalls: 5, wantWaits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				i := calls.Add(1) - 1
				tc.answers[min(int(i), len(tc.answers)-1)](w)
			}))
			defer srv.Close()
			rs := &recordingSleep{}
			err := Deliver(context.Background(), &WebhookSender{URL: srv.URL, Secret: []byte("k"), Client: srv.Client()}, sample(), DefaultPolicy, rs.sleep)
			g.Expect(tc.wantErr(err)).To(BeTrue(), "error: %v", err)
			g.Expect(calls.Load()).To(Equal(tc.wantCalls))
			g.Expect(rs.waits).To(Equal(tc.wantWaits))
		})
	}
}

func status(code int) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { w.WriteHeader(code) }
}

func retryAfter(code int, v string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { w.Header().Set("Retry-After", v); w.WriteHeader(code) }
}

func TestRetryAfterHTTPDate(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	d, ok := parseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now)
	g.Expect(ok).To(BeTrue())
	g.Expect(d).To(Equal(90 * time.Second))
	_, ok = parseRetryAfter("soon", now)
	g.Expect(ok).To(BeFalse())
}

// A message that tries Slack's special mentions and a spoofed link, and a pull request URL that
// tries to close the link early, reach Slack as plain text.
func TestAttackSlackMentionsAndLinksAreEscaped(t *testing.T) {
	g := NewWithT(t)
	n := sample()
	n.Message = "<!channel> please review <https://evil.example/login|github.com/acme/widgets> & <@U123>"
	n.PullRequestURL = "https://github.com/acme/widgets/pull/7|click here>"
	b, err := SlackPayload(n)
	g.Expect(err).NotTo(HaveOccurred())
	var m slackMessage
	g.Expect(json.Unmarshal(b, &m)).To(Succeed())
	for _, text := range []string{m.Text, m.Blocks[0].Text.Text, m.Blocks[1].Text.Text} {
		g.Expect(text).NotTo(ContainSubstring("<!channel>"))
		g.Expect(text).NotTo(ContainSubstring("<https://evil"))
		g.Expect(text).NotTo(ContainSubstring("<@U123>"))
	}
	g.Expect(m.Blocks[1].Text.Text).To(HaveSuffix("<https://github.com/acme/widgets/pull/7%7Cclick here&gt;|Pull request>"))
	n.PullRequestURL = "javascript:alert(1)"
	b, _ = SlackPayload(n)
	g.Expect(string(b)).NotTo(ContainSubstring("javascript:"))
}

// A refusal's body never reaches the error (and so the Project's status) unless it is an error
// code: a notification URL aimed at an internal service reads nothing back.
func TestAttackResponseBodiesAreNotKept(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/code") {
			w.WriteHeader(http.StatusGone)
			_, _ = w.Write([]byte("channel_is_archived"))
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"AccessKeyId":"AKIA-internal","SecretAccessKey":"s3cr3t"}`))
	}))
	defer srv.Close()
	for path, want := range map[string]string{"/leak": "refused with HTTP 403", "/code": "refused with HTTP 410: channel_is_archived"} {
		s := &SlackSender{URL: srv.URL + path, Client: srv.Client()}
		err := s.Send(context.Background(), sample())
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(Equal(want))
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cr3t"))
	}
}

// fakeSlack follows Slack's documented incoming-webhook answers.
func fakeSlack(t *testing.T, got *[]map[string]any, answer func(w http.ResponseWriter) bool) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("invalid_payload"))
			return
		}
		var m map[string]any
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m["text"] == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("invalid_payload"))
			return
		}
		if answer != nil && answer(w) {
			return
		}
		*got = append(*got, m)
		_, _ = w.Write([]byte("ok"))
	}))
}

func TestSlack(t *testing.T) {
	g := NewWithT(t)
	var got []map[string]any
	srv := fakeSlack(t, &got, nil)
	defer srv.Close()
	s := &SlackSender{URL: srv.URL + "/services/T000/B000/XXXXSECRET", Client: srv.Client()}
	g.Expect(Deliver(context.Background(), s, sample(), DefaultPolicy, (&recordingSleep{}).sleep)).To(Succeed())
	g.Expect(got).To(HaveLen(1))
	// The fallback text is mrkdwn as well: escaped.
	g.Expect(got[0]["text"]).To(Equal("[warning] ci.failing team-a/widgets-42: test (ubuntu) failed &lt;script&gt;"))
	blocks, _ := json.Marshal(got[0]["blocks"])
	// mrkdwn control characters are escaped; the PR link uses Slack's <url|text> form.
	g.Expect(string(blocks)).To(ContainSubstring(`failed \u0026lt;script\u0026gt;`))
	g.Expect(string(blocks)).To(ContainSubstring(`\u003chttps://github.com/acme/widgets/pull/7|Pull request\u003e`))
}

func TestSlackRateLimitAndArchivedChannel(t *testing.T) {
	g := NewWithT(t)
	var got []map[string]any
	var calls atomic.Int32
	srv := fakeSlack(t, &got, func(w http.ResponseWriter) bool {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	})
	defer srv.Close()
	rs := &recordingSleep{}
	g.Expect(Deliver(context.Background(), &SlackSender{URL: srv.URL, Client: srv.Client()}, sample(), DefaultPolicy, rs.sleep)).To(Succeed())
	g.Expect(rs.waits).To(Equal([]time.Duration{2 * time.Second}))

	archived := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte("channel_is_archived"))
	}))
	defer archived.Close()
	err := Deliver(context.Background(), &SlackSender{URL: archived.URL, Client: archived.Client()}, sample(), DefaultPolicy, rs.sleep)
	var perm *PermanentError
	g.Expect(errors.As(err, &perm)).To(BeTrue())
	g.Expect(perm.Body).To(Equal("channel_is_archived"))
}

func TestSlackURLNeverAppearsInErrors(t *testing.T) {
	g := NewWithT(t)
	// Nothing listens on port 1: the connection is refused.
	s := &SlackSender{URL: "http://127.0.0.1:1/services/T000/B000/XXXXSECRET"}
	policy := DefaultPolicy
	policy.MaxAttempts = 1
	err := Deliver(context.Background(), s, sample(), policy, (&recordingSleep{}).sleep)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).NotTo(ContainSubstring("XXXXSECRET"))
	g.Expect(err.Error()).To(ContainSubstring("127.0.0.1:1"))
}

func TestSelect(t *testing.T) {
	g := NewWithT(t)
	routes := []agentsv1alpha1.NotificationRoute{
		{Name: "pager", Priorities: []agentsv1alpha1.Priority{agentsv1alpha1.PriorityUrgent}},
		{Name: "team", Priorities: []agentsv1alpha1.Priority{agentsv1alpha1.PriorityUrgent, agentsv1alpha1.PriorityAction, agentsv1alpha1.PriorityWarning}},
	}
	names := func(rs []agentsv1alpha1.NotificationRoute) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	g.Expect(names(Select(routes, agentsv1alpha1.PriorityUrgent))).To(Equal([]string{"pager", "team"}))
	g.Expect(names(Select(routes, agentsv1alpha1.PriorityWarning))).To(Equal([]string{"team"}))
	g.Expect(Select(routes, agentsv1alpha1.PriorityInfo)).To(BeEmpty())
}

type funcSender func(context.Context, Notification) error

func (f funcSender) Send(ctx context.Context, n Notification) error { return f(ctx, n) }

func TestDispatcherDeduplicatesAndReports(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	var sent atomic.Int32
	results := make(chan Result, 4)
	d := NewDispatcher(1, 8, DefaultPolicy, func(r Result) { results <- r })
	sender := funcSender(func(context.Context, Notification) error {
		<-release
		sent.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = d.Start(ctx); close(done) }()

	job := Job{Key: "team-a/widgets-42/n1/team", Route: "team", Sender: sender, Notification: sample()}
	g.Expect(d.Enqueue(job)).To(BeTrue())
	g.Expect(d.Enqueue(job)).To(BeFalse(), "the same key is not queued twice while pending")
	g.Expect(d.Pending(job.Key)).To(BeTrue())
	close(release)
	r := <-results
	g.Expect(r.Err).NotTo(HaveOccurred())
	g.Expect(r.Job.Key).To(Equal(job.Key))
	g.Expect(sent.Load()).To(Equal(int32(1)))
	g.Eventually(func() bool { return d.Pending(job.Key) }).Should(BeFalse())
	cancel()
	<-done
}
