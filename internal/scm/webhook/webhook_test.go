package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

var secret = []byte("It's a Secret to Everybody")

// project is the Project the test deliveries go to.
var project = types.NamespacedName{Namespace: "team", Name: "widgets"}

type sink struct {
	mu    sync.Mutex
	hints []scm.Hint
}

func (s *sink) add(h scm.Hint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hints = append(s.hints, h)
}

func newHandler(t *testing.T, opts ...func(*Options)) (*Handler, *sink, *scm.Metrics) {
	t.Helper()
	m, err := scm.NewMetrics(nil)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	s := &sink{}
	o := Options{
		Lookup: func(_ context.Context, key types.NamespacedName) (Target, error) {
			if key != project {
				return Target{}, ErrUnknownProject
			}
			return Target{Repo: scm.Repo{Owner: "octocat", Name: "Hello-World"}, Secret: secret}, nil
		},
		OnHint:  s.add,
		Metrics: m,
	}
	for _, f := range opts {
		f(&o)
	}
	h, err := NewHandler(o)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return h, s, m
}

func deliver(h http.Handler, event, id string, body []byte, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, ProjectPath(project), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	if id != "" {
		req.Header.Set("X-GitHub-Delivery", id)
	}
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestSignatureMatchesGitHubsExample(t *testing.T) {
	// GitHub's documented test vector for validating webhook deliveries.
	g := NewWithT(t)
	g.Expect(Sign(secret, []byte("Hello, World!"))).To(Equal("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"))
	g.Expect(Verify(secret, []byte("Hello, World!"), "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")).To(BeTrue())
	g.Expect(Verify(secret, []byte("Hello, World?"), "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")).To(BeFalse())
	g.Expect(Verify(nil, []byte("x"), "00")).To(BeFalse())
	g.Expect(Verify(secret, []byte("x"), "not-hex")).To(BeFalse())
}

func TestGoodSignatureRoutesEveryEvent(t *testing.T) {
	h, s, _ := newHandler(t)
	for _, tc := range []struct {
		event, fixture string
		want           scm.Hint
	}{
		{"pull_request", "pull_request.opened", scm.Hint{Numbers: []int{1347}, Branches: []string{"new-topic"}, SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e"}}},
		{"pull_request_review", "pull_request_review.submitted", scm.Hint{Numbers: []int{1347}, Branches: []string{"new-topic"}, SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e"}}},
		{"pull_request_review_comment", "pull_request_review_comment.created", scm.Hint{Numbers: []int{1347}, Branches: []string{"new-topic"}, SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e"}}},
		{"pull_request_review_thread", "pull_request_review_thread.resolved", scm.Hint{Numbers: []int{1347}, Branches: []string{"new-topic"}, SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e"}}},
		{"check_run", "check_run.completed", scm.Hint{Numbers: []int{3956}, Branches: []string{"say-hello", "new-topic"},
			SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e", "3dca65fa3e8d4b3da3f3d056c59aee1c50f41390"}}},
		{"check_suite", "check_suite.completed", scm.Hint{Numbers: []int{3956}, Branches: []string{"new-topic", "say-hello"},
			SHAs: []string{"6dcb09b5b57875f334f61aebed695e2e4193db5e", "3dca65fa3e8d4b3da3f3d056c59aee1c50f41390"}}},
		{"status", "status", scm.Hint{Branches: []string{"master"}, SHAs: []string{"6113728f27ae82c7b1a177c8d03f9e96e0adf246"}}},
		{"issue_comment", "issue_comment.created", scm.Hint{Numbers: []int{1347}}},
		{"push", "push.created", scm.Hint{Branches: []string{"new-topic"}, SHAs: []string{"6113728f27ae82c7b1a177c8d03f9e96e0adf246"}}},
		{"push", "push", scm.Hint{Branches: []string{"new-topic"}}},
		{"ping", "ping", scm.Hint{}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			g := NewWithT(t)
			body := fakegithub.Fixture("webhooks/" + tc.fixture + ".json")
			before := len(s.hints)
			rec := deliver(h, tc.event, "id-"+tc.fixture, body, Sign(secret, body))
			g.Expect(rec.Code).To(Equal(http.StatusAccepted), rec.Body.String())
			g.Expect(s.hints).To(HaveLen(before + 1))
			got := s.hints[len(s.hints)-1]
			want := tc.want
			want.Repo = scm.Repo{Owner: "octocat", Name: "Hello-World"}
			want.Event = tc.event
			g.Expect(got.Repo).To(Equal(want.Repo))
			g.Expect(got.Event).To(Equal(want.Event))
			g.Expect(got.Numbers).To(ConsistOf(orEmpty(want.Numbers)))
			g.Expect(got.Branches).To(ConsistOf(orEmptyS(want.Branches)))
			g.Expect(got.SHAs).To(ConsistOf(orEmptyS(want.SHAs)))
			g.Expect(got.Webhook).To(BeTrue(), "a verified delivery says the repository's webhooks flow")
		})
	}
}

func orEmpty(x []int) []any {
	out := []any{}
	for _, v := range x {
		out = append(out, v)
	}
	return out
}

func orEmptyS(x []string) []any {
	out := []any{}
	for _, v := range x {
		out = append(out, v)
	}
	return out
}

func TestBadAndMissingSignatures(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t)
	body := fakegithub.Fixture("webhooks/pull_request.opened.json")
	for name, sig := range map[string]string{
		"missing":      "",
		"wrong secret": Sign([]byte("guess"), body),
		"sha1 only":    "sha1=0123",
		"not hex":      "sha256=zz",
		"truncated":    Sign(secret, body)[:20],
	} {
		rec := deliver(h, "pull_request", "d-"+name, body, sig)
		g.Expect(rec.Code).To(Equal(http.StatusUnauthorized), name)
	}
	// A body changed after signing fails.
	tampered := bytes.Replace(body, []byte(`"number": 1347`), []byte(`"number": 1`), 1)
	g.Expect(deliver(h, "pull_request", "d-tampered", tampered, Sign(secret, body)).Code).To(Equal(http.StatusUnauthorized))
	// A signed body naming another repository (an organisation's hook) routes nothing.
	other := bytes.ReplaceAll(body, []byte("octocat/Hello-World"), []byte("evil/repo"))
	g.Expect(deliver(h, "pull_request", "d-other", other, Sign(secret, other)).Code).To(Equal(http.StatusAccepted))
	g.Expect(deliver(h, "pull_request", "d-notjson", []byte("nope"), Sign(secret, []byte("nope"))).Code).To(Equal(http.StatusBadRequest))
	g.Expect(s.hints).To(BeEmpty())
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("pull_request", "bad_signature"))).To(Equal(6.0))
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("pull_request", "other_repository"))).To(Equal(1.0))

	req := httptest.NewRequest(http.MethodGet, ProjectPath(project), nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusMethodNotAllowed))
}

func TestReplayedDeliveryIsDropped(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t, func(o *Options) { o.DedupSize = 2 })
	body := fakegithub.Fixture("webhooks/check_suite.completed.json")
	sig := Sign(secret, body)
	g.Expect(deliver(h, "check_suite", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body, sig).Code).To(Equal(http.StatusAccepted))
	rec := deliver(h, "check_suite", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body, sig)
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Body.String()).To(ContainSubstring("duplicate"))
	g.Expect(s.hints).To(HaveLen(1))
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("check_suite", "duplicate"))).To(Equal(1.0))
	// The memory is bounded: old ids are forgotten.
	g.Expect(deliver(h, "check_suite", "b", body, sig).Code).To(Equal(http.StatusAccepted))
	g.Expect(deliver(h, "check_suite", "c", body, sig).Code).To(Equal(http.StatusAccepted))
	g.Expect(deliver(h, "check_suite", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body, sig).Code).To(Equal(http.StatusAccepted))
	// A forged delivery does not enter the memory, so it cannot mask a real one.
	g.Expect(deliver(h, "check_suite", "d", body, Sign([]byte("x"), body)).Code).To(Equal(http.StatusUnauthorized))
	g.Expect(deliver(h, "check_suite", "d", body, sig).Code).To(Equal(http.StatusAccepted))
}

func TestOversizeBody(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t, func(o *Options) { o.MaxBody = 1024 })
	body := []byte(`{"repository":{"full_name":"octocat/Hello-World"},"pad":"` + strings.Repeat("x", 2000) + `"}`)
	rec := deliver(h, "push", "big", body, Sign(secret, body))
	g.Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(s.hints).To(BeEmpty())
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("push", "too_large"))).To(Equal(1.0))
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("push", "accepted"))).To(Equal(0.0))
	// A body of exactly the limit is read and routed.
	fits := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octocat/Hello-World"},"pad":"`)
	fits = append(fits, strings.Repeat("x", 1024-len(fits)-2)...)
	fits = append(fits, `"}`...)
	g.Expect(fits).To(HaveLen(1024))
	g.Expect(deliver(h, "push", "fits", fits, Sign(secret, fits)).Code).To(Equal(http.StatusAccepted))
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("push", "too_large"))).To(Equal(1.0))
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("push", "accepted"))).To(Equal(1.0))
}

func TestUnknownEventIsAcknowledgedAndIgnored(t *testing.T) {
	g := NewWithT(t)
	h, s, m := newHandler(t)
	body := []byte(`{"action":"created","repository":{"full_name":"octocat/Hello-World"}}`)
	rec := deliver(h, "star", "s1", body, Sign(secret, body))
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(s.hints).To(BeEmpty())
	g.Expect(testutil.ToFloat64(m.WebhookDeliveries.WithLabelValues("other", "ignored"))).To(Equal(1.0))
	// A supported event whose signed body is malformed is a 400.
	bad := []byte(`{"repository":{"full_name":"octocat/Hello-World"},"number":"x"}`)
	g.Expect(deliver(h, "pull_request", "s2", bad, Sign(secret, bad)).Code).To(Equal(http.StatusBadRequest))
}

func TestRoutingAndFacts(t *testing.T) {
	g := NewWithT(t)
	// A verified delivery's routing and the facts it states, in the adapters' vocabulary.
	body := []byte(`{"action":"closed","number":5,"pull_request":{"number":5,"merged":true,"state":"closed","merge_commit_sha":"` +
		strings.Repeat("c", 40) + `","head":{"ref":"b","sha":"` + strings.Repeat("a", 40) + `"},"base":{"ref":"main"}},"repository":{"full_name":"o/r"}}`)
	hint, err := Parse("pull_request", body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hint).To(Equal(scm.Hint{Repo: scm.Repo{Owner: "o", Name: "r"}, Event: "pull_request", Numbers: []int{5},
		Branches: []string{"b"}, SHAs: []string{strings.Repeat("a", 40)},
		Facts: []scm.Fact{{Number: 5, PullRequest: &scm.PullRequestFact{State: scm.StateMerged, HeadSHA: strings.Repeat("a", 40),
			BaseRef: "main", MergeCommitSHA: strings.Repeat("c", 40)}}}}))
	// An issue comment on a plain issue names nothing.
	hint, err = Parse("issue_comment", []byte(`{"issue":{"number":3},"repository":{"full_name":"o/r"}}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hint.IsZero()).To(BeTrue())
	_, err = Parse("pull_request", []byte(`{"repository":{"full_name":"no-slash"}}`))
	g.Expect(err).To(HaveOccurred())
}

func TestFacts(t *testing.T) {
	sha, other := strings.Repeat("a", 40), strings.Repeat("b", 40)
	repo := `"repository":{"full_name":"o/r"}`
	for _, tc := range []struct {
		name, event, body string
		want              []scm.Fact
	}{
		{name: "a push to a pull request's head", event: "pull_request",
			body: `{"action":"synchronize","number":7,"pull_request":{"number":7,"state":"open","title":"T","head":{"ref":"b","sha":"` + sha + `"},"base":{"ref":"main"}},` + repo + `}`,
			want: []scm.Fact{{Number: 7, PullRequest: &scm.PullRequestFact{State: scm.StateOpen, Title: "T", HeadSHA: sha, BaseRef: "main"}}}},
		{name: "Gitea's synchronized, a draft", event: "pull_request",
			body: `{"action":"synchronized","number":7,"pull_request":{"number":7,"state":"open","draft":true,"head":{"ref":"b","sha":"` + sha + `"}},` + repo + `}`,
			want: []scm.Fact{{Number: 7, PullRequest: &scm.PullRequestFact{State: scm.StateOpen, Draft: true, HeadSHA: sha}}}},
		{name: "a label states nothing the facts cover", event: "pull_request",
			body: `{"action":"labeled","number":7,"pull_request":{"number":7,"state":"open","head":{"ref":"b","sha":"` + sha + `"}},` + repo + `}`},
		{name: "an unknown state", event: "pull_request",
			body: `{"action":"closed","number":7,"pull_request":{"number":7,"state":"weird","head":{"ref":"b","sha":"` + sha + `"}},` + repo + `}`},
		{name: "a push", event: "push", body: `{"ref":"refs/heads/b","after":"` + sha + `",` + repo + `}`,
			want: []scm.Fact{{Branch: "b", SHA: sha}}},
		{name: "a deleted branch", event: "push", body: `{"ref":"refs/heads/b","deleted":true,"after":"` + strings.Repeat("0", 40) + `",` + repo + `}`},
		{name: "a tag", event: "push", body: `{"ref":"refs/tags/v1","after":"` + sha + `",` + repo + `}`},
		{name: "a check run passes", event: "check_run",
			body: `{"action":"completed","check_run":{"name":"build","status":"completed","conclusion":"success","details_url":"https://ci/1","head_sha":"` + sha + `","check_suite":{"app":{"slug":"github-actions"}}},` + repo + `}`,
			want: []scm.Fact{{SHA: sha, Check: &scm.Check{Name: "build", URL: "https://ci/1", App: "github-actions", Outcome: scm.CheckPassed, Conclusion: "success"}}}},
		{name: "a check run times out", event: "check_run",
			body: `{"action":"completed","check_run":{"name":"build","status":"completed","conclusion":"timed_out","head_sha":"` + sha + `"},` + repo + `}`,
			want: []scm.Fact{{SHA: sha, Check: &scm.Check{Name: "build", Outcome: scm.CheckFailed, Conclusion: "timed_out"}}}},
		{name: "a check run starts", event: "check_run",
			body: `{"action":"created","check_run":{"name":"build","status":"in_progress","head_sha":"` + sha + `"},` + repo + `}`,
			want: []scm.Fact{{SHA: sha, Check: &scm.Check{Name: "build", Outcome: scm.CheckPending, Conclusion: "in_progress"}}}},
		{name: "a check run on no valid commit", event: "check_run",
			body: `{"action":"completed","check_run":{"name":"build","status":"completed","conclusion":"success","head_sha":"nope"},` + repo + `}`},
		{name: "a check suite states nothing its runs do not", event: "check_suite",
			body: `{"action":"completed","check_suite":{"head_sha":"` + sha + `","status":"completed","conclusion":"success"},` + repo + `}`,
			want: []scm.Fact{{SHA: sha, Suite: true}}},
		{name: "a commit status", event: "status", body: `{"sha":"` + other + `","context":"ci/test","state":"success","target_url":"https://ci/2",` + repo + `}`,
			want: []scm.Fact{{SHA: other, Check: &scm.Check{Name: "ci/test", URL: "https://ci/2", Outcome: scm.CheckPassed, Conclusion: "success"}}}},
		{name: "Gitea's warning fails", event: "status", body: `{"sha":"` + other + `","context":"ci/test","state":"warning",` + repo + `}`,
			want: []scm.Fact{{SHA: other, Check: &scm.Check{Name: "ci/test", Outcome: scm.CheckFailed, Conclusion: "warning"}}}},
		{name: "a status state nobody defined", event: "status", body: `{"sha":"` + other + `","context":"ci/test","state":"odd",` + repo + `}`},
		{name: "a review states no fact: the decision and its comments come with the re-read", event: "pull_request_review",
			body: `{"action":"submitted","review":{"id":9,"node_id":"PRR_9","state":"approved","user":{"login":"rev"}},"pull_request":{"number":7},` + repo + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			hint, err := Parse(tc.event, []byte(tc.body))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(hint.Facts).To(Equal(tc.want))
		})
	}
}

// FuzzParse: any payload parses without panicking, and a hint stays bounded.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"pull_request.opened", "check_run.completed", "check_suite.completed", "status", "push", "push.created",
		"issue_comment.created", "pull_request_review_thread.resolved", "pull_request_review.submitted", "pull_request_review_comment.created"} {
		f.Add(strings.SplitN(name, ".", 2)[0], fakegithub.Fixture("webhooks/"+name+".json"))
	}
	for _, name := range []string{"pull_request_sync", "pull_request_review_approved", "pull_request_review_rejected",
		"pull_request_review_comment", "pull_request_comment", "status", "push", "delete"} {
		event, body := giteaFixture(f, name)
		f.Add(event, body)
	}
	f.Add("push", []byte(`{"ref":"refs/heads/`+strings.Repeat("x", 300)+`","repository":{"full_name":"a/b"}}`))
	f.Add("issues", []byte(`{"action":"closed","number":3,"issue":{"number":3},"repository":{"full_name":"a/b"}}`))
	f.Add("check_run", []byte(`{"check_run":{"pull_requests":[`+strings.Repeat(`{"number":1},`, 50)+`{"number":2}]},"repository":{"full_name":"a/b"}}`))
	events := []string{"pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread", "check_run",
		"check_suite", "status", "issue_comment", "push", "ping", "pull_request_approved", "pull_request_rejected", "pull_request_comment", "delete", "issues"}
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		if !Supported(event) {
			event = events[len(body)%len(events)]
		}
		hint, err := Parse(event, body)
		if err != nil {
			return
		}
		if len(hint.ClosedIssues) > 1 || len(hint.ClosedIssues) == 1 && (event != "issues" || hint.ClosedIssues[0] <= 0) {
			t.Fatalf("closed issues %v from a %s delivery", hint.ClosedIssues, event)
		}
		if len(hint.Numbers) > maxRefs || len(hint.Branches) > maxRefs || len(hint.SHAs) > maxRefs {
			t.Fatalf("unbounded hint: %d numbers, %d branches, %d SHAs", len(hint.Numbers), len(hint.Branches), len(hint.SHAs))
		}
		for _, b := range hint.Branches {
			if b == "" || len(b) > 255 {
				t.Fatalf("branch %q out of bounds", b)
			}
		}
		for _, n := range hint.Numbers {
			if n <= 0 {
				t.Fatalf("non-positive number %d", n)
			}
		}
		// An organisation's or an App's ping names no repository, and nothing else.
		if (hint.Repo.Owner == "" || hint.Repo.Name == "") && (event != "ping" || !hint.IsZero() || len(hint.Facts) > 0) {
			t.Fatalf("hint without repository: %+v", hint)
		}
		if len(hint.Facts) > 1 {
			t.Fatalf("a delivery states one fact at most: %+v", hint.Facts)
		}
		for _, f := range hint.Facts {
			if f.SHA != "" && validSHA(f.SHA) == "" {
				t.Fatalf("fact on an invalid commit %q", f.SHA)
			}
			if f.Check != nil && (f.Check.Name == "" || len(f.Check.Name) > 256 || len(f.Check.URL) > 2048) {
				t.Fatalf("check out of bounds: %+v", *f.Check)
			}
			if pr := f.PullRequest; pr != nil && (validSHA(pr.HeadSHA) == "" || len(pr.Title) > 256 || len(pr.BaseRef) > 255) {
				t.Fatalf("pull request fact out of bounds: %+v", *pr)
			}
		}
	})
}

// FuzzHandler: the receiver end to end, signature and parse. Any delivery is answered with one
// of the receiver's statuses, and only a correctly signed one reaches OnHint.
func FuzzHandler(f *testing.F) {
	for _, name := range []string{"pull_request.opened", "check_run.completed", "push", "ping", "issue_comment.created"} {
		f.Add(strings.SplitN(name, ".", 2)[0], fakegithub.Fixture("webhooks/"+name+".json"), true, "application/json")
	}
	event, body := giteaFixture(f, "pull_request_review_approved")
	f.Add(event, body, true, "application/json; charset=utf-8")
	f.Add("push", []byte(`{"repository":{"full_name":"OctoCat/hello-world"},"ref":"refs/heads/x"}`), true, "application/json")
	f.Add("pull_request", []byte(`payload=%7B%7D`), false, "application/x-www-form-urlencoded")
	f.Add("installation", []byte(`{}`), false, "")
	allowed := map[int]bool{http.StatusOK: true, http.StatusAccepted: true, http.StatusBadRequest: true, http.StatusUnauthorized: true,
		http.StatusUnsupportedMediaType: true, http.StatusRequestEntityTooLarge: true}
	f.Fuzz(func(t *testing.T, event string, body []byte, signed bool, contentType string) {
		var hints []scm.Hint
		h, err := NewHandler(Options{
			Lookup: func(context.Context, types.NamespacedName) (Target, error) {
				return Target{Repo: scm.Repo{Owner: "octocat", Name: "Hello-World"}, Secret: secret}, nil
			},
			OnHint:  func(hint scm.Hint) { hints = append(hints, hint) },
			MaxBody: 64 << 10,
		})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, ProjectPath(project), bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-GitHub-Event", event)
		sig := Sign([]byte("wrong"), body)
		if signed {
			sig = Sign(secret, body)
		}
		req.Header.Set("X-Hub-Signature-256", sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		if len(hints) > 0 && !signed {
			t.Fatalf("an unsigned delivery was routed: %+v", hints)
		}
		for _, hint := range hints {
			if hint.Repo != (scm.Repo{Owner: "octocat", Name: "Hello-World"}) || hint.Namespace != project.Namespace || !hint.Webhook {
				t.Fatalf("hint routed outside its Project: %+v", hint)
			}
		}
	})
}

// A GitHub issue closed names its number for the issue watch; an issue opened, or a pull
// request's issue closed, names none; none of them gives the Poller anything to read.
func TestClosedIssueHints(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []int
	}{
		{"closed", `{"action":"closed","issue":{"number":7,"state":"closed"},"repository":{"full_name":"octocat/Hello-World"}}`, []int{7}},
		{"opened", `{"action":"opened","issue":{"number":7,"state":"open"},"repository":{"full_name":"octocat/Hello-World"}}`, nil},
		{"a pull request's issue", `{"action":"closed","issue":{"number":8,"pull_request":{"url":"x"}},"repository":{"full_name":"octocat/Hello-World"}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h, err := Parse("issues", []byte(tc.body))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.ClosedIssues).To(Equal(tc.want))
			g.Expect(h.IsZero()).To(BeTrue(), "nothing for the Poller")
			g.Expect(h.Facts).To(BeEmpty())
		})
	}
}
