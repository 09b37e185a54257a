package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// requestKey is one series of apiserver_request_total, reduced to what a write is.
type requestKey struct{ verb, resource, subresource string }

// requests are the API server's request counters at one moment.
type requests map[requestKey]float64

// writeVerbs are the verbs of apiserver_request_total that change something.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// apiRequests reads apiserver_request_total from the API server's /metrics.
func apiRequests(ctx context.Context, cs kubernetes.Interface) (requests, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	out := requests{}
	for _, smp := range promSamples(body, "apiserver_request_total") {
		out[requestKey{smp.labels["verb"], smp.labels["resource"], smp.labels["subresource"]}] += smp.value
	}
	return out, nil
}

// sample is one series of a Prometheus text exposition.
type sample struct {
	labels map[string]string
	value  float64
}

// promSamples returns the series of metric in a text exposition.
func promSamples(body []byte, metric string) []sample {
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		out = append(out, sample{labels: promLabels(labels), value: v})
	}
	return out
}

// promLabels parses a="x",b="y" (values without commas or escaped quotes, as here).
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// writes is after minus before, writes only, by resource[/subresource] and verb.
func writes(before, after requests) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if !writeVerbs[k.verb] {
			continue
		}
		if d := v - before[k]; d > 0 {
			name := k.resource
			if k.subresource != "" {
				name += "/" + k.subresource
			}
			out[name+" "+k.verb] += d
		}
	}
	return out
}

// shepherdStored splits the writes of a sessions run (writes' keys, "resource[/sub] VERB") as
// the envtest "Stored writes per session" counts them: the session's own objects that Shepherd
// writes (the session's status, its Worktree and the Worktree's status, its pod's creation), and
// the events. The creating client's session, the scheduler's binding, KWOK's pod status, the
// simulated kubelet's TokenRequest and the Project's amortized writes are left out.
func shepherdStored(w map[string]float64) (own, events float64) {
	for k, v := range w {
		res, verb, _ := strings.Cut(k, " ")
		switch {
		case res == "events":
			events += v
		case res == "agentsessions/status", res == "worktrees", res == "worktrees/status", res == "pods" && verb == "POST":
			own += v
		}
	}
	return own, events
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// managerWrites reads the manager's shepherd_api_writes_total, summed.
func managerWrites(ctx context.Context, metricsURL string) (float64, map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	by := map[string]float64{}
	var sum float64
	for _, smp := range promSamples(body, "shepherd_api_writes_total") {
		l := smp.labels
		name := l["kind"] + " " + l["verb"]
		if l["subresource"] != "" {
			name = l["kind"] + "/" + l["subresource"] + " " + l["verb"]
		}
		by[name] += smp.value
		sum += smp.value
	}
	return sum, by, nil
}

// procStats are a process's peak RSS and CPU time, from /proc.
type procStats struct {
	peakRSS int64 // bytes
	cpu     time.Duration
}

func readProc(pid int) (procStats, error) {
	var st procStats
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kb int64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			st.peakRSS = kb << 10
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) > 13 {
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		st.cpu = time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
	}
	return st, nil
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func sortDurations(d []time.Duration) []time.Duration {
	out := append([]time.Duration(nil), d...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// components are the processes whose CPU time a run reports, by their /proc comm (the kernel
// cuts it to 15 bytes): the local cluster's control plane, KWOK, and this benchmark (its
// creating client, informers and simulated runners). The manager is read from its own pid.
var components = []struct{ name, comm string }{
	{"kube-apiserver", "kube-apiserver"},
	{"etcd", "etcd"},
	{"kube-scheduler", "kube-scheduler"},
	{"kube-controller-manager", "kube-controller"},
	{"kwok", "kwok"},
}

// benchmarkComponent is this process's entry in a cpuSample.
const benchmarkComponent = "benchmark (clients, runners)"

// cpuSample is each component's CPU time at one moment.
type cpuSample map[string]time.Duration

// sampleCPU reads the CPU time of every component's processes and of this one.
func sampleCPU() cpuSample {
	out := cpuSample{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		for _, c := range components {
			if strings.TrimSpace(string(comm)) == c.comm {
				if st, err := readProc(pid); err == nil {
					out[c.name] += st.cpu
				}
			}
		}
	}
	if st, err := readProc(os.Getpid()); err == nil {
		out[benchmarkComponent] = st.cpu
	}
	return out
}

// cpuSince is each component's CPU time since before.
func cpuSince(before cpuSample) cpuSample {
	out := cpuSample{}
	for k, v := range sampleCPU() {
		out[k] = v - before[k]
	}
	return out
}

// orderCorrelation is Spearman's rank correlation between the order objects were created in
// and the order they got there (done[i]: object i's time, zero when it never did; those are
// left out): 1 when they got there in creation order, 0 when the order is unrelated.
func orderCorrelation(done []time.Time) float64 {
	idx := make([]int, 0, len(done))
	for i, t := range done {
		if !t.IsZero() {
			idx = append(idx, i)
		}
	}
	n := len(idx)
	if n < 2 {
		return 1
	}
	byTime := append([]int(nil), idx...)
	sort.SliceStable(byTime, func(a, b int) bool { return done[byTime[a]].Before(done[byTime[b]]) })
	rank := make(map[int]int, n)
	for r, i := range byTime {
		rank[i] = r
	}
	var d2 float64
	for r, i := range idx { // idx is in creation order
		d := float64(r - rank[i])
		d2 += d * d
	}
	nf := float64(n)
	return 1 - 6*d2/(nf*(nf*nf-1))
}
