// Command stream is `make bench-stream`: N sessions' runners stream transcript entries at once
// and the benchmark measures, for every entry, the time from the agent's line to its arrival at
// `kubectl shepherd logs -f` and at a session page in a real browser.
//
// The path is the one a team's entries take, every part real but the agent:
//   - the runner side: runnerapi's client, sending as internal/runner's transcriber does (at once
//     when idle, then at most every 100 ms), with a pod-bound ServiceAccount token;
//   - the manager side: runnerapi's handler (TokenReview against the API server, the pod's
//     identity, its rate limit), the transcript windows (transcript.Store), the UI server;
//   - a real kube-apiserver with its aggregation layer (test/uienv) between the UI and its
//     readers, which authenticates them and proxies their streams;
//   - readers: N `kubectl shepherd logs -f --raw` commands in this process, and session pages of
//     the dashboard in Debian's headless Chromium through `kubectl shepherd dashboard`'s proxy.
//
// Each line carries the time it was made; a reader's latency is its arrival time minus that.
// One session streaming alone is the baseline, measured in the same run. Last, every window is
// filled to its bound and the windows' memory is reported. Traffic stays on loopback and this
// machine's own address, bounded in count and time.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/runnerapi/runnerapitest"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/ui"
	"github.com/shepherd-dev/shepherd/test/uienv"
)

const (
	namespace = "bench"
	project   = "widgets"
	// sendEvery is internal/runner's transcriptSendEvery.
	sendEvery = 100 * time.Millisecond
	// maxTabs: Chromium opens at most 6 HTTP/1.1 connections to one host, and each session page
	// holds one (its event stream) through the loopback proxy; more tabs would queue behind them.
	maxTabs = 5
)

func main() {
	sessions := flag.Int("sessions", 100, "sessions streaming at once")
	rate := flag.Float64("rate", 5, "lines per second each agent prints")
	duration := flag.Duration("duration", 20*time.Second, "how long each run streams")
	tabs := flag.Int("tabs", maxTabs, fmt.Sprintf("session pages open in Chromium (at most %d)", maxTabs))
	chromium := flag.String("chromium", os.Getenv("SHEPHERD_CHROMIUM"), "Chromium's path (hack/chromium.sh)")
	flag.Parse()
	if *sessions < 1 || *sessions > 1000 || *rate <= 0 || *rate > 50 || *duration <= 0 || *duration > 5*time.Minute || *tabs < 0 || *tabs > maxTabs {
		fail(errors.New("bounds: 1..1000 sessions, a rate of at most 50 lines a second, a duration up to 5m, 0..5 tabs"))
	}
	if *tabs > *sessions {
		*tabs = *sessions
	}
	if *chromium == "" && *tabs > 0 {
		fail(errors.New("set --chromium or SHEPHERD_CHROMIUM (make bench-stream does, from hack/chromium.sh), or --tabs 0"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := bench(ctx, *sessions, *rate, *duration, *tabs, *chromium); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-stream:", err)
	os.Exit(1)
}

// latencies are the entries' latencies to the plugin's followers, recorded while on.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
	on  atomic.Bool
}

func (l *latencies) add(d time.Duration) {
	if !l.on.Load() {
		return
	}
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.all
	l.all = nil
	return out
}

// line is an agent's line: the time it was made, in microseconds since the epoch.
func line(t time.Time) string { return "line " + strconv.FormatInt(t.UnixMicro(), 10) }

func madeAt(text string) (time.Time, bool) {
	v, ok := strings.CutPrefix(text, "line ")
	if !ok {
		return time.Time{}, false
	}
	us, err := strconv.ParseInt(v, 10, 64)
	return time.UnixMicro(us), err == nil
}

func bench(ctx context.Context, n int, rate float64, duration time.Duration, tabs int, chromium string) error {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set (make bench-stream sets it)")
	}
	dir, err := os.MkdirTemp("", "bench-stream-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	fmt.Printf("bench-stream: a real kube-apiserver with its aggregation layer, %d sessions, %.0f lines/s each for %s; GOMAXPROCS %d\n",
		n, rate, duration, runtime.GOMAXPROCS(0))
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	if err := uienv.Configure(env, dir); err != nil {
		return err
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start the API server: %w", err)
	}
	defer func() { _ = env.Stop() }()
	scheme := clientgoscheme.Scheme
	if err := agentsv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	adm, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The readers: a user of the API server (a client certificate), as a person runs kubectl.
	reader, err := env.AddUser(envtest.User{Name: "reader", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "reader.kubeconfig")
	kc, err := reader.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}

	backend := runnerapitest.NewMemoryBackend()
	store := &backend.Transcripts
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	delegated, err := ui.NewDelegated(srvCtx, cfg)
	if err != nil {
		return err
	}
	go delegated.Run(srvCtx)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	uiSrv, err := ui.NewServer(ui.Options{Sessions: adm, Transcripts: store, Authenticator: delegated.Authenticator, Authorizer: delegated.Authorizer,
		Steer: &kubectlplugin.Steerer{Dynamic: dyn, Kube: kube}, CSRFKey: []byte("bench-stream-csrf-key-0123456789"), Log: logr.Discard()})
	if err != nil {
		return err
	}
	served, err := uienv.Serve(ctx, adm, uiSrv)
	if err != nil {
		return err
	}
	defer func() { _ = served.Close() }()
	channel, err := runnerapi.NewHandler(runnerapi.HandlerOptions{Backend: backend, Reviewer: runnerapi.NewTokenReviewer(adm), Pods: adm, Log: logr.Discard()})
	if err != nil {
		return err
	}
	manager := httptest.NewServer(channel)
	defer manager.Close()

	fmt.Printf("  setting up %d sessions, their agent pods and pod-bound tokens\n", n)
	runners, err := setup(ctx, adm, kube, backend, n, dir, manager.URL)
	if err != nil {
		return err
	}

	plugin := &latencies{}
	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	var followers sync.WaitGroup
	for _, r := range runners {
		followers.Add(1)
		go func() {
			defer followers.Done()
			follow(followCtx, kubeconfig, r.name, plugin)
		}()
	}
	var b *browserReader
	if tabs > 0 {
		b, err = openBrowser(ctx, chromium, reader.Config(), runners[:tabs])
		if err != nil {
			return err
		}
		defer b.close()
	}

	// Warm up: every session's first entries reach every reader before anything is measured.
	warm := time.Now()
	for _, r := range runners {
		r.emit(ctx, 1, 1)
	}
	if err := waitFor(ctx, func() bool { return allSeen(store, runners) }); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("  warm-up done in %s: every follower and page is open\n", time.Since(warm).Round(100*time.Millisecond))

	type run struct {
		name            string
		sessions        int
		plugin, browser []time.Duration
		entries         int64
		refused         int64
	}
	var runs []run
	for _, streaming := range []int{1, n} {
		if b != nil {
			if err := b.reset(ctx); err != nil {
				return err
			}
		}
		plugin.take()
		plugin.on.Store(true)
		var sent, refused atomic.Int64
		var wg sync.WaitGroup
		rctx, stop := context.WithTimeout(ctx, duration)
		for _, r := range runners[:streaming] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, f := r.stream(rctx, rate)
				sent.Add(s)
				refused.Add(f)
			}()
		}
		wg.Wait()
		stop()
		time.Sleep(2 * time.Second) // the last entries arrive
		plugin.on.Store(false)
		var inBrowser []time.Duration
		if b != nil {
			if inBrowser, err = b.collect(ctx); err != nil {
				return err
			}
		}
		name := "one session alone"
		if streaming > 1 {
			name = fmt.Sprintf("%d sessions at once", streaming)
		}
		runs = append(runs, run{name: name, sessions: streaming, plugin: plugin.take(), browser: inBrowser, entries: sent.Load(), refused: refused.Load()})
	}
	stopFollow()
	followers.Wait()

	fmt.Printf("\n  %-22s %8s %9s  %-36s %-36s\n", "run", "entries", "refused", "to kubectl shepherd logs -f", fmt.Sprintf("to the browser (%d pages)", tabs))
	fmt.Printf("  %-22s %8s %9s  %-36s %-36s\n", "", "", "", "n / p50 / p99 / max", "n / p50 / p99 / max")
	for _, r := range runs {
		fmt.Printf("  %-22s %8d %9d  %-36s %-36s\n", r.name, r.entries, r.refused, summary(r.plugin), summary(r.browser))
	}
	base, full := runs[0], runs[len(runs)-1]
	fmt.Printf("ratios (%s / one alone): plugin p50 %s, p99 %s; browser p50 %s, p99 %s\n", full.name,
		ratio(full.plugin, base.plugin, 50), ratio(full.plugin, base.plugin, 99), ratio(full.browser, base.browser, 50), ratio(full.browser, base.browser, 99))
	fmt.Printf("target: p99 under 1s to both readers at %d sessions: plugin %v, browser %v\n", n,
		pct(full.plugin, 99) < time.Second && len(full.plugin) > 0, tabs == 0 || (pct(full.browser, 99) < time.Second && len(full.browser) > 0))

	return windowsMemory(store, runners)
}

// runner is one session's simulated runner.
type runner struct {
	name   string
	key    types.NamespacedName
	client *runnerapi.Client
	seq    uint64
}

// setup makes the sessions, their agent pods (as the controllers make them: labelled, controlled
// by the session, running as the Project's agent ServiceAccount) and a token bound to each pod.
func setup(ctx context.Context, adm client.Client, kube kubernetes.Interface, backend *runnerapitest.MemoryBackend, n int, dir, url string) ([]*runner, error) {
	sa := runnerapi.DefaultPodNames.ServiceAccount(project)
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa}},
	} {
		if err := adm.Create(ctx, obj); err != nil {
			return nil, err
		}
	}
	runners := make([]*runner, n)
	for i := range n {
		name := fmt.Sprintf("widgets-%03d", i)
		s := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: agentsv1alpha1.AgentSessionSpec{ProjectRef: agentsv1alpha1.LocalObjectReference{Name: project}, Prompt: "Stream for the benchmark."}}
		if err := adm.Create(ctx, s); err != nil {
			return nil, err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: runnerapi.DefaultPodNames.AgentPod(name), Labels: map[string]string{
				agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue, agentsv1alpha1.LabelProject: project, agentsv1alpha1.LabelSession: name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentSession", Name: name, UID: s.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/agent:1"}}},
		}
		if err := adm.Create(ctx, pod); err != nil {
			return nil, err
		}
		tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{runnerapi.Audience}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, name+".token")
		if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
			return nil, err
		}
		c, err := runnerapi.NewClient(url, file, "")
		if err != nil {
			return nil, err
		}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		backend.SetTask(key, runnerapi.Task{Prompt: s.Spec.Prompt, Branch: "shepherd/" + name, BaseBranch: "main"})
		runners[i] = &runner{name: name, key: key, client: c}
	}
	return runners, nil
}

// emit sends count entries at once (the warm-up's turn start and first line).
func (r *runner) emit(ctx context.Context, turn int32, count int) {
	var batch []transcript.Entry
	for range count {
		r.seq++
		now := time.Now().UTC()
		batch = append(batch, transcript.Entry{Seq: r.seq, Time: now, Turn: turn, Kind: transcript.KindText, Text: line(now)})
	}
	_, _ = r.client.Transcript(ctx, transcript.Batch{Entries: batch})
}

// stream prints lines at rate until ctx ends, sending them as internal/runner's transcriber
// does: a line that finds the sender idle goes at once; the next batch waits sendEvery. It
// returns the entries sent and the batches refused.
func (r *runner) stream(ctx context.Context, rate float64) (sent, refused int64) {
	var mu sync.Mutex
	var pending []transcript.Entry
	kick := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			mu.Lock()
			batch := pending
			pending = nil
			mu.Unlock()
			if len(batch) > 0 {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := r.client.Transcript(sctx, transcript.Batch{Entries: batch}); err != nil {
					refused++
				} else {
					sent += int64(len(batch))
				}
				cancel()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(sendEvery):
			}
		}
	}()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return sent, refused
		case <-tick.C:
			mu.Lock()
			r.seq++
			now := time.Now().UTC()
			pending = append(pending, transcript.Entry{Seq: r.seq, Time: now, Turn: 1, Kind: transcript.KindText, Text: line(now)})
			mu.Unlock()
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
}

// follow runs `kubectl shepherd logs NAME -f --raw` until ctx ends and records each entry's
// latency on arrival.
func follow(ctx context.Context, kubeconfig, name string, lat *latencies) {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e transcript.Entry
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			if t, ok := madeAt(e.Text); ok {
				lat.add(time.Since(t))
			}
		}
	}()
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: pw, ErrOut: io.Discard})
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "-n", namespace, "logs", name, "-f", "--raw"})
	_ = cmd.ExecuteContext(ctx)
	_ = pw.Close()
}

// allSeen says every session's window holds its first entry.
func allSeen(store *transcript.Store, runners []*runner) bool {
	for _, r := range runners {
		if store.Last(r.key) == 0 {
			return false
		}
	}
	return true
}

func waitFor(ctx context.Context, ok func() bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// browserReader is Chromium with a session page per tab, through the dashboard's proxy.
type browserReader struct {
	tabs  []context.Context
	close func()
}

// observe records, in the page, each transcript entry's latency as it is added to the list.
const observe = `(() => {
  window.__lat = [];
  new MutationObserver(ms => { for (const m of ms) for (const n of m.addedNodes) {
    if (n.nodeType !== 1 || !n.matches('li[data-seq]')) continue;
    const t = /line (\d+)/.exec(n.textContent);
    if (t) window.__lat.push(Date.now() - Number(t[1]) / 1000);
  } }).observe(document.getElementById('transcript'), {childList: true, subtree: true});
  return true;
})()`

func openBrowser(ctx context.Context, chromium string, cfg *rest.Config, runners []*runner) (*browserReader, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	proxy := &kubectlplugin.DashboardProxy{Config: cfg, Addr: l.Addr().String()}
	h, err := proxy.Handler()
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1200, 800))...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	var cancelTabs []context.CancelFunc
	b := &browserReader{close: func() {
		for _, c := range cancelTabs {
			c()
		}
		cancelBrowser()
		cancelAlloc()
		_ = srv.Close()
	}}
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		b.close()
		return nil, fmt.Errorf("start Chromium: %w", err)
	}
	for _, r := range runners {
		tctx, cancelTab := chromedp.NewContext(bctx)
		cancelTabs = append(cancelTabs, cancelTab)
		// The first action on a tab's context opens the tab, and a deadline on it would close it.
		if err := chromedp.Do(tctx, chromedp.Navigate("about:blank")); err != nil {
			b.close()
			return nil, fmt.Errorf("open a tab: %w", err)
		}
		tc, cancel := context.WithTimeout(tctx, time.Minute)
		var ok bool
		err := chromedp.Do(tc, chromedp.Navigate("http://"+l.Addr().String()+ui.SessionLink("", namespace, r.name)),
			chromedp.WaitVisible(chromedp.CSS("#transcript")))
		if err == nil {
			ok, err = chromedp.Run(tc, chromedp.Evaluate[bool](observe))
		}
		cancel()
		if err == nil && !ok {
			err = errors.New("the page has no transcript list")
		}
		if err != nil {
			b.close()
			return nil, fmt.Errorf("open %s's page: %w", r.name, err)
		}
		b.tabs = append(b.tabs, tctx)
	}
	return b, nil
}

func (b *browserReader) reset(ctx context.Context) error {
	for _, t := range b.tabs {
		tc, cancel := context.WithTimeout(t, 20*time.Second)
		_, err := chromedp.Run(tc, chromedp.Evaluate[bool](`(window.__lat = [], true)`))
		cancel()
		if err != nil {
			return fmt.Errorf("reset a page's samples: %w", err)
		}
	}
	return ctx.Err()
}

func (b *browserReader) collect(ctx context.Context) ([]time.Duration, error) {
	var out []time.Duration
	for _, t := range b.tabs {
		tc, cancel := context.WithTimeout(t, 20*time.Second)
		ms, err := chromedp.Run(tc, chromedp.Evaluate[[]float64](`window.__lat`))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read a page's samples: %w", err)
		}
		for _, v := range ms {
			out = append(out, time.Duration(v*float64(time.Millisecond)))
		}
	}
	return out, ctx.Err()
}

// windowsMemory fills every session's window to its bound and reports what the windows hold and
// what the heap grew by.
func windowsMemory(store *transcript.Store, runners []*runner) error {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	text := strings.Repeat("x", 600)
	for _, r := range runners {
		batch := make([]transcript.Entry, 0, 100)
		for range transcript.DefaultMaxEntries + 100 {
			r.seq++
			// A text of its own per entry, as a real agent's output is (not one shared string).
			batch = append(batch, transcript.Entry{Seq: r.seq, Time: time.Now().UTC(), Turn: 2, Kind: transcript.KindToolResult, Tool: "Bash",
				Text: strconv.FormatUint(r.seq, 10) + text})
			if len(batch) == cap(batch) {
				store.Append(r.key, "", batch)
				batch = batch[:0]
			}
		}
		store.Append(r.key, "", batch)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := store.Stats()
	fmt.Printf("windows filled to their bound (%d entries or %d KiB each): %d sessions, %d entries, %.1f MiB accounted (%.0f KiB a session); heap in use grew %.1f MiB\n",
		transcript.DefaultMaxEntries, transcript.DefaultMaxBytes>>10, st.Sessions, st.Entries, float64(st.Bytes)/(1<<20),
		float64(st.Bytes)/float64(max(st.Sessions, 1))/1024, (float64(after.HeapInuse)-float64(before.HeapInuse))/(1<<20))
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func summary(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	r := func(x time.Duration) string { return x.Round(100 * time.Microsecond).String() }
	return fmt.Sprintf("%d / %s / %s / %s", len(d), r(pct(d, 50)), r(pct(d, 99)), r(pct(d, 100)))
}

func ratio(a, b []time.Duration, p int) string {
	if len(a) == 0 || len(b) == 0 || pct(b, p) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(pct(a, p))/float64(pct(b, p)))
}
