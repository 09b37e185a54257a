package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// percentile is the nearest-rank percentile p (0–100) of ds: with fewer than 100 samples, p99 is
// the largest.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// stats of one measure over one group's samples.
type stats struct {
	n                  int
	p50, p99, min, max time.Duration
}

func statsOf(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	return stats{n: len(ds), p50: percentile(ds, 50), p99: percentile(ds, 99), min: slices.Min(ds), max: slices.Max(ds)}
}

func (b *bench) group(name string) []sample {
	var out []sample
	for _, s := range b.samples {
		if s.group == name {
			out = append(out, s)
		}
	}
	return out
}

func collect(ss []sample, f func(sample) (time.Duration, bool)) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if d, ok := f(s); ok {
			out = append(out, d)
		}
	}
	return out
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// step is one part of the breakdown: a duration computed from a sample, when it applies.
type step struct {
	name string
	of   func(sample) (time.Duration, bool)
}

func positive(d time.Duration) (time.Duration, bool) { return d, d > 0 }

// roles of a pod's containers, by name: the agent's; Shepherd's runner sidecar; every other one
// makes the checkout (Shepherd's prepare, beside the agent's container; the baselines' git, an
// init container before it). The runtime's times are sorted by start.
func (s sample) agentContainer() (containerTimes, bool) {
	for _, c := range s.rt.containers {
		if c.name == shepherdAgent {
			return c, true
		}
	}
	return containerTimes{}, false
}

// checkoutContainers are the containers that make the checkout.
func (s sample) checkoutContainers() []containerTimes {
	var out []containerTimes
	for _, c := range s.rt.containers {
		if c.name != shepherdAgent && c.name != shepherdRunner {
			out = append(out, c)
		}
	}
	return out
}

// checkoutRun sums the running time of the containers that make the checkout.
func (s sample) checkoutRun() (time.Duration, bool) {
	var d time.Duration
	found := false
	for _, c := range s.checkoutContainers() {
		if !c.finished.IsZero() {
			d += c.finished.Sub(c.started)
			found = true
		}
	}
	return d, found
}

// agentReady is when the agent could start: its container started and the checkout ended.
func (s sample) agentReady() (time.Time, bool) {
	a, ok := s.agentContainer()
	if !ok {
		return time.Time{}, false
	}
	at := a.started
	for _, c := range s.checkoutContainers() {
		if c.finished.After(at) {
			at = c.finished
		}
	}
	return at, true
}

// The breakdown telescopes: the steps from "pod created" to "first output" add up to the time
// to the agent's first output (each step's p50 need not add up to the total's p50; Shepherd's
// checkout step and agent container start together, so there the kubelet's hand-off is none).
var steps = []step{
	{"create call → pod created (controllers; by hand: the API)", func(s sample) (time.Duration, bool) { return positive(s.created) }},
	{"pod created → scheduled (scheduler; new volume: provisioning)", func(s sample) (time.Duration, bool) {
		return s.scheduled - s.created, s.scheduled > 0
	}},
	{"scheduled → sandbox created (kubelet: admission, volume mounts)", func(s sample) (time.Duration, bool) {
		return since(s.t0, s.rt.sandbox) - s.scheduled, !s.rt.sandbox.IsZero() && s.scheduled > 0
	}},
	{"sandbox → first container started (pod network, container create)", func(s sample) (time.Duration, bool) {
		if len(s.rt.containers) == 0 || s.rt.sandbox.IsZero() {
			return 0, false
		}
		return s.rt.containers[0].started.Sub(s.rt.sandbox), true
	}},
	{"runner sidecar started → checkout started (the volume's mounts made ready, the postStart hook)", func(s sample) (time.Duration, bool) {
		for i := 0; i+1 < len(s.rt.containers); i++ {
			if s.rt.containers[i].name == shepherdRunner {
				return s.rt.containers[i+1].started.Sub(s.rt.containers[i].started), true
			}
		}
		return 0, false
	}},
	{"checkout running (Shepherd: prepare, waiting for the mirror's fetch first; by hand: git)", func(s sample) (time.Duration, bool) {
		return s.checkoutRun()
	}},
	{"kubelet between containers (one ends → the next starts; the sidecar: the row above)", func(s sample) (time.Duration, bool) {
		var d time.Duration
		n := 0
		for i := 1; i < len(s.rt.containers); i++ {
			prev, cur := s.rt.containers[i-1], s.rt.containers[i]
			if prev.name == shepherdRunner || prev.finished.IsZero() || cur.started.Before(prev.finished) {
				continue // started beside it, not after it
			}
			d += cur.started.Sub(prev.finished)
			n++
		}
		return d, n > 0
	}},
	{"checkout done and agent container up → agent's first output", func(s sample) (time.Duration, bool) {
		at, ok := s.agentReady()
		if !ok {
			return 0, false
		}
		return s.agent - since(s.t0, at), true
	}},
	{"agent's first output → session Working (report, status)", func(s sample) (time.Duration, bool) {
		return s.working - s.agent, s.working > 0
	}},
}

var groups = []string{groupShepherdCold, groupShepherdWarm, groupShepherdSpare, groupHandCold, groupHandWarm, groupPodStart}

func (b *bench) report(took time.Duration) {
	w := b.out
	i := b.info
	b.section("results")
	fmt.Fprintf(w, "setup\n")
	fmt.Fprintf(w, "  node        %s: kubelet %s, %s, %s, kernel %s; %s CPUs, %s (this machine: %d CPUs)\n",
		i.node, i.kubelet, i.runtime, i.osImage, i.kernel, i.nodeCPU, i.nodeMem, i.hostCPUs)
	fmt.Fprintf(w, "  kube        apiserver %s; the local cluster of hack/localcluster (one real node, no KWOK node)\n", i.server)
	fmt.Fprintf(w, "  repository  %d files at HEAD, %d commits, %.0f MB packed (test/benchrepo, the runner issue's)\n",
		b.o.spec.Files, b.o.spec.Commits, b.packMB)
	fmt.Fprintf(w, "  forge       the fake GitHub on the node's IP (git smart HTTP through the real git http-backend, loopback speed); baselines: test/gitserver on the same files\n")
	fmt.Fprintf(w, "  workspace   mode Worktree: the Project's volume (StorageClass shepherd-local, a directory on this disk) holds the mirror;\n")
	fmt.Fprintf(w, "              each session: mirror fetch + git worktree add (checkout.workers=0) in the prepare container;\n")
	fmt.Fprintf(w, "              spare: spec.workspace.spareWorktrees=%d, the prepare claims a spare worktree instead of adding one\n", b.o.spares)
	fmt.Fprintf(w, "  agent       %s: test/fakeagent as Claude Code (prints its init event, then sleeps); runner %s\n", testAgentImage, runnerImage)
	fmt.Fprintf(w, "  resources   agent pods request cpu %s (spec.agent.resources; the baselines' pods the same), no limit\n", b.o.cpu.String())
	fmt.Fprintf(w, "  git         %s in the images, %s on the host\n", i.gitImage, i.gitHost)
	fmt.Fprintf(w, "  manager     %s (%s)\n", managerImage, shortID(i.managerImage))
	fmt.Fprintf(w, "  load        average %s at the start, %s at the end (the machine is shared)\n", i.loadStart, i.loadEnd)
	ending := "stopped (pod gone, checkout kept)"
	if b.o.between == "delete" {
		ending = "deleted (checkout removed)"
	}
	fmt.Fprintf(w, "  samples     cold: %d new Projects, their first session; warm: %d sessions on one Project, one at a time, then %d\n", b.o.cold, b.o.warm, min(b.o.spares, 1)*b.o.warm)
	fmt.Fprintf(w, "              more with spare worktrees,\n")
	fmt.Fprintf(w, "              each %s before the next; page cache kept (the forge's pack stays cached)\n", ending)
	fmt.Fprintf(w, "  signal      agent running = the container runtime's timestamp of the agent's first output line (its init event, cwd = the\n")
	fmt.Fprintf(w, "              checkout); Working = a watch saw status.phase Working (runner reported Active, pod running; AgentRunning=True)\n")
	fmt.Fprintf(w, "  clock       all from the create call; one machine, one clock\n")

	fmt.Fprintf(w, "\nfrom the create call to the agent process running in a ready checkout\n")
	fmt.Fprintf(w, "  %-16s %3s %8s %8s %8s %8s   %s\n", "", "n", "p50", "p99", "min", "max", "session Working: p50 / p99")
	for _, g := range groups {
		ss := b.group(g)
		if len(ss) == 0 {
			continue
		}
		st := statsOf(collect(ss, func(s sample) (time.Duration, bool) { return s.agent, true }))
		extra := ""
		if wk := collect(ss, func(s sample) (time.Duration, bool) { return positive(s.working) }); len(wk) > 0 {
			ws := statsOf(wk)
			extra = fmt.Sprintf("%s / %s", secs(ws.p50), secs(ws.p99))
		}
		label := g
		if !strings.HasPrefix(g, "Shepherd") {
			label += " *"
		}
		fmt.Fprintf(w, "  %-16s %3d %8s %8s %8s %8s   %s\n", label, st.n, secs(st.p50), secs(st.p99), secs(st.min), secs(st.max), extra)
	}
	fmt.Fprintf(w, "  * baselines, same run, same node, same image and pod security: by hand = a bare pod whose init containers run\n")
	fmt.Fprintf(w, "    the git work themselves (cold: git clone --mirror + git worktree add on a new volume; warm: git worktree add\n")
	fmt.Fprintf(w, "    from a mirror on the volume), then the agent; bare pod start = the agent alone, no volume. p99 of fewer than\n")
	fmt.Fprintf(w, "    100 samples is the largest.\n")

	p50 := func(g string) time.Duration {
		return percentile(collect(b.group(g), func(s sample) (time.Duration, bool) { return s.agent, true }), 50)
	}
	fmt.Fprintf(w, "\nratios (p50 against p50)\n")
	ratio := func(a, c string, what string) {
		x, y := p50(a), p50(c)
		if x == 0 || y == 0 {
			return
		}
		fmt.Fprintf(w, "  %-16s / %-16s %5.2fx  (%+.2fs)  %s\n", a, c, float64(x)/float64(y), (x - y).Seconds(), what)
	}
	ratio(groupShepherdWarm, groupHandWarm, "Shepherd's overhead over the same checkout by hand")
	ratio(groupShepherdCold, groupHandCold, "Shepherd's overhead over the same clone and checkout by hand")
	ratio(groupShepherdWarm, groupPodStart, "against the node's own pod start")
	ratio(groupHandWarm, groupPodStart, "what git worktree add of this repository costs on this node")
	ratio(groupShepherdCold, groupShepherdWarm, "what the mirror saves")
	ratio(groupShepherdWarm, groupShepherdSpare, "what a spare worktree saves")
	ratio(groupShepherdSpare, groupHandWarm, "Shepherd with a spare against git worktree add by hand")
	ratio(groupShepherdSpare, groupPodStart, "Shepherd with a spare against the node's own pod start")

	fmt.Fprintf(w, "\ntarget: warm p50 <= 3s on the local node\n")
	for _, g := range []string{groupShepherdWarm, groupShepherdSpare} {
		if len(b.group(g)) == 0 {
			continue
		}
		warm := p50(g)
		verdict := "met"
		if warm > 3*time.Second {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "  %-16s %s (%s)\n", g, verdict, secs(warm))
	}

	fmt.Fprintf(w, "\nbreakdown: p50 of each step (pod created and scheduled as a watch saw them; the rest from the container runtime's\n")
	fmt.Fprintf(w, "own times, read from containerd; the steps add up to the time to the agent's first output, their p50s need not)\n")
	fmt.Fprintf(w, "  %-68s", "step")
	for _, g := range groups {
		fmt.Fprintf(w, " %15s", g)
	}
	fmt.Fprintln(w)
	for _, st := range steps {
		fmt.Fprintf(w, "  %-68s", st.name)
		for _, g := range groups {
			ds := collect(b.group(g), st.of)
			if len(ds) == 0 {
				fmt.Fprintf(w, " %15s", "-")
				continue
			}
			fmt.Fprintf(w, " %15s", secs(percentile(ds, 50)))
		}
		fmt.Fprintln(w)
	}

	var odd []string
	for _, s := range b.samples {
		switch {
		case s.group == groupShepherdCold && (s.fullFetch == nil || !*s.fullFetch):
			odd = append(odd, s.name+" did not fetch the repository whole (not a cold start?)")
		case (s.group == groupShepherdWarm || s.group == groupShepherdSpare) && (s.fullFetch == nil || *s.fullFetch):
			odd = append(odd, s.name+" fetched the repository whole (not a warm start?)")
		case s.group == groupShepherdSpare && (s.spare == nil || !*s.spare):
			odd = append(odd, s.name+" claimed no spare worktree (the previous session's runner made none?)")
		case s.group == groupShepherdWarm && s.spare != nil && *s.spare:
			odd = append(odd, s.name+" claimed a spare worktree in the phase without spares")
		}
	}
	if len(odd) == 0 {
		fmt.Fprintf(w, "\ncheck: every cold session's prepare made the mirror (fullFetch), no warm one did; every spare session claimed a spare\n")
	}
	for _, o := range odd {
		fmt.Fprintf(w, "\nwarning: %s\n", o)
	}

	fmt.Fprintf(w, "\nthe manager's own metric shepherd_session_time_to_running_seconds (creationTimestamp, whole seconds, to status.startTime):\n")
	switch {
	case b.metricsErr != nil:
		fmt.Fprintf(w, "  not read: %v\n", b.metricsErr)
	default:
		for _, c := range []string{"cold", "warm", "unknown"} {
			before, after := b.metricsBefore[c], b.metricsAfter[c]
			n := after[1] - before[1]
			if n <= 0 {
				continue
			}
			fmt.Fprintf(w, "  checkout=%-7s %3.0f sessions, mean %.2fs\n", c, n, (after[0]-before[0])/n)
		}
	}
	fmt.Fprintf(w, "\nbench-session-start: %d samples in %s\n", len(b.samples), took.Round(time.Second))
}
