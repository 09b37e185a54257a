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

// TestPollerObservedOwnPullRequest: the pull request the manager itself opens is what Get returns
// as soon as the forge answered the create, with no read; the read that follows brings what the
// answer does not carry. An update of an open pull request keeps what was read (its checks).
func TestPollerObservedOwnPullRequest(t *testing.T) {
	g := NewWithT(t)
	clock := scmtest.NewClock()
	fake, err := fakegithub.New(fakegithub.Options{Dir: t.TempDir(), Clock: clock.Now, GraphQLLimit: 100000})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "bot")
	_, err = fake.CreateRepo("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	p, err := github.New(scm.Config{APIURL: fake.URL(), Token: []byte("tok"), Clock: clock})
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	changes := 0
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, Clock: clock, HintDelay: 2 * time.Second,
		OnChange: func(types.NamespacedName) { mu.Lock(); changes++; mu.Unlock() }})
	changed := func() int { mu.Lock(); defer mu.Unlock(); return changes }
	repo := scm.Repo{Owner: "acme", Name: "widgets"}
	k := types.NamespacedName{Namespace: "team", Name: "s"}
	poller.Register(k, scm.Watch{Repo: repo, Head: scm.Head{Branch: "feature"}})
	_, err = poller.Poll(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	obs, ok := poller.Get(k)
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.PullRequest).To(BeNil(), "no pull request yet")

	head, err := fake.Push("acme/widgets", "feature", map[string]string{"a.txt": "a"}, "a")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = fake.AddCheckRun("acme/widgets", head, fakegithub.CheckRun{Name: "build", Conclusion: "success"})
	g.Expect(err).NotTo(HaveOccurred())
	created, err := p.CreatePullRequest(context.Background(), repo, scm.NewPullRequest{Head: scm.Head{Branch: "feature"}, Base: "main", Title: "Work"})
	g.Expect(err).NotTo(HaveOccurred())
	reads, before := fake.Stats().GraphQLQueries, changed()
	poller.Observed(k, created)
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest).NotTo(BeNil())
	g.Expect(obs.PullRequest.Number).To(Equal(created.Number))
	g.Expect(obs.PullRequest.HeadSHA).To(Equal(head))
	g.Expect(obs.PullRequest.URL).NotTo(BeEmpty())
	g.Expect(obs.PullRequest.MergeState).To(Equal(scm.MergeStateUnknown), "nothing is decided on a merge state not read")
	g.Expect(fake.Stats().GraphQLQueries).To(Equal(reads), "no read")
	g.Expect(changed()).To(Equal(before+1), "the session is told")

	// The read within HintDelay brings the checks.
	clock.Advance(2 * time.Second)
	_, err = poller.Poll(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	obs, _ = poller.Get(k)
	g.Expect(fake.Stats().GraphQLQueries).To(BeNumerically(">", reads), "a full read followed")
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPassing))

	// Retitled: the title at once, the checks kept.
	title := "Work, retitled"
	updated, err := p.UpdatePullRequest(context.Background(), repo, created.Number, scm.PullRequestUpdate{Title: &title})
	g.Expect(err).NotTo(HaveOccurred())
	poller.Observed(k, updated)
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.Title).To(Equal(title))
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPassing), "what the answer does not carry is kept")

	// A session the Poller does not follow is left alone.
	poller.Observed(types.NamespacedName{Namespace: "team", Name: "other"}, created)
	_, ok = poller.Get(types.NamespacedName{Namespace: "team", Name: "other"})
	g.Expect(ok).To(BeFalse())
}

// TestPollerReadsAChangedItemInFull: an item that facts changed since its last read is read in
// full the next time it is read (here at its deadline): its probe would only see a new
// fingerprint and cost a second query for the full read.
func TestPollerReadsAChangedItemInFull(t *testing.T) {
	g := NewWithT(t)
	clock := scmtest.NewClock()
	fake, err := fakegithub.New(fakegithub.Options{Dir: t.TempDir(), Clock: clock.Now, GraphQLLimit: 100000})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "bot")
	_, err = fake.CreateRepo("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	p, err := github.New(scm.Config{APIURL: fake.URL(), Token: []byte("tok"), Clock: clock})
	g.Expect(err).NotTo(HaveOccurred())
	// The fact's recheck (mergeability) comes after the deadline here, so that the deadline's read
	// is the item's next read.
	poller := scm.NewPoller(p, scm.PollerOptions{MaxAge: time.Minute, Clock: clock, DetailMaxAge: time.Hour, FactRecheck: 10 * time.Minute})
	repo := scm.Repo{Owner: "acme", Name: "widgets"}
	// A review is required: the passing build alone does not make it mergeable, so nothing is
	// read at once.
	g.Expect(fake.SetProtection("acme/widgets", fakegithub.Protection{RequiredChecks: []string{"build"}, RequiredApprovals: 1})).To(Succeed())
	head, err := fake.Push("acme/widgets", "feature", map[string]string{"a.txt": "a"}, "a")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := fake.OpenPullRequest("acme/widgets", "bot", "feature", "main", "Work", "", false)
	g.Expect(err).NotTo(HaveOccurred())
	run, err := fake.AddCheckRun("acme/widgets", head, fakegithub.CheckRun{Name: "build", Status: "in_progress"})
	g.Expect(err).NotTo(HaveOccurred())
	k := types.NamespacedName{Namespace: "team", Name: "s"}
	poller.Register(k, scm.Watch{Repo: repo, Number: n, Head: scm.Head{Branch: "feature"}})
	for range 3 { // the first read, and the mergeability the forge computes after it
		_, err = poller.Poll(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		clock.Advance(5 * time.Second)
	}

	// The build passes, and its delivery's fact is applied (no read).
	g.Expect(fake.UpdateCheckRun("acme/widgets", run, "completed", "success")).To(Succeed())
	poller.Notify(scm.Hint{Repo: repo, Event: "check_run", SHAs: []string{head},
		Facts: []scm.Fact{{SHA: head, Check: &scm.Check{Name: "build", Outcome: scm.CheckPassed, Conclusion: "success", App: "github-actions"}}}})
	obs, _ := poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPassing))
	reads := fake.Stats().GraphQLQueries

	// At the deadline: one query, a full read, not a probe and then a full read.
	clock.Advance(time.Minute)
	_, err = poller.Poll(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Stats().GraphQLQueries - reads).To(Equal(1))
	obs, _ = poller.Get(k)
	g.Expect(obs.PullRequest.Checks.State).To(Equal(scm.ChecksPassing))
}
