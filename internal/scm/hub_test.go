package scm_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

func TestHubSharesConnectionsAndRoutesHints(t *testing.T) {
	g := NewWithT(t)
	fake, err := fakegithub.New(fakegithub.Options{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.Start("127.0.0.1:0")).To(Succeed())
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddToken("tok", "bot")
	fake.AddToken("tok2", "bot")
	_, err = fake.CreateRepo("acme/widgets", "main", nil)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = fake.Push("acme/widgets", "feature", map[string]string{"f": "x"}, "f")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := fake.OpenPullRequest("acme/widgets", "bot", "feature", "main", "F", "", false)
	g.Expect(err).NotTo(HaveOccurred())

	changed := make(chan types.NamespacedName, 16)
	hub := scm.NewHub(scm.HubOptions{Poller: scm.PollerOptions{MaxAge: time.Hour, HintDelay: time.Millisecond, HintInterval: time.Millisecond,
		OnChange: func(k types.NamespacedName) { changed <- k }}})
	cfg := scm.Config{Provider: "github", APIURL: fake.URL(), Token: []byte("tok")}
	a, err := hub.Connect(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := hub.Connect(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(BeIdenticalTo(a), "one connection per forge and credentials")
	other, err := hub.Connect(scm.Config{Provider: "github", APIURL: fake.URL(), Token: []byte("tok2")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other).NotTo(BeIdenticalTo(a))
	_, err = hub.Connect(scm.Config{Provider: "gitlab"})
	g.Expect(err).To(MatchError(scm.ErrUnsupported))

	k := types.NamespacedName{Namespace: "team", Name: "s1"}
	hub.Watch(k, a, scm.Watch{Repo: scm.Repo{Owner: "acme", Name: "widgets"}, Number: n})
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hub.Start(cctx) }()
	g.Expect(<-changed).To(Equal(k))
	obs, ok := hub.Get(k)
	g.Expect(ok).To(BeTrue())
	g.Expect(obs.PullRequest.Number).To(Equal(n))

	// A webhook hint reaches the poller that watches the repository.
	_, err = fake.AddReview("acme/widgets", n, "alice", "APPROVED", "ok")
	g.Expect(err).NotTo(HaveOccurred())
	hub.Notify(scm.Hint{Repo: scm.Repo{Owner: "acme", Name: "widgets"}, Event: "pull_request_review", Numbers: []int{n}})
	g.Expect(<-changed).To(Equal(k))
	obs, _ = hub.Get(k)
	g.Expect(obs.PullRequest.ReviewDecision).To(Equal(scm.ReviewApproved))

	// Moving the session to other credentials leaves the first connection, which goes away.
	hub.Watch(k, other, scm.Watch{Repo: scm.Repo{Owner: "acme", Name: "widgets"}, Number: n})
	again, err := hub.Connect(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).NotTo(BeIdenticalTo(a))
	hub.Forget(k)
	_, ok = hub.Get(k)
	g.Expect(ok).To(BeFalse())
	cancel()
	g.Expect(<-done).To(Succeed())
	g.Expect(hub.NeedLeaderElection()).To(BeTrue())
}
