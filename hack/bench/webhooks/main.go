// Command webhooks is `make bench-webhooks`: the webhook receiver (internal/scm/webhook, behind a
// server with the manager's limits) on loopback, fed signed deliveries of a real payload by
// concurrent senders, first alone, then while an unauthenticated flood runs beside them (bodies
// of 1 MiB with forged signatures, bodies of 25 MiB declared, slow senders holding connections).
// It prints signed deliveries per second and the peak heap of each run, and their ratios against
// the unflooded run measured in the same process. Traffic goes to loopback only, bounded in count
// and time.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

var (
	project = types.NamespacedName{Namespace: "team", Name: "widgets"}
	secret  = []byte("bench-secret")
)

func main() {
	deliveries := flag.Int("deliveries", 20000, "signed deliveries per run")
	senders := flag.Int("senders", 8, "concurrent senders of signed deliveries")
	flooders := flag.Int("flooders", 32, "concurrent unauthenticated flooders in the flooded run")
	flag.Parse()
	base, err := run(*deliveries, *senders, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-webhooks:", err)
		os.Exit(1)
	}
	flooded, err := run(*deliveries, *senders, *flooders)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-webhooks:", err)
		os.Exit(1)
	}
	fmt.Printf("bench-webhooks: %d signed pull_request deliveries (%d bytes each), %d senders, on loopback; GOMAXPROCS %d\n",
		*deliveries, len(body()), *senders, runtime.GOMAXPROCS(0))
	fmt.Printf("  %-28s %12s %10s %10s %14s %12s\n", "run", "deliveries/s", "p50", "max", "peak heap", "flood reqs")
	for _, r := range []result{base, flooded} {
		fmt.Printf("  %-28s %12.0f %10s %10s %11.1f MiB %12d\n", r.name, r.rate, r.p50.Round(time.Microsecond), r.max.Round(time.Microsecond),
			float64(r.peakHeap)/(1<<20), r.flood)
	}
	fmt.Printf("ratios (flooded / alone): deliveries/s %.2fx, peak heap %.2fx; every signed delivery accepted in both: %v\n",
		flooded.rate/base.rate, float64(flooded.peakHeap)/float64(base.peakHeap), base.accepted == *deliveries && flooded.accepted == *deliveries)
}

type result struct {
	name     string
	rate     float64
	p50, max time.Duration
	peakHeap uint64
	accepted int
	flood    int64
}

func body() []byte { return fakegithub.Fixture("webhooks/pull_request.opened.json") }

// serve runs the receiver as the manager does (internal/controller's webhookLimits).
func serve(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	go func() { _ = srv.Serve(netutil.LimitListener(l, 512)) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

func run(n, senders, flooders int) (result, error) {
	name := "alone"
	if flooders > 0 {
		name = fmt.Sprintf("with %d flooders", flooders)
	}
	runtime.GC()
	var hints atomic.Int64
	h, err := webhook.NewHandler(webhook.Options{
		Lookup: func(_ context.Context, key types.NamespacedName) (webhook.Target, error) {
			if key != project {
				return webhook.Target{}, webhook.ErrUnknownProject
			}
			return webhook.Target{Repo: scm.Repo{Owner: "octocat", Name: "Hello-World"}, Secret: secret}, nil
		},
		OnHint: func(scm.Hint) { hints.Add(1) },
	})
	if err != nil {
		return result{}, err
	}
	url, stop, err := serve(h)
	if err != nil {
		return result{}, err
	}
	defer stop()
	url += webhook.ProjectPath(project)

	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var flood atomic.Int64
	var fwg sync.WaitGroup
	for i := range flooders {
		fwg.Go(func() { floodLoop(ctx, url, i, &flood) })
	}

	b := body()
	sig := webhook.Sign(secret, b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}, Timeout: 30 * time.Second}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var accepted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range senders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-GitHub-Event", "pull_request")
				req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("%s-%d", name, i))
				req.Header.Set("X-Hub-Signature-256", sig)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode == http.StatusAccepted {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	fwg.Wait()
	close(done)
	p50, mx := percentile(lat)
	return result{name: name, rate: float64(n) / elapsed.Seconds(), p50: p50, max: mx, peakHeap: peak.Load(),
		accepted: int(accepted.Load()), flood: flood.Load()}, nil
}

// floodLoop sends what an outsider without the secret can: forged 1 MiB bodies, 25 MiB declared
// bodies, and slow senders, in turn, until ctx ends.
func floodLoop(ctx context.Context, url string, i int, count *atomic.Int64) {
	client := &http.Client{Timeout: 20 * time.Second}
	for k := 0; ctx.Err() == nil; k++ {
		count.Add(1)
		switch (i + k) % 3 {
		case 0: // a forged body at the cap
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(big))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		case 1: // 25 MiB declared
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, io.LimitReader(zeros{}, 25<<20))
			req.ContentLength = 25 << 20
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		default: // a slow sender: headers, one byte, then silence for a second
			host, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
			path = "/" + path
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
			if err != nil {
				continue
			}
			_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n"+
				"X-Hub-Signature-256: sha256=%s\r\nContent-Length: 4096\r\n\r\n{", path, strings.Repeat("0", 64))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			_ = conn.Close()
		}
	}
}

// big is the forged body every flooder sends (one copy: the bench's own heap is not the receiver's).
var big = bytes.Repeat([]byte("x"), 1<<20)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func percentile(d []time.Duration) (p50, mx time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[len(s)-1]
}
