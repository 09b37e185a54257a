// Command demo runs one whole Shepherd session offline on the local cluster, from an issue to
// its merged pull request, and prints the phases as they pass. `make run-local` runs it once the
// manager is deployed; docs/local-cluster.md ("The demo") walks through it.
//
// In this process it serves, on the node's IP: a forge (the in-repo fake GitHub, or with
// --forge gitea a real Gitea built from the Go module proxy) holding the repository greeter and
// the issue "Greet the world", whose webhooks go to the manager's Service; the scripted model
// server the real Claude Code in the agent pod talks to (test/modelserver); and a receiver for
// the Project's signed notifications. It renders config/samples/demo with their addresses,
// applies it in the namespace shepherd-demo, then plays CI (a failing check, then passing ones)
// and the reviewer (changes requested with a line comment, then an approval) until the Merge
// reaction merges the pull request (test/scenario, which the e2e suite plays too).
//
// The forge, the model server and the receiver live in this process: they stop when it exits
// (the cluster keeps the objects; the Project reports the forge unreachable once it checks
// again). With
// --keep-serving they stay up after the merge until Ctrl-C. The forge's data, the rendered
// manifests and the agent pod's logs (saved while it runs: Shepherd removes the pod when the
// session ends) stay in --dir.
//
//	go run ./hack/demo [--forge github|gitea] [--keep-serving] [--namespace shepherd-demo]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/notify"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/test/modelserver"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

type options struct {
	kubeconfig  string
	kubectl     string
	forge       string
	namespace   string
	samples     string
	dir         string
	keepServing bool
	timeout     time.Duration
	step        time.Duration
	dashboard   string
	chromium    string
}

func main() {
	os.Exit(mainExit())
}

func mainExit() int {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	flag.StringVar(&o.kubectl, "kubectl", "kubectl", "the kubectl to name in the next steps")
	flag.StringVar(&o.forge, "forge", "github", "the forge: github (the in-repo fake GitHub) or gitea (a real Gitea)")
	flag.StringVar(&o.namespace, "namespace", "shepherd-demo", "the namespace of the demo's objects (recreated)")
	flag.StringVar(&o.samples, "samples", filepath.Join("config", "samples", "demo"), "the manifests' templates")
	flag.StringVar(&o.dir, "dir", defaultDir(), "where the forge's data, the rendered manifests and the pod logs go (emptied first)")
	flag.BoolVar(&o.keepServing, "keep-serving", false, "after the merge, keep the forge and the model server up until Ctrl-C")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the whole demo's bound")
	flag.DurationVar(&o.step, "step-timeout", scenario.DefaultStepTimeout, "each step's bound (a phase, a push)")
	flag.StringVar(&o.dashboard, "dashboard", "", "record the manager's metrics during the session and draw the Grafana dashboard into this PNG (make dashboard-screenshot)")
	flag.StringVar(&o.chromium, "chromium", "/usr/bin/chromium", "the headless Chromium that screenshots the dashboard (hack/chromium.sh installs Debian's)")
	flag.Parse()
	if o.forge != "github" && o.forge != "gitea" {
		fmt.Fprintf(os.Stderr, "demo: --forge must be github or gitea, not %q\n", o.forge)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, o)
	switch {
	case err == nil:
		return 0
	case errors.Is(ctx.Err(), context.Canceled):
		fmt.Fprintln(os.Stderr, "demo: interrupted")
		return 130
	default:
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
}

func defaultDir() string {
	if c := os.Getenv("SHEPHERD_CACHE"); c != "" {
		return filepath.Join(c, "demo")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "shepherd-demo")
	}
	return filepath.Join(home, ".cache", "shepherd", "demo")
}

func run(ctx context.Context, o options) error {
	out := newPrinter(os.Stdout)
	interrupted := ctx
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	_, cl, cs, err := scenario.Clients(o.kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	host, err := scenario.NodeIP(ctx, cl)
	if err != nil {
		return err
	}
	// The Project's name comes from the samples; its path on the receiver is known before it exists.
	webhookURL, err := scenario.WebhookURL(ctx, cl, types.NamespacedName{Namespace: o.namespace, Name: demoProject})
	if err != nil {
		return fmt.Errorf("%w (is the manager deployed? make run-local deploys it)", err)
	}
	if err := waitManager(ctx, cl); err != nil {
		return err
	}

	out.section("the namespace %s (restricted Pod Security Standard)", o.namespace)
	if err := resetNamespace(ctx, cl, o.namespace, out); err != nil {
		return err
	}
	if err := os.RemoveAll(o.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}

	out.section("the forge, the scripted model server and a notification receiver on the node's IP %s", host)
	started := time.Now()
	forge, err := startForge(ctx, o, host)
	if err != nil {
		return err
	}
	defer func() { _ = forge.Close() }()
	if err := forge.HookTo(ctx, webhookURL); err != nil {
		return err
	}
	out.line("forge:    %s (%.1fs): repository %s, issue #%d %q", forge.Name(), time.Since(started).Seconds(), forge.Repo(), forge.Issue(), scenario.IssueTitle)
	out.line("          clone %s, API %s", forge.CloneURL(), forge.APIURL())
	out.line("          webhooks to %s (the manager's Service %s/%s)", webhookURL, scenario.ManagerNamespace, scenario.WebhooksService)
	model, err := scenario.StartModel(host)
	if err != nil {
		return err
	}
	defer func() { _ = model.Close() }()
	out.line("model:    %s (scripted: %d replies, one commit per turn)", model.URL(), len(scenario.Script()))
	notices, err := scenario.StartReceiver(host, func(n notify.Notification) {
		out.line("notification [%s] %s: %s", n.Priority, n.Type, n.Message)
	})
	if err != nil {
		return err
	}
	defer func() { _ = notices.Close() }()
	out.line("notices:  %s", notices.URL())

	out.section("the Project and the AgentSession (%s, rendered into %s)", o.samples, filepath.Join(o.dir, "manifests"))
	m, err := scenario.Render(o.samples, o.namespace, scenario.ValuesFor(forge, model.URL(), notices.URL(), host, time.Minute))
	if err != nil {
		return err
	}
	if err := m.Write(filepath.Join(o.dir, "manifests")); err != nil {
		return err
	}
	if m.Project.Name != demoProject {
		return fmt.Errorf("the samples' Project is %q: the forge's webhook goes to %q's path", m.Project.Name, demoProject)
	}
	if err := m.ApplySetup(ctx, cl); err != nil {
		return err
	}
	started = time.Now()
	if err := scenario.WaitProjectReady(ctx, cl, client.ObjectKeyFromObject(m.Project), 2*time.Minute); err != nil {
		return err
	}
	out.line("Project %s Ready in %.1fs (the forge, the repository and the token checked)", m.Project.Name, time.Since(started).Seconds())

	logs := &podLogs{cs: cs, namespace: o.namespace, dir: filepath.Join(o.dir, "logs"), out: out}
	lctx, stopLogs := context.WithCancel(ctx)
	defer stopLogs()
	go logs.run(lctx)

	var shot *dashboardShot
	if o.dashboard != "" {
		if shot, err = startDashboard(ctx, cs, o.dashboard, o.chromium, filepath.Join(o.dir, "dashboard")); err != nil {
			return err
		}
		out.line("recording the manager's metrics every %s for the dashboard", scrapeEvery)
	}

	out.section("AgentSession %s for issue #%d: the phases as they pass (+time since it was created)", m.Session.Name, forge.Issue())
	out.line("watch it live: %s   (or %s)", "bin/kubectl-shepherd -n "+o.namespace+" logs -f "+m.Session.Name,
		"bin/kubectl-shepherd dashboard -n "+o.namespace+" "+m.Session.Name)
	play := &scenario.Play{
		Client: cl, Forge: forge, Session: client.ObjectKeyFromObject(m.Session), StepTimeout: o.step,
		Logf:         out.line,
		OnTransition: out.phase,
	}
	res, err := play.Run(ctx, func(ctx context.Context) error {
		out.start()
		return m.CreateSession(ctx, cl)
	})
	if err != nil {
		if res != nil {
			out.line("phases so far:\n%s", res.Phases)
		}
		return fmt.Errorf("%w\n(the agent's logs so far: %s; the manager's: kubectl -n %s logs deploy/shepherd-manager)", err, logs.dir, scenario.ManagerNamespace)
	}
	// The manager notifies after it recorded the merge; give the notification a moment to arrive.
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return slices.Contains(notices.Types(), string(agentsv1alpha1.EventPRMerged)), nil
	})
	if shot != nil {
		what, err := shot.finish(ctx, filepath.Join(o.dir, "dashboard"))
		if err != nil {
			return err
		}
		out.line("dashboard: %s", what)
	}
	if err := showTranscript(ctx, out, cs, o.namespace, m.Session.Name); err != nil {
		return err
	}
	summary(out, res, model, notices, logs)
	nextSteps(out, o, res, forge, logs)
	if o.keepServing {
		out.section("serving the forge and the model server until Ctrl-C")
		<-interrupted.Done()
	}
	return nil
}

// demoProject is the name of config/samples/demo's Project.
const demoProject = "greeter"

func startForge(ctx context.Context, o options, host string) (scenario.Forge, error) {
	if o.forge == "gitea" {
		return scenario.StartGitea(ctx, scenario.GiteaOptions{Dir: filepath.Join(o.dir, "gitea"), Host: host, Log: os.Stdout})
	}
	return scenario.StartFakeGitHub(scenario.FakeGitHubOptions{Host: host, Dir: filepath.Join(o.dir, "forge")})
}

// summary prints each phase's time, the scenario's reactions, the pull request and its commits,
// and what the model server and the receiver saw.
func summary(out *printer, res *scenario.Result, model *modelserver.Server, notices *scenario.Receiver, logs *podLogs) {
	ts := res.Phases.Transitions()
	out.section("merged in %.1fs", ts[len(ts)-1].At.Sub(res.Started).Seconds())
	out.plain("  %-18s %9s %9s", "phase", "entered", "lasted")
	for i, t := range ts {
		lasted := ""
		if i+1 < len(ts) {
			lasted = fmt.Sprintf("%8.1fs", ts[i+1].At.Sub(t.At).Seconds())
		}
		out.plain("  %-18s %+8.1fs %9s", t.Phase, t.At.Sub(res.Started).Seconds(), lasted)
	}
	out.plain("  reactions (from the scenario's action, or the phase, to what it caused):")
	for _, s := range res.Steps {
		out.plain("    %-52s %5.1fs", s.Name, s.Took.Seconds())
	}
	out.plain("  pull request:  %s, merged as %s", res.PullRequest.URL, short(res.PullRequest.MergeSHA))
	out.plain("  its commits (the real Claude Code's, pushed by the runner):")
	for _, c := range res.Commits {
		out.plain("    %s %-24q %s, %s", c.Short(), c.Message, c.Author, c.When.Local().Format("15:04:05"))
	}
	if res.Session.Status.Usage != nil && res.Session.Status.Usage.CostUSD != "" {
		out.plain("  usage:         $%s reported by Claude Code (the scripted model's prices)", res.Session.Status.Usage.CostUSD)
	}
	ids, got, bad := notices.Snapshot()
	var types []string
	for _, n := range got {
		types = append(types, n.Type)
	}
	out.plain("  notifications: %d received %v, signed (bad signatures: %d), each delivered once: %v", len(got), types, bad, onceEach(ids))
	problems := model.Problems()
	out.plain("  model server:  %d scripted replies played, %d requests in all, %d refused (nothing else left the machine: %v)",
		model.Played(), len(model.Requests()), len(problems), len(problems) == 0)
	for _, p := range problems {
		out.plain("    refused: %s", p)
	}
	out.plain("  agent logs:    %s (%d files)", logs.dir, logs.count())
}

func onceEach(ids map[string]int) bool {
	for _, n := range ids {
		if n != 1 {
			return false
		}
	}
	return true
}

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

// showTranscript reads the session's transcript as the plugin and the dashboard do, through the
// API server's aggregated API, and prints what it holds.
func showTranscript(ctx context.Context, out *printer, cs kubernetes.Interface, ns, name string) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var body []byte
	err := wait.PollUntilContextCancel(rctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		body, err = cs.Discovery().RESTClient().Get().AbsPath(kubectlplugin.TranscriptPath(ns, name)).DoRaw(ctx)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the transcript through the API server (%s): %w", kubectlplugin.TranscriptPath(ns, name), err)
	}
	var list struct {
		Entries []transcript.Entry `json:"entries"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("the transcript: %w", err)
	}
	kinds := map[transcript.Kind]int{}
	for _, e := range list.Entries {
		kinds[e.Kind]++
	}
	out.section("the transcript, through the API server (what kubectl shepherd logs and the dashboard show): %d entries", len(list.Entries))
	for _, e := range list.Entries {
		if e.Kind == transcript.KindTurnStarted || e.Kind == transcript.KindTurnEnded || e.Kind == transcript.KindToolCall {
			out.plain("  %s", strings.ReplaceAll(transcript.Format(e), "\n", "\n  "))
		}
	}
	out.line("kinds: %v", kinds)
	return nil
}

// nextSteps prints what to look at now, and how to clean up.
func nextSteps(out *printer, o options, res *scenario.Result, forge scenario.Forge, logs *podLogs) {
	k := "kubectl -n " + o.namespace
	s := res.Session.Name
	out.section("what to run next")
	out.plain("  export KUBECONFIG=%s", o.kubeconfig)
	if o.kubectl != "kubectl" {
		out.plain("  alias kubectl=%s", o.kubectl)
	}
	out.plain("  %-62s # the Project, the Worktree (Removed after the merge), the session", k+" get shepherd -o wide")
	out.plain("  %-62s # status, conditions, reactions, messages sent to the agent", k+" describe agentsession "+s)
	out.plain("  %-62s # what the controllers did, in order", k+" get events --sort-by=.lastTimestamp")
	out.plain("  %-62s # the plugin (bin/kubectl-shepherd after make build)", "make build")
	out.plain("  %-62s # the session's transcript, turn by turn", "bin/kubectl-shepherd -n "+o.namespace+" logs "+s)
	out.plain("  %-62s # the dashboard: %s", "bin/kubectl-shepherd dashboard", "http://127.0.0.1:8001"+kubectlplugin.UIPrefix+"/dashboard")
	out.plain("  %-62s # the manager (its pod is kept)", "kubectl -n "+scenario.ManagerNamespace+" logs deploy/shepherd-manager")
	out.plain("  %-62s # the agent pod's containers, saved while they ran:", "ls "+logs.dir)
	out.plain("  %-62s # Shepherd removes the pod when the session ends", "")
	out.plain("  %-62s # what was applied", "cat "+filepath.Join(o.dir, "manifests")+"/*.yaml")
	if f, ok := forge.(*scenario.FakeGitHub); ok {
		out.plain("  %-62s # the forge's repository", "git --git-dir "+f.Server.GitDir(f.Repo())+" log --oneline --all")
	}
	if !o.keepServing {
		out.plain("  The forge and the model server stop with the demo: the objects stay to read, and the Project reports the forge")
		out.plain("  unreachable once it checks again. make run-local DEMO_FLAGS=--keep-serving keeps them up until Ctrl-C.")
	}
	out.plain("  %-62s # remove the demo (run-local recreates it)", "kubectl delete namespace "+o.namespace)
	out.plain("  %-62s # stop the cluster: no process, mount or pod left", "make cluster-down")
}

// resetNamespace removes a previous demo's namespace (its Worktrees may refuse deletion while
// their commits are unpushed: the demo forces them) and creates it anew.
func resetNamespace(ctx context.Context, cl client.Client, name string, out *printer) error {
	ns := &corev1.Namespace{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, ns); err == nil {
		out.line("removing the previous demo's namespace %s", name)
		started := time.Now()
		if err := deleteNamespace(ctx, cl, name); err != nil {
			return err
		}
		out.line("removed in %.1fs", time.Since(started).Seconds())
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	if err := cl.Create(ctx, scenario.RestrictedNamespace(name)); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return waitDefaultServiceAccount(ctx, cl, name)
}
