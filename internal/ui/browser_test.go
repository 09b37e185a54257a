package ui_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// artifactDir is where the browser's screenshots go: $SHEPHERD_ARTIFACTS (CI keeps it), else a
// directory of the test's.
func artifactDir() string {
	if d := os.Getenv("SHEPHERD_ARTIFACTS"); d != "" {
		Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		return d
	}
	return GinkgoT().TempDir()
}

// The dashboard in a real headless Chromium (Debian's package, `make test` installs it through
// hack/chromium.sh), through `kubectl shepherd dashboard`'s proxy with alice's credentials, the
// API server's aggregation layer and the UI server: what a person sees and clicks.
var _ = Describe("The dashboard in a real browser", func() {
	It("shows a session moving across the board, streams its transcript, and steers it from the page", func() {
		chromium := os.Getenv("SHEPHERD_CHROMIUM")
		Expect(chromium).NotTo(BeEmpty(), "set SHEPHERD_CHROMIUM to Chromium's path (make test does, from hack/chromium.sh)")
		ctx := context.Background()

		By("a session of alice's namespace, Working, with a transcript so far")
		sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "greet-9", Namespace: "team-a"},
			Spec: agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: "widgets"}, Issue: "9"}}
		Expect(adm.Create(ctx, sess)).To(Succeed())
		setStatus := func(phase agentsv1alpha1.SessionPhase, pr *agentsv1alpha1.PullRequestStatus) {
			Eventually(func() error {
				if err := adm.Get(ctx, client.ObjectKeyFromObject(sess), sess); err != nil {
					return err
				}
				sess.Status.Phase, sess.Status.PullRequest = phase, pr
				sess.Status.Agent = agentsv1alpha1.AgentStatus{Type: agentsv1alpha1.AgentClaudeCode}
				sess.Status.Usage = &agentsv1alpha1.UsageStatus{CostUSD: "0.031200", InputTokens: 4100, OutputTokens: 900, Turns: 1}
				return adm.Status().Update(ctx, sess)
			}).Should(Succeed())
		}
		setStatus(agentsv1alpha1.PhaseWorking, nil)
		key := client.ObjectKeyFromObject(sess)
		t0 := time.Now().UTC()
		store.Append(key, sess.UID, []transcript.Entry{
			{Seq: 1, Time: t0, Turn: 1, Kind: transcript.KindTurnStarted, Text: "Greet the world (issue #9)"},
			{Seq: 2, Time: t0, Turn: 1, Kind: transcript.KindText, Text: "I'll add a greeting to the README."},
			{Seq: 3, Time: t0, Turn: 1, Kind: transcript.KindToolCall, Tool: "Write", Text: `{"file_path":"README.md"}`},
			{Seq: 4, Time: t0, Turn: 1, Kind: transcript.KindToolResult, Tool: "Write", Text: "File written"},
		})

		By("kubectl shepherd dashboard's proxy for alice, and a headless Chromium")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		p := &kubectlplugin.DashboardProxy{Config: users["alice"], Addr: l.Addr().String()}
		h, err := p.Handler()
		Expect(err).NotTo(HaveOccurred())
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		DeferCleanup(srv.Close)
		base := "http://" + l.Addr().String()

		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1400, 900))...)
		DeferCleanup(cancelAlloc)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		DeferCleanup(cancelBrowser)
		// The first run starts the browser, on a context without a deadline.
		Expect(chromedp.Do(bctx, chromedp.Navigate("about:blank"))).To(Succeed())
		run := func(timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
			GinkgoHelper()
			c, cancel := context.WithTimeout(bctx, timeout)
			defer cancel()
			Expect(chromedp.Do(c, actions...)).To(Succeed())
		}
		get := func(a chromedp.Action[string]) string {
			GinkgoHelper()
			c, cancel := context.WithTimeout(bctx, 20*time.Second)
			defer cancel()
			v, err := chromedp.Run(c, a)
			Expect(err).NotTo(HaveOccurred())
			return v
		}
		shots := artifactDir()
		shot := func(name string) {
			GinkgoHelper()
			c, cancel := context.WithTimeout(bctx, 20*time.Second)
			defer cancel()
			png, err := chromedp.Run(c, chromedp.FullScreenshot(100)) // quality 100 is a PNG
			Expect(err).NotTo(HaveOccurred())
			Expect(os.WriteFile(filepath.Join(shots, name), png, 0o644)).To(Succeed())
			AddReportEntry("screenshot", filepath.Join(shots, name))
		}

		By("the board: the session's card moves from Working to Pull request to Ready to merge (the page refreshes itself)")
		card := `article[data-session="team-a/greet-9"]`
		phaseOf := func(want string) {
			GinkgoHelper()
			run(30*time.Second, chromedp.WaitVisible(chromedp.CSS(card+`[data-phase="`+want+`"]`)))
		}
		run(30*time.Second, chromedp.Navigate(base+"/"))
		phaseOf("Working")
		column := chromedp.Text(chromedp.Search(`//article[@data-session="team-a/greet-9"]/ancestor::section/h2`))
		Expect(strings.ToLower(get(column))).To(HavePrefix("working"))
		pr := &agentsv1alpha1.PullRequestStatus{Number: 3, URL: "https://github.com/acme/widgets/pull/3", State: agentsv1alpha1.PullRequestOpen,
			HeadSHA: "89abcdef0123456789abcdef0123456789abcdef", Checks: agentsv1alpha1.ChecksPassing}
		setStatus(agentsv1alpha1.PhasePROpen, pr)
		phaseOf("PROpen")
		setStatus(agentsv1alpha1.PhaseMergeable, pr)
		phaseOf("Mergeable")
		Expect(strings.ToLower(get(column))).To(HavePrefix("ready to merge"))
		Expect(get(chromedp.OuterHTML(chromedp.CSS("body")))).NotTo(ContainSubstring("gadgets-7"), "bob's namespace is not on alice's board")
		shot("dashboard-board.png")

		By("the session page: the transcript so far, then the agent's next entries as they stream in")
		// The card's link (the board refreshes itself, so the test follows the link's address).
		c, cancel := context.WithTimeout(bctx, 20*time.Second)
		attr, err := chromedp.Run(c, chromedp.AttributeValue(chromedp.CSS(card+` a.name`), "href"))
		cancel()
		Expect(err).NotTo(HaveOccurred())
		href := attr.Value
		Expect(href).To(Equal(ui.SessionLink("", "team-a", "greet-9")), "%q", href)
		run(30*time.Second, chromedp.Navigate(base+href), chromedp.WaitVisible(chromedp.CSS(`#transcript li[data-seq="4"]`)))
		store.Append(key, sess.UID, []transcript.Entry{
			{Seq: 5, Time: time.Now().UTC(), Turn: 1, Kind: transcript.KindText, Text: "Committed the greeting; opening the pull request."},
			{Seq: 6, Time: time.Now().UTC(), Turn: 1, Kind: transcript.KindTurnEnded, Text: "Added a greeting."},
		})
		run(20*time.Second, chromedp.WaitVisible(chromedp.CSS(`#transcript li[data-seq="6"]`)))
		Expect(get(chromedp.Text(chromedp.CSS(`#transcript li[data-seq="5"]`)))).To(ContainSubstring("Committed the greeting"))

		By("a message typed into the page reaches the session once, from alice")
		msg := "Please also greet the moon."
		run(30*time.Second, chromedp.SendKeys(chromedp.CSS("#message"), msg), chromedp.Click(chromedp.CSS("#send")),
			chromedp.WaitVisible(chromedp.CSS("#done")))
		Expect(get(chromedp.Text(chromedp.CSS("#done")))).To(ContainSubstring("queued"))
		Expect(adm.Get(ctx, key, sess)).To(Succeed())
		Expect(sess.Spec.Messages).To(HaveLen(1))
		Expect(sess.Spec.Messages[0].Text).To(Equal(msg))
		Expect(sess.Spec.Messages[0].From).To(Equal("alice"))
		// The result page goes back to the session's page by itself. The runner would now run the
		// message as the next turn (internal/runner's TestTurnsPushAndPullRequest shows that
		// turn's TurnStarted carries the message); here the test streams that entry.
		run(20*time.Second, chromedp.WaitVisible(chromedp.CSS("#transcript")))
		store.Append(key, sess.UID, []transcript.Entry{{Seq: 7, Time: time.Now().UTC(), Turn: 2, Kind: transcript.KindTurnStarted, Text: msg}})
		run(20*time.Second, chromedp.WaitVisible(chromedp.CSS(`#transcript li[data-seq="7"]`)))
		Expect(get(chromedp.Text(chromedp.CSS(`#transcript li[data-seq="7"]`)))).To(ContainSubstring(msg))
		shot("dashboard-session.png")

		By("approve and stop work from the page")
		run(30*time.Second, chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#done")))
		Expect(adm.Get(ctx, key, sess)).To(Succeed())
		Expect(sess.Annotations).To(HaveKeyWithValue(agentsv1alpha1.ApprovedHeadAnnotation, pr.HeadSHA))
		run(30*time.Second, chromedp.WaitVisible(chromedp.CSS("#stop")), chromedp.Click(chromedp.CSS("#stop")), chromedp.WaitVisible(chromedp.CSS("#done")))
		Expect(adm.Get(ctx, key, sess)).To(Succeed())
		Expect(sess.Spec.State).To(Equal(agentsv1alpha1.SessionStopped))
		run(30*time.Second, chromedp.WaitVisible(chromedp.CSS("#restore")))
		Expect(adm.Get(ctx, key, sess)).To(Succeed())
		Expect(sess.Spec.Messages).To(HaveLen(1), "nothing was sent twice")
		if d := os.Getenv("SHEPHERD_DOCS_IMAGES"); d != "" {
			for _, f := range []string{"dashboard-board.png", "dashboard-session.png"} {
				b, err := os.ReadFile(filepath.Join(shots, f))
				Expect(err).NotTo(HaveOccurred())
				Expect(os.WriteFile(filepath.Join(d, f), b, 0o644)).To(Succeed())
			}
		}
	})
})
