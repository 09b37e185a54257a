package e2e

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/ui"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

// steerFunc steers a real agent's session once its first turn is in (nil: not at all).
type steerFunc func(context.Context, *cluster, *agentProject, *agentsv1alpha1.AgentSession)

// noSteer is a typed nil for the table's entries that only run the first turn.
var noSteer steerFunc

// steerFromDashboard drives the session's page of the dashboard in Debian's headless Chromium
// through `kubectl shepherd dashboard`'s proxy with the cluster admin's credentials, on the real
// API server and its aggregation layer to the manager: the board shows the session, the page
// shows the real agent's first turn, and a message typed into the page runs as the agent's next
// turn, whose entries stream into the open page.
func steerFromDashboard(ctx context.Context, c *cluster, p *agentProject, s *agentsv1alpha1.AgentSession) {
	By("the dashboard in headless Chromium through kubectl shepherd dashboard's proxy: the board, the session's transcript, a message typed into the page")
	chromium := os.Getenv("SHEPHERD_CHROMIUM")
	Expect(chromium).NotTo(BeEmpty(), "set SHEPHERD_CHROMIUM to Chromium's path (make test-e2e does, from hack/chromium.sh)")
	const reply = "Checked again: README.md names the agent's user."
	p.model.Append(modelserver.Text(reply))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	proxy := &kubectlplugin.DashboardProxy{Config: c.cfg, Addr: l.Addr().String()}
	h, err := proxy.Handler()
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
	Expect(chromedp.Do(bctx, chromedp.Navigate("about:blank"))).To(Succeed()) // starts the browser, no deadline
	run := func(timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		GinkgoHelper()
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		Expect(chromedp.Do(c, actions...)).To(Succeed())
	}
	entry := func(text string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.Search(`//ol[@id="transcript"]/li[contains(., "` + text + `")]`))
	}

	run(time.Minute, chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`article[data-session="`+s.Namespace+"/"+s.Name+`"]`)))
	run(time.Minute, chromedp.Navigate(base+ui.SessionLink("", s.Namespace, s.Name)),
		entry("Noted the user in README.md"), entry(agentCommitMsg))

	const msg = "Please check README.md once more."
	run(time.Minute, chromedp.SendKeys(chromedp.CSS("#message"), msg), chromedp.Click(chromedp.CSS("#send")),
		chromedp.WaitVisible(chromedp.CSS("#done")))
	key := client.ObjectKeyFromObject(s)
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Spec.Messages).To(HaveLen(1))
	Expect(s.Spec.Messages[0].Text).To(Equal(msg))
	Expect(s.Spec.Messages[0].From).NotTo(BeEmpty(), "the API server's name for the admin")

	By("the agent runs the message as its next turn; its entries stream into the page (the result page goes back to it)")
	run(5*time.Minute, chromedp.WaitVisible(chromedp.CSS("#transcript")), entry(msg), entry(reply))
	turns := p.model.Turns()
	Expect(turns).To(HaveLen(3), "the message was one more model turn")
	Expect(strings.Join(turns[2].UserTexts(), "\n")).To(ContainSubstring(msg))
	Expect(p.model.Problems()).To(BeEmpty())
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Spec.Messages).To(HaveLen(1), "sent once")
	shot := func(name string) {
		GinkgoHelper()
		tc, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		png, err := chromedp.Run(tc, chromedp.FullScreenshot(100)) // quality 100 is a PNG
		Expect(err).NotTo(HaveOccurred())
		file := filepath.Join(artifactDir(), name)
		Expect(os.WriteFile(file, png, 0o644)).To(Succeed())
		AddReportEntry("screenshot", file)
	}
	shot("e2e-dashboard-session.png")

	By("stop from the page: the board shows the session Stopped; restore from the page brings it back")
	page := base + ui.SessionLink("", s.Namespace, s.Name)
	card := `article[data-session="` + s.Namespace + "/" + s.Name + `"]`
	run(time.Minute, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#stop")), chromedp.Click(chromedp.CSS("#stop")),
		chromedp.WaitVisible(chromedp.CSS("#done")))
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionStopped))
	run(2*time.Minute, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(card+`[data-phase="Stopped"]`)))
	shot("e2e-dashboard-board.png")
	run(time.Minute, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#restore")), chromedp.Click(chromedp.CSS("#restore")),
		chromedp.WaitVisible(chromedp.CSS("#done")))
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Spec.State).To(Equal(agentsv1alpha1.SessionRunning))
	run(2*time.Minute, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(card+`:not([data-phase="Stopped"])`)))

	By("approve from the page: the head it showed is the one approved")
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Status.PullRequest).NotTo(BeNil())
	head := s.Status.PullRequest.HeadSHA
	run(time.Minute, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#approve")), chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS("#done")))
	Expect(c.client.Get(ctx, key, s)).To(Succeed())
	Expect(s.Annotations).To(HaveKeyWithValue(agentsv1alpha1.ApprovedHeadAnnotation, head))
	Expect(s.Spec.Messages).To(HaveLen(1), "nothing was sent twice")
}

// artifactDir is where the e2e's screenshots go: $SHEPHERD_ARTIFACTS, else the spec's
// temporary directory (the report names each file).
func artifactDir() string {
	if d := os.Getenv("SHEPHERD_ARTIFACTS"); d != "" {
		Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		return d
	}
	return GinkgoT().TempDir()
}
