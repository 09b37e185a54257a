package scm_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/github"
	"github.com/shepherd-dev/shepherd/internal/scm/scmtest"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

// TestPollerAppliesWebhookFacts follows a pull request on the fake GitHub with its webhooks
// delivered in-process through the real receiver: what a delivery states is seen the moment it
// arrives, with no read; what it does not state is read as before.
func TestPollerAppliesWebhookFacts(t *testing.T) {
	g := NewWithT(t)
	clock := scmtest.NewClock()
	secret := []byte("s3cret")
	project := types.NamespacedName{Namespace: "team", Name: "widgets"}
	relay := &relayTo{}
	fake, err := fakegithub.New(fakegithub.Options{Dir: t.TempDir(), Clock: clock.Now, GraphQLLimit: 100000, WebhookHandler: relay, WebhookSecret: secret})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "bot")
	_, err = fake.CreateRepo("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.SetProtection("acme/widgets", fakegithub.Protection{RequiredChecks: []string{"build"}, RequiredApprovals: 1})).To(Succeed())
	p, err := github.New(scm.Config{APIURL: fake.URL(), Token: []byte("tok"), Clock: clock})
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	changes := 0
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, Clock: clock, HintDelay: 2 * time.Second, HintInterval: 15 * time.Second,
		OnChange: func(types.NamespacedName) { mu.Lock(); changes++; mu.Unlock() }})
	changed := func() int { mu.Lock(); defer mu.Unlock(); return changes }
	repo := scm.Repo{Owner: "acme", Name: "widgets"}
	relay.h, err = webhook.NewHandler(webhook.Options{
		Lookup: func(_ context.Context, key types.NamespacedName) (webhook.Target, error) {
			if key != project {
				return webhook.Target{}, webhook.ErrUnknownProject
			}
			return webhook.Target{Repo: repo, Secret: secret}, nil
		},
		OnHint: poller.Notify,
	})
	g.Expect(err).NotTo(HaveOccurred())
	relay.path = webhook.ProjectPath(project)

	head, err := fake.Push("acme/widgets", "feature", map[string]string{"a.txt": "a"}, "a")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := fake.OpenPullRequest("acme/widgets", "bot", "feature", "main", "Work", "", false)
	g.Expect(err).NotTo(HaveOccurred())
	run, err := fake.AddCheckRun("acme/widgets", head, fakegithub.CheckRun{Name: "build", Status: "in_progress"})
	g.Expect(err).NotTo(HaveOccurred())
	k := types.NamespacedName{Namespace: "team", Name: "s"}
	poller.Register(k, scm.Watch{Repo: repo, Number: n, Head: scm.Head{Branch: "feature"}})
	_, err = poller.Poll(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ := poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPending))
	reads := fake.Stats().GraphQLQueries

	// The build passes: seen as the delivery arrives, before any read.
	clock.Advance(time.Second)
	g.Expect(fake.UpdateCheckRun("acme/widgets", run, "completed", "success")).To(Succeed())
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPassing))
	g.Expect(fake.Stats().GraphQLQueries).To(Equal(reads), "no read")
	g.Expect(changed()).To(Equal(2))

	// A push: the new head and its required check pending, at once.
	clock.Advance(time.Second)
	next, err := fake.Push("acme/widgets", "feature", map[string]string{"b.txt": "b"}, "b")
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.HeadSHA).To(Equal(next))
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPending))
	g.Expect(obs.PullRequest.Checks.RequiredPending).To(Equal(1))
	g.Expect(fake.Stats().GraphQLQueries).To(Equal(reads), "no read")

	// Its build fails: the failure waits for the read that brings its log.
	run2, err := fake.AddCheckRun("acme/widgets", next, fakegithub.CheckRun{Name: "build", Status: "in_progress",
		Log: "##[group]Run make test\n--- FAIL: TestThing\n##[error]Process completed with exit code 2.\n"})
	g.Expect(err).NotTo(HaveOccurred())
	clock.Advance(time.Second)
	g.Expect(fake.UpdateCheckRun("acme/widgets", run2, "completed", "failure")).To(Succeed())
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPending), "not applied without its log")
	clock.Advance(2 * time.Second)
	_, err = poller.Poll(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksFailing))
	g.Expect(obs.PullRequest.Checks.FailedChecks).To(HaveLen(1))
	g.Expect(obs.PullRequest.Checks.FailedChecks[0].LogExcerpt).To(ContainSubstring("FAIL: TestThing"))
	g.Expect(fake.Stats().GraphQLQueries).To(BeNumerically(">", reads), "read within HintDelay")

	// A human merges: merged at once.
	reads = fake.Stats().GraphQLQueries
	clock.Advance(time.Second)
	_, err = fake.Merge("acme/widgets", n, "squash")
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.State).To(Equal(scm.StateMerged))
	g.Expect(obs.PullRequest.MergeCommitSHA).NotTo(BeEmpty())
	g.Expect(fake.Stats().GraphQLQueries).To(Equal(reads), "no read")
}

// relayTo hands the fake's in-process deliveries to the receiver at the Project's path.
type relayTo struct {
	h    http.Handler
	path string
}

func (r *relayTo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.h == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	req.URL.Path = r.path
	r.h.ServeHTTP(w, req)
}
