package modelproxy_test

// BenchmarkModelProxy: what the model proxy adds to an agent's model request. The agent's CLI
// calls the proxy on loopback in its pod, and the proxy calls the model API; here the model API is
// the scripted model server (test/modelserver) on loopback, and the same request is sent both
// ways in one run: straight to the model server (the baseline) and through the proxy as the
// runner configures it (internal/runner: its upstream transport, the key read from a file for
// every request, an OnUsage callback, no budget).
//
// The request is what Claude Code sends for a turn in the middle of a task: a streamed
// POST /v1/messages of about 44 KB (a system prompt, 16 tools with their schemas, a few turns of
// conversation with tool results) with Claude Code's headers and a placeholder key. The answer is
// streamed as the Messages API streams it (text deltas, a tool call, message_delta with the usage;
// about 3 KB in 24 events), so the proxy's metering reads every event.
//
// The requests go one at a time by default (-concurrency for more), in the order direct, proxied,
// proxied, direct, half of -requests in each part, after 100 unmeasured requests each way: drift
// during the run (the machine's other load, the heap) then weighs on both ways alike. Each
// request's latency is taken from just before the client sends it to the end of its stream, and
// to its first event (the response header, which comes with it). CPU is the process's (getrusage
// RUSAGE_SELF, user + system): the client, the model server and the proxy share this process, so
// the proxy's CPU is the proxied parts' CPU minus the direct parts' for the same number of
// requests, the client's and the server's work being the same in both. Allocations are counted
// the same way (runtime.MemStats). The model server is renewed every 250 requests, so that its
// record of every request it answered (bodies included) does not pile up in the heap.
//
// The benchmark checks what it measures, and fails otherwise: every answer whole and the same
// length both ways, the model server got the upstream key through the proxy and the placeholder
// directly, it saw no problem, and the proxy's Usage (and the last OnUsage) equals what the
// server sent, request for request and token for token, with nothing unmetered.
//
//	go test ./test/bench/modelproxy/ -run '^$' -bench BenchmarkModelProxy -benchtime 1x \
//	    [-requests 2000] [-concurrency 1]
//
// or `make bench-proxy` (BENCH_PROXY_REQUESTS, BENCH_PROXY_CONCURRENCY).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

var (
	flagRequests    = flag.Int("requests", 2000, "measured requests each way (direct and through the proxy), 100 to 20000")
	flagConcurrency = flag.Int("concurrency", 1, "requests in flight at once, 1 to 16 (the proxy's default MaxConcurrent)")
)

const (
	model          = "claude-sonnet-4-5-20250929"
	placeholderKey = "sk-ant-placeholder-the-agent-holds"
	upstreamKey    = "sk-ant-bench-upstream-key"
	warmup         = 100 // unmeasured requests each way first: connections, buffers, the heap's size
	renewEvery     = 250 // requests between renewals of the model server
	runTimeout     = 5 * time.Minute
	requestTimeout = 30 * time.Second
)

// reply answers every request: text, then a tool call, with the usage of a turn whose prompt
// is mostly read from the cache. Repeat plays it for every request.
var reply = modelserver.Reply{
	Text: "The proxy's tests pass locally, so the failure is in how the runner wires the key file. " +
		"I'll read internal/runner/model.go to see how the key is read for every request, then run the " +
		"package's tests again with the race detector to rule out the concurrent reads.",
	ToolCalls: []modelserver.ToolCall{{Name: "Bash", Input: map[string]any{
		"command": "go test -race ./internal/runner/ ./internal/modelproxy/", "description": "Run the runner's and the proxy's tests"}}},
	Usage:  modelserver.Usage{InputTokens: 2140, OutputTokens: 187, CacheReadTokens: 10240},
	Repeat: true,
}

func BenchmarkModelProxy(b *testing.B) {
	n, c := *flagRequests, *flagConcurrency
	if n < 100 || n > 20000 || c < 1 || c > 16 {
		b.Fatalf("-requests must be 100 to 20000 and -concurrency 1 to 16 (got %d, %d)", n, c)
	}
	body := claudeCodeRequest()
	for i := 0; i < b.N; i++ {
		res, err := run(b.TempDir(), body, n, c)
		if err != nil {
			b.Fatalf("bench-proxy: %v", err)
		}
		res.report(os.Stdout, len(body))
		b.ReportMetric(float64(res.proxied.whole.p50-res.direct.whole.p50)/1e3, "added-p50-µs")
		b.ReportMetric(float64(res.proxied.whole.p99-res.direct.whole.p99)/1e3, "added-p99-µs")
		b.ReportMetric(res.cpuPer1000().Seconds()*1e3, "proxy-cpu-ms/1000req")
	}
}

// way is one way to the model server: its client, where it calls, and the server behind.
type way struct {
	name   string
	url    string
	client *http.Client
	up     *upstream
	// answer is the first answer's shape, which every answer either way must have.
	answer *shape
	// sent counts the requests sent this way, warm-up included.
	sent int
}

// shape is an answer's length and number of events; the server's ids are fixed-width, so every
// answer has the same: a relay that loses or adds a byte shows.
type shape struct{ bytes, events atomic.Int64 }

// sample is one request's latency: to its first event, and to the end of its stream.
type sample struct{ first, whole time.Duration }

// totals is what the measured parts of one way add up to.
type totals struct {
	samples    []sample
	wall       time.Duration
	cpu        time.Duration
	mallocs    uint64
	allocBytes uint64
	gcs        uint32
}

type quantiles struct{ p50, p99 time.Duration }

type summary struct {
	totals
	first, whole quantiles
}

type result struct {
	n, c            int
	direct, proxied summary
	answer          *shape
	usage           modelproxy.Usage
}

func run(dir string, body []byte, n, c int) (_ result, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()

	directUp, err := startUpstream(placeholderKey)
	if err != nil {
		return result{}, err
	}
	defer directUp.close()
	proxiedUp, err := startUpstream(upstreamKey)
	if err != nil {
		return result{}, err
	}
	defer proxiedUp.close()

	keyFile := filepath.Join(dir, "api-key")
	if err := os.WriteFile(keyFile, []byte(upstreamKey+"\n"), 0o600); err != nil {
		return result{}, err
	}
	upstreamURL, err := url.Parse(proxiedUp.url)
	if err != nil {
		return result{}, err
	}
	var lastOnUsage atomic.Pointer[modelproxy.Usage]
	p, err := modelproxy.New(modelproxy.Config{
		Kind:     agentsv1alpha1.ModelAPIAnthropic,
		Upstream: upstreamURL,
		// As internal/runner's ModelConfig reads it: the file, for every request.
		Key: func() (string, error) {
			b, err := os.ReadFile(keyFile)
			if err != nil {
				return "", fmt.Errorf("read the model API key: %w", err)
			}
			return strings.TrimSpace(string(b)), nil
		},
		Transport: runnerTransport(),
		OnUsage:   func(u modelproxy.Usage) { lastOnUsage.Store(&u) },
	})
	if err != nil {
		return result{}, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()
	defer func() {
		cancel()
		if serr := <-served; serr != nil && err == nil {
			err = serr
		}
	}()

	answer := &shape{}
	direct := &way{name: "direct", url: directUp.url, client: agentClient(c), up: directUp, answer: answer}
	proxied := &way{name: "proxied", url: "http://" + l.Addr().String(), client: agentClient(c), up: proxiedUp, answer: answer}
	for _, w := range []*way{direct, proxied} {
		if _, err := w.send(ctx, body, warmup, c); err != nil {
			return result{}, fmt.Errorf("warm-up %s: %w", w.name, err)
		}
	}
	var d, pr totals
	for _, part := range []struct {
		w   *way
		n   int
		sum *totals
	}{{direct, n / 2, &d}, {proxied, n / 2, &pr}, {proxied, n - n/2, &pr}, {direct, n - n/2, &d}} {
		t, err := part.w.measure(ctx, body, part.n, c)
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", part.w.name, err)
		}
		part.sum.add(t)
	}

	// Metering: the proxy counted exactly what the server sent through it.
	got := p.Usage()
	if last := lastOnUsage.Load(); last == nil || !reflect.DeepEqual(*last, got) {
		return result{}, fmt.Errorf("the last OnUsage (%+v) is not the proxy's Usage (%+v)", last, got)
	}
	turns := int64(proxiedUp.turns)
	each := modelproxy.ModelUsage{Requests: turns, InputTokens: turns * reply.Usage.InputTokens,
		OutputTokens: turns * reply.Usage.OutputTokens, CacheReadTokens: turns * reply.Usage.CacheReadTokens}
	want := modelproxy.Usage{Requests: each.Requests, InputTokens: each.InputTokens, OutputTokens: each.OutputTokens,
		CacheReadTokens: each.CacheReadTokens, ByModel: map[string]modelproxy.ModelUsage{model: each}}
	if proxiedUp.turns != proxied.sent || !reflect.DeepEqual(got, want) {
		return result{}, fmt.Errorf("metering is wrong: %d requests sent through the proxy, %d answered by the model server; "+
			"the proxy counted %+v, the server sent %+v", proxied.sent, proxiedUp.turns, got, want)
	}
	if directUp.turns != direct.sent {
		return result{}, fmt.Errorf("%d requests sent directly, %d answered by the model server", direct.sent, directUp.turns)
	}
	return result{n: n, c: c, direct: d.summary(), proxied: pr.summary(), answer: answer, usage: got}, nil
}

// measure sends n requests and takes the process's CPU and allocations around them.
func (w *way) measure(ctx context.Context, body []byte, n, c int) (totals, error) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	t0 := time.Now()
	samples, err := w.send(ctx, body, n, c)
	wall := time.Since(t0)
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)
	if err != nil {
		return totals{}, err
	}
	return totals{samples: samples, wall: wall, cpu: cpu1 - cpu0, mallocs: m1.Mallocs - m0.Mallocs,
		allocBytes: m1.TotalAlloc - m0.TotalAlloc, gcs: m1.NumGC - m0.NumGC}, nil
}

// send sends n requests, c at a time, renewing the model server every renewEvery requests.
func (w *way) send(ctx context.Context, body []byte, n, c int) ([]sample, error) {
	out := make([]sample, 0, n)
	for done := 0; done < n; {
		k := min(renewEvery, n-done)
		part := make([]sample, k)
		var next atomic.Int64
		g, gctx := errgroup.WithContext(ctx)
		for range c {
			g.Go(func() error {
				for {
					i := int(next.Add(1)) - 1
					if i >= k {
						return nil
					}
					s, err := w.one(gctx, body)
					if err != nil {
						return err
					}
					part[i] = s
				}
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		w.sent += k
		if err := w.up.renew(); err != nil {
			return nil, err
		}
		out = append(out, part...)
		done += k
	}
	return out, nil
}

// one sends the request as Claude Code does and reads the streamed answer to its end.
func (w *way) one(ctx context.Context, body []byte) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	for k, v := range claudeCodeHeaders {
		req.Header.Set(k, v)
	}
	t0 := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		return sample{}, err
	}
	first := time.Since(t0)
	answer, err := io.ReadAll(resp.Body)
	whole := time.Since(t0)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return sample{}, fmt.Errorf("reading the answer: %w", err)
	case resp.StatusCode != http.StatusOK:
		return sample{}, fmt.Errorf("answer %d: %.300s", resp.StatusCode, answer)
	case !bytes.HasSuffix(answer, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")):
		return sample{}, fmt.Errorf("the answer did not end with message_stop: %.300q", answer)
	}
	if n := int64(len(answer)); w.answer.bytes.CompareAndSwap(0, n) {
		w.answer.events.Store(int64(bytes.Count(answer, []byte("\n\n"))))
	} else if w.answer.bytes.Load() != n {
		return sample{}, fmt.Errorf("an answer of %d bytes, another of %d", n, w.answer.bytes.Load())
	}
	return sample{first: first, whole: whole}, nil
}

// upstream serves the model server's handler, renewing the server between batches so that its
// record of every request (bodies included) does not pile up in the heap during the run.
type upstream struct {
	cur atomic.Pointer[modelserver.Server]
	url string
	srv *http.Server
	// key is the API key every request must reach the server with.
	key string
	// turns counts the conversational requests the retired servers answered.
	turns int
}

func startUpstream(key string) (*upstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{url: "http://" + l.Addr().String(), key: key}
	u.cur.Store(modelserver.New(modelserver.Script{reply}))
	// The model server's own Start serves it the same way.
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { u.cur.Load().ServeHTTP(w, r) }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

func (u *upstream) close() { _ = u.srv.Close() }

// renew retires the current server, between batches (nothing in flight), and checks what it saw.
func (u *upstream) renew() error {
	old := u.cur.Swap(modelserver.New(modelserver.Script{reply}))
	if p := old.Problems(); len(p) > 0 {
		return fmt.Errorf("the model server: %s", strings.Join(p, "; "))
	}
	turns := old.Turns()
	for _, t := range turns {
		switch {
		case t.API != modelserver.APIMessages || !t.Stream || t.Reply != 0:
			return fmt.Errorf("the model server answered request %d unexpectedly: %s stream=%v reply=%d", t.Seq, t.API, t.Stream, t.Reply)
		case t.Header.Get("X-Api-Key") != u.key:
			return errors.New("the model server got a request with the wrong API key")
		}
	}
	if all := len(old.Requests()); all != len(turns) {
		return fmt.Errorf("the model server got %d requests besides the %d turns", all-len(turns), len(turns))
	}
	u.turns += len(turns)
	return nil
}

// runnerTransport is the upstream transport internal/runner's ModelConfig builds for an upstream
// given by IP address (no egress proxy).
func runnerTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
}

// agentClient keeps c connections alive, as the CLI's HTTP client does.
func agentClient(c int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, IdleConnTimeout: 90 * time.Second}, Timeout: requestTimeout}
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (t *totals) add(o totals) {
	t.samples = append(t.samples, o.samples...)
	t.wall += o.wall
	t.cpu += o.cpu
	t.mallocs += o.mallocs
	t.allocBytes += o.allocBytes
	t.gcs += o.gcs
}

func (t totals) summary() summary {
	first := make([]time.Duration, len(t.samples))
	whole := make([]time.Duration, len(t.samples))
	for i, s := range t.samples {
		first[i], whole[i] = s.first, s.whole
	}
	slices.Sort(first)
	slices.Sort(whole)
	return summary{totals: t, first: quantiles{percentile(first, 0.50), percentile(first, 0.99)},
		whole: quantiles{percentile(whole, 0.50), percentile(whole, 0.99)}}
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// cpuPer1000 is the proxy's CPU per 1000 requests: the proxied parts' process CPU minus the
// direct parts'.
func (r result) cpuPer1000() time.Duration {
	return (r.proxied.cpu - r.direct.cpu) * 1000 / time.Duration(len(r.proxied.samples))
}

func (r result) report(out io.Writer, requestBytes int) {
	fmt.Fprintf(out, "bench-proxy: %d streamed Anthropic POST /v1/messages each way (request %.1f KB as Claude Code sends it, "+
		"answer %.1f KB in %d events with usage), %d at a time, on loopback; GOMAXPROCS %d, %s\n",
		r.n, float64(requestBytes)/1000, float64(r.answer.bytes.Load())/1000, r.answer.events.Load(), r.c, runtime.GOMAXPROCS(0), loadAverage())
	fmt.Fprintf(out, "  order: direct, proxied, proxied, direct (half the requests each way in each part), after %d unmeasured requests each way\n", warmup)
	fmt.Fprintf(out, "  %-10s %11s %11s %11s %11s %9s %13s %11s %12s %5s\n",
		"way", "first p50", "first p99", "whole p50", "whole p99", "req/s", "CPU/1000 req", "allocs/req", "KiB/req", "GCs")
	for _, row := range []struct {
		name string
		s    summary
	}{{"direct", r.direct}, {"proxied", r.proxied}} {
		s, k := row.s, float64(len(row.s.samples))
		fmt.Fprintf(out, "  %-10s %11s %11s %11s %11s %9.0f %13s %11.0f %12.1f %5d\n", row.name,
			us(s.first.p50), us(s.first.p99), us(s.whole.p50), us(s.whole.p99), k/s.wall.Seconds(),
			ms(s.cpu*1000/time.Duration(k)), float64(s.mallocs)/k, float64(s.allocBytes)/k/1024, s.gcs)
	}
	d, p := r.direct, r.proxied
	k := float64(len(p.samples))
	fmt.Fprintf(out, "added by the proxy: whole p50 %s (%.2fx), whole p99 %s (%.2fx); first event p50 %s (%.2fx), p99 %s (%.2fx)\n",
		delta(p.whole.p50-d.whole.p50), ratio(p.whole.p50, d.whole.p50), delta(p.whole.p99-d.whole.p99), ratio(p.whole.p99, d.whole.p99),
		delta(p.first.p50-d.first.p50), ratio(p.first.p50, d.first.p50), delta(p.first.p99-d.first.p99), ratio(p.first.p99, d.first.p99))
	fmt.Fprintf(out, "the proxy's CPU per 1000 requests: %s (the proxied requests took %.2fx the direct ones' CPU); allocations +%.0f/req, +%.1f KiB/req\n",
		ms(r.cpuPer1000()), float64(p.cpu)/float64(d.cpu),
		(float64(p.mallocs)-float64(d.mallocs))/k, (float64(p.allocBytes)-float64(d.allocBytes))/k/1024)
	fmt.Fprintln(out, "  (client, model server and proxy share this process: the proxy's CPU and allocations are the proxied parts'")
	fmt.Fprintln(out, "   process CPU (getrusage user+system) and allocations minus the direct parts', whose client and server work is the same;")
	fmt.Fprintln(out, "   it includes the loopback hop's system time and the GC the proxy's allocations cause)")
	fmt.Fprintf(out, "metering: the proxy counted %d requests, %d input, %d output, %d cache-read tokens, %d unmetered: "+
		"equal to what the model server sent\n", r.usage.Requests, r.usage.InputTokens, r.usage.OutputTokens, r.usage.CacheReadTokens, r.usage.Unmetered)
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/1e3) }

func delta(d time.Duration) string { return fmt.Sprintf("%+.0fµs", float64(d)/1e3) }

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// claudeCodeHeaders are the headers Claude Code sends with a turn (its Anthropic SDK's among
// them), with the placeholder key the runner gives it.
var claudeCodeHeaders = map[string]string{
	"Accept":            "application/json",
	"Content-Type":      "application/json",
	"User-Agent":        "claude-cli/2.0.14 (external, cli)",
	"X-Api-Key":         placeholderKey,
	"Anthropic-Version": "2023-06-01",
	"Anthropic-Beta":    "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
	"Anthropic-Dangerous-Direct-Browser-Access": "true",
	"X-App":                       "cli",
	"X-Stainless-Arch":            "x64",
	"X-Stainless-Lang":            "js",
	"X-Stainless-Os":              "Linux",
	"X-Stainless-Package-Version": "0.60.0",
	"X-Stainless-Retry-Count":     "0",
	"X-Stainless-Runtime":         "node",
	"X-Stainless-Runtime-Version": "v22.20.0",
	"X-Stainless-Timeout":         "600",
}

// claudeCodeRequest is a turn in the middle of a task, shaped as Claude Code sends it: the
// cached system prompt, its tools, and the conversation so far with tool results.
func claudeCodeRequest() []byte {
	prose := func(topic string, sentences int) string {
		var b strings.Builder
		for i := range sentences {
			fmt.Fprintf(&b, "When you work on %s (point %d), read the surrounding code first, follow its conventions, "+
				"keep the change small and run the tests that cover it before you report back. ", topic, i+1)
		}
		return b.String()
	}
	type obj = map[string]any
	str := func(desc string) obj { return obj{"type": "string", "description": desc} }
	tools := []any{}
	for i, t := range []struct {
		name  string
		props obj
	}{
		{"Task", obj{"description": str("A short description of the task"), "prompt": str("The task for the agent to perform"), "subagent_type": str("The type of agent")}},
		{"Bash", obj{"command": str("The command to execute"), "timeout": obj{"type": "number", "description": "Optional timeout in milliseconds"}, "description": str("What the command does"), "run_in_background": obj{"type": "boolean"}}},
		{"Glob", obj{"pattern": str("The glob pattern to match files against"), "path": str("The directory to search in")}},
		{"Grep", obj{"pattern": str("The regular expression to search for"), "path": str("File or directory to search in"), "glob": str("Glob to filter files"), "output_mode": obj{"type": "string", "enum": []string{"content", "files_with_matches", "count"}}}},
		{"ExitPlanMode", obj{"plan": str("The plan to run by the user")}},
		{"Read", obj{"file_path": str("The absolute path to the file to read"), "offset": obj{"type": "number"}, "limit": obj{"type": "number"}}},
		{"Edit", obj{"file_path": str("The absolute path to the file to modify"), "old_string": str("The text to replace"), "new_string": str("The text to replace it with"), "replace_all": obj{"type": "boolean", "default": false}}},
		{"MultiEdit", obj{"file_path": str("The absolute path to the file to modify"), "edits": obj{"type": "array", "items": obj{"type": "object", "properties": obj{"old_string": str("The text to replace"), "new_string": str("The replacement")}}}}},
		{"Write", obj{"file_path": str("The absolute path to the file to write"), "content": str("The content to write to the file")}},
		{"NotebookEdit", obj{"notebook_path": str("The absolute path to the notebook"), "cell_id": str("The ID of the cell to edit"), "new_source": str("The new source for the cell")}},
		{"WebFetch", obj{"url": obj{"type": "string", "format": "uri"}, "prompt": str("The prompt to run on the fetched content")}},
		{"TodoWrite", obj{"todos": obj{"type": "array", "items": obj{"type": "object", "properties": obj{"content": str("The task"), "status": obj{"type": "string", "enum": []string{"pending", "in_progress", "completed"}}, "activeForm": str("The task in progress")}}}}},
		{"WebSearch", obj{"query": str("The search query to use"), "allowed_domains": obj{"type": "array", "items": obj{"type": "string"}}}},
		{"BashOutput", obj{"bash_id": str("The ID of the background shell"), "filter": str("Regular expression to filter the output lines")}},
		{"KillShell", obj{"shell_id": str("The ID of the background shell to kill")}},
		{"SlashCommand", obj{"command": str("The slash command to execute with its arguments")}},
	} {
		required := slices.Sorted(func(yield func(string) bool) {
			for k := range t.props {
				if !yield(k) {
					return
				}
			}
		})
		tools = append(tools, obj{"name": t.name, "description": prose("the "+t.name+" tool", 4+i%5),
			"input_schema": obj{"type": "object", "properties": t.props, "required": required[:1],
				"additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}})
	}
	listing := strings.Repeat("ok  \tgithub.com/shepherd-dev/shepherd/internal/modelproxy\t0.412s\n--- FAIL: TestKeyRotation (0.01s)\n", 24)
	source := strings.Repeat("\tkey, err := p.readKey()\n\tif err != nil {\n\t\treturn \"\", fmt.Errorf(\"read the key: %w\", err)\n\t}\n", 40)
	req := obj{
		"model":      model,
		"max_tokens": 32000,
		"stream":     true,
		"metadata":   obj{"user_id": "user_5f1c0b2e9a_account__session_8d6e3f2a-41b7-4c2e-9f0a-7b3d2c1e5a90"},
		"system": []any{
			obj{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": obj{"type": "ephemeral"}},
			obj{"type": "text", "text": prose("a software engineering task", 60), "cache_control": obj{"type": "ephemeral"}},
		},
		"tools": tools,
		"messages": []any{
			obj{"role": "user", "content": []any{
				obj{"type": "text", "text": "<system-reminder>" + prose("this repository", 6) + "</system-reminder>"},
				obj{"type": "text", "text": "Fix issue 42: the model proxy must read a rotated API key on the next request."},
			}},
			obj{"role": "assistant", "content": []any{
				obj{"type": "text", "text": "I'll start by running the proxy's tests."},
				obj{"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": obj{"command": "go test ./internal/modelproxy/", "description": "Run the proxy's tests"}},
			}},
			obj{"role": "user", "content": []any{obj{"type": "tool_result", "tool_use_id": "toolu_01A", "content": listing}}},
			obj{"role": "assistant", "content": []any{
				obj{"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": obj{"file_path": "/workspace/internal/modelproxy/proxy.go"}},
			}},
			obj{"role": "user", "content": []any{obj{"type": "tool_result", "tool_use_id": "toolu_01B", "content": source,
				"cache_control": obj{"type": "ephemeral"}}}},
		},
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}
