package webhook

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// testdata/gitea holds deliveries a real Gitea 1.26 sent (recorded by
// internal/scm/gitea's TestGiteaDeliveriesAreVerifiedAndRouted with
// SHEPHERD_RECORD_GITEA_WEBHOOKS=<this directory>), named by X-Gitea-Event-Type.
const giteaRepo = "forge-admin/GiteaDeliveriesAreVerifiedAndRouted-1"

// giteaFixture returns the X-GitHub-Event of a recorded delivery and its body.
func giteaFixture(t testing.TB, name string) (string, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gitea", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Event   string          `json:"event"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Event, f.Payload
}

func giteaHandler(t *testing.T) (*Handler, *sink) {
	t.Helper()
	s := &sink{}
	h, err := NewHandler(Options{
		Lookup: func(_ context.Context, key types.NamespacedName) (Target, error) {
			if key != project {
				return Target{}, ErrUnknownProject
			}
			repo, err := scm.ParseRepo(giteaRepo)
			return Target{Repo: repo, Secret: secret}, err
		},
		OnHint: s.add,
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return h, s
}

func TestGiteaEventsRouteToTheSameHints(t *testing.T) {
	const (
		first  = "c1fff135900345fdf3d32aed52eaedc947b8bd26"
		second = "caad1b0fb75d22b53ad93ddf60104c75bf715c8d"
	)
	h, s := giteaHandler(t)
	for _, tc := range []struct {
		fixture, event string
		want           scm.Hint
		ignored        bool
	}{
		{fixture: "push", event: "push", want: scm.Hint{Branches: []string{"feature"}, SHAs: []string{first}}},
		{fixture: "pull_request", event: "pull_request", want: scm.Hint{Numbers: []int{1}, Branches: []string{"feature"}, SHAs: []string{first}}},
		// A push to the head: Gitea's action is "synchronized" (GitHub's "synchronize").
		{fixture: "pull_request_sync", event: "pull_request", want: scm.Hint{Numbers: []int{1}, Branches: []string{"feature"}, SHAs: []string{second}}},
		{fixture: "pull_request_review_approved", event: "pull_request_approved", want: scm.Hint{Numbers: []int{1}, Branches: []string{"feature"}, SHAs: []string{second}}},
		{fixture: "pull_request_review_rejected", event: "pull_request_rejected", want: scm.Hint{Numbers: []int{1}, Branches: []string{"feature"}, SHAs: []string{second}}},
		{fixture: "pull_request_review_comment", event: "pull_request_comment", want: scm.Hint{Numbers: []int{1}, Branches: []string{"feature"}, SHAs: []string{second}}},
		// A comment on the pull request's conversation arrives as issue_comment, as on GitHub.
		{fixture: "pull_request_comment", event: "issue_comment", want: scm.Hint{Numbers: []int{1}}},
		{fixture: "issue_comment", event: "issue_comment", want: scm.Hint{}},
		{fixture: "status", event: "status", want: scm.Hint{SHAs: []string{second}}},
		{fixture: "delete", event: "delete", want: scm.Hint{Branches: []string{"feature"}}},
		{fixture: "create", event: "create", ignored: true},
		// An issue opened is no news (accepted, nothing to read); one closed names its issue
		// (issues_closed.json is issues.json, recorded from Gitea, with the action and state
		// of a close).
		{fixture: "issues", event: "issues", want: scm.Hint{}},
		{fixture: "issues_closed", event: "issues", want: scm.Hint{ClosedIssues: []int{2}}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			g := NewWithT(t)
			event, body := giteaFixture(t, tc.fixture)
			g.Expect(event).To(Equal(tc.event))
			before := len(s.hints)
			rec := deliver(h, event, "gitea-"+tc.fixture, body, Sign(secret, body))
			if tc.ignored {
				g.Expect(rec.Code).To(Equal(http.StatusOK))
				g.Expect(s.hints).To(HaveLen(before))
				return
			}
			g.Expect(rec.Code).To(Equal(http.StatusAccepted), rec.Body.String())
			g.Expect(s.hints).To(HaveLen(before + 1))
			got := s.hints[len(s.hints)-1]
			g.Expect(got.Repo.String()).To(Equal(giteaRepo))
			g.Expect(got.Event).To(Equal(tc.event))
			g.Expect(got.Numbers).To(ConsistOf(orEmpty(tc.want.Numbers)))
			g.Expect(got.Branches).To(ConsistOf(orEmptyS(tc.want.Branches)))
			g.Expect(got.SHAs).To(ConsistOf(orEmptyS(tc.want.SHAs)))
			g.Expect(got.ClosedIssues).To(ConsistOf(orEmpty(tc.want.ClosedIssues)))
		})
	}
}

// TestGiteaOwnHeadersSuffice: a proxy that keeps only Gitea's headers (X-Gitea-Event,
// X-Gitea-Delivery and X-Gitea-Signature, the bare hex HMAC) still gets deliveries through, with
// the same verification.
func TestGiteaOwnHeadersSuffice(t *testing.T) {
	g := NewWithT(t)
	h, s := giteaHandler(t)
	event, body := giteaFixture(t, "pull_request_review_approved")
	send := func(id, sig string, b []byte) int {
		req := httptest.NewRequest(http.MethodPost, ProjectPath(project), bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gitea-Event", event)
		req.Header.Set("X-Gitea-Delivery", id)
		req.Header.Set("X-Gitea-Signature", sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	good := strings.TrimPrefix(Sign(secret, body), "sha256=")
	g.Expect(send("a", good, body)).To(Equal(http.StatusAccepted))
	g.Expect(s.hints).To(HaveLen(1))
	g.Expect(s.hints[0].Event).To(Equal("pull_request_approved"))
	g.Expect(send("a", good, body)).To(Equal(http.StatusOK), "the same delivery again is dropped")
	g.Expect(send("b", hex.EncodeToString([]byte("forged")), body)).To(Equal(http.StatusUnauthorized))
	tampered := bytes.Replace(body, []byte(`"reviewed"`), []byte(`"approved"`), 1)
	g.Expect(tampered).NotTo(Equal(body))
	g.Expect(send("c", good, tampered)).To(Equal(http.StatusUnauthorized))
	g.Expect(s.hints).To(HaveLen(1))
}
