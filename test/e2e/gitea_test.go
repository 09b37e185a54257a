package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// giteaWebhookEvents are the deliveries (X-GitHub-Event of Gitea's) that carry the scenario's
// changes: CI statuses, the rejecting and the approving review, and the agent's pushes.
var giteaWebhookEvents = []string{"status", "pull_request_rejected", "pull_request_approved", "pull_request"}

// giteaSession is wholeSession on a real Gitea: the same scenario with scm.provider and
// tracker.provider gitea, CI as commit statuses (a required context), the reviewer's official
// reviews, Gitea's webhooks to the manager's Service. The Project polls once an hour, so only
// webhooks can move the session within the play's bounded steps.
func giteaSession(ctx context.Context, c *cluster) {
	By("starting Gitea on the node IP, with the repository protected and a webhook to the manager's Service")
	dir := GinkgoT().TempDir()
	started := time.Now()
	g, err := scenario.StartGitea(ctx, scenario.GiteaOptions{Dir: filepath.Join(dir, "gitea"), Host: nodeIP(ctx, c),
		Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "%s ready with the repository in %.1fs\n", g.Name(), time.Since(started).Seconds())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "gitea", "gitea.log")); err == nil {
				fmt.Fprintf(GinkgoWriter, "--- gitea.log (end)\n%s\n", tail(string(b), 60))
			}
		}
		Expect(g.Close()).To(Succeed())
	})

	before := webhookDeliveries(ctx, c)
	run := playScenario(ctx, c, g, playOptions{
		pollInterval: time.Hour,
		// Far below the poll interval: a phase reached within it was brought by a webhook.
		stepTimeout: 3 * time.Minute,
	})
	checkSessionEnd(ctx, c, run)

	By("Gitea merged it: main's head is the merge, on top of the seeded commit")
	admin := g.Server.Client(g.Server.Admin)
	main, err := admin.BranchSHA(ctx, g.Server.Admin.Name, scenario.RepoName, "main")
	Expect(err).NotTo(HaveOccurred())
	Expect(main).To(Equal(run.res.PullRequest.MergeSHA), "one merge, by the Merge reaction")
	var merge struct {
		Parents []struct {
			SHA string `json:"sha"`
		} `json:"parents"`
	}
	Expect(admin.Do(ctx, http.MethodGet, fmt.Sprintf("/repos/%s/git/commits/%s", g.Repo(), main), nil, &merge)).To(Succeed())
	Expect(merge.Parents).To(ConsistOf(HaveField("SHA", g.Seed)), "a squash of the three commits onto the seed")

	By("webhooks drove it: the manager accepted Gitea's deliveries of each kind")
	after := webhookDeliveries(ctx, c)
	for _, event := range giteaWebhookEvents {
		Expect(after[event]-before[event]).To(BeNumerically(">=", 1), "accepted %q deliveries (before %v, after %v)", event, before, after)
	}
	Expect(after["status"]-before["status"]).To(BeNumerically(">=", 3), "the three CI statuses")
	Expect(run.res.Session.Status.PullRequest.Checks).To(Equal(agentsv1alpha1.ChecksPassing))
}

// webhookDeliveries reads the accepted webhook deliveries per event from the manager's metrics
// (shepherd_scm_webhook_deliveries_total), through the metrics Service.
func webhookDeliveries(ctx context.Context, c *cluster) map[string]float64 {
	GinkgoHelper()
	scraper, err := scenario.NewMetricsScraper(ctx, c.clientset)
	Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	Eventually(func(g Gomega) {
		body, err := scraper.Scrape(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			line := sc.Text()
			rest, ok := strings.CutPrefix(line, `shepherd_scm_webhook_deliveries_total{event="`)
			if !ok {
				continue
			}
			event, rest, _ := strings.Cut(rest, `"`)
			if !strings.HasPrefix(rest, `,outcome="accepted"} `) {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndexByte(rest, ' ')+1:]), 64)
			g.Expect(err).NotTo(HaveOccurred(), line)
			out[event] = v
		}
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	return out
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
