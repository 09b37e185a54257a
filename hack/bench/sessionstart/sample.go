package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// The groups of samples.
const (
	groupShepherdCold = "Shepherd, cold"
	groupShepherdWarm = "Shepherd, warm"
	// groupShepherdSpare: warm, on a Project with spec.workspace.spareWorktrees: the prepare step
	// claims the spare worktree the previous session's runner made.
	groupShepherdSpare = "Shepherd, spare"
	groupHandCold      = "by hand, cold"
	groupHandWarm      = "by hand, warm"
	groupPodStart      = "bare pod start"
)

// Container names in the agent pods Shepherd makes (internal/controller/names.go); the
// baselines' pods name their agent container the same.
const (
	// shepherdRunner is the runner's sidecar: it runs the whole pod long, makes the volume ready
	// before the checkout step (its startup probe), and prints the agent's output.
	shepherdRunner  = "runner"
	shepherdPrepare = "prepare"
	shepherdAgent   = "agent"
)

// sample is one start, every time relative to the create call (t0).
type sample struct {
	group, name string
	t0          time.Time
	// agent: the agent's first line of output, as the container runtime stamped it.
	agent time.Duration
	// working: the session seen Working (Shepherd only; 0 otherwise).
	working time.Duration
	// created, scheduled, running: the pod created, bound to the node, its agent container
	// reported running, as a watch saw them.
	created, scheduled, running time.Duration
	// rt: the sandbox and the containers, from the runtime (empty when it could not be read).
	rt runtimeTimes
	// fullFetch: Shepherd's prepare step fetched the repository whole (made the mirror).
	fullFetch *bool
	// spare: Shepherd's prepare step claimed a spare worktree.
	spare *bool
	// load is the machine's 1-minute load average when the sample started.
	load string
}

func (s sample) summary() string {
	out := fmt.Sprintf("%-15s %-12s agent running %6.2fs", s.group, s.name, s.agent.Seconds())
	if s.working > 0 {
		out += fmt.Sprintf(", Working %6.2fs", s.working.Seconds())
	}
	out += fmt.Sprintf("  (pod %.2fs, scheduled %.2fs", s.created.Seconds(), s.scheduled.Seconds())
	if !s.rt.sandbox.IsZero() {
		out += fmt.Sprintf(", sandbox %.2fs", since(s.t0, s.rt.sandbox).Seconds())
	}
	for _, c := range s.rt.containers {
		if c.finished.IsZero() {
			out += fmt.Sprintf(", %s from %.2fs", c.name, since(s.t0, c.started).Seconds())
			continue
		}
		out += fmt.Sprintf(", %s %.2fs-%.2fs", c.name, since(s.t0, c.started).Seconds(), since(s.t0, c.finished).Seconds())
	}
	out += ") load " + s.load
	if s.spare != nil && *s.spare {
		out += " spare"
	}
	if s.fullFetch != nil {
		out += fmt.Sprintf(" fullFetch=%v", *s.fullFetch)
	}
	return out
}

// since is t relative to t0, 0 when t is unknown.
func since(t0, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(t0)
}

// fill sets the pod's marks from what the watch saw, and reads the runtime's times.
func (b *bench) fill(ctx context.Context, s *sample, pt podTimes) {
	s.created, s.scheduled, s.running = since(s.t0, pt.created), since(s.t0, pt.scheduled), since(s.t0, pt.running)
	if b.cri == nil || pt.last == nil {
		return
	}
	rt, err := b.cri.read(ctx, pt.last)
	if err != nil {
		b.line("(no runtime times for %s: %v)", pt.name, err)
		return
	}
	s.rt = rt
}

// agentLine waits for the agent's first line of output in the container's log (the fake Claude
// Code's init event) and returns the container runtime's timestamp of it.
func (b *bench) agentLine(ctx context.Context, pod, container string) (time.Time, error) {
	var lastErr error
	for {
		raw, err := b.env.cs.CoreV1().Pods(b.o.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true}).DoRaw(ctx)
		if err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				ts, text, ok := strings.Cut(line, " ")
				// The CLI's own init event (a bare pod), or the runner's transcript line for it.
				if !ok || !strings.Contains(text, `"subtype":"init"`) && !strings.Contains(text, " · conversation ") {
					continue
				}
				t, err := time.Parse(time.RFC3339Nano, ts)
				if err != nil {
					return time.Time{}, fmt.Errorf("log timestamp %q: %w", ts, err)
				}
				return t, nil
			}
		} else {
			lastErr = err
		}
		pause(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			err := fmt.Errorf("no init event in the log of %s/%s: %w", pod, container, ctx.Err())
			if lastErr != nil {
				err = fmt.Errorf("%w (reading the log: %w)", err, lastErr)
			}
			return time.Time{}, err
		}
	}
}

// sessionSample creates an AgentSession on project and measures it until the agent runs and the
// session is Working.
func (b *bench) sessionSample(ctx context.Context, group, project, name string) (sample, error) {
	s := sample{group: group, name: name, load: load1()}
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	key := client.ObjectKey{Namespace: b.o.namespace, Name: name}
	phases := scenario.WatchPhases(ctx, b.env.cl, key, nil)
	sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	sess.Spec.ProjectRef = agentsv1alpha1.LocalObjectReference{Name: project}
	sess.Spec.Prompt = "Benchmark: start in the checkout and wait."
	s.t0 = time.Now()
	if err := b.env.cl.Create(ctx, sess); err != nil {
		return s, fmt.Errorf("create AgentSession: %w", err)
	}
	t, err := phases.WaitFor(ctx, 0, b.o.timeout, agentsv1alpha1.PhaseWorking)
	if err != nil {
		return s, fmt.Errorf("%w\n%s", err, b.podState(name+"-agent"))
	}
	s.working = t.At.Sub(s.t0)
	podName := name + "-agent"
	match := func(p *podTimes) bool {
		return p.labels[agentsv1alpha1.LabelSession] == name && p.labels[agentsv1alpha1.LabelComponent] == "agent"
	}
	pt, err := b.pods.waitFor(ctx, match, func(p podTimes) bool { return !p.running.IsZero() })
	if err != nil {
		return s, fmt.Errorf("the agent container of %s never seen running: %w", podName, err)
	}
	podName = pt.name
	// The runner prints what the agent's CLI prints (the agent's container runs the host).
	at, err := b.agentLine(ctx, podName, shepherdRunner)
	if err != nil {
		return s, err
	}
	s.agent = at.Sub(s.t0)
	// The runner starts the agent on the checkout step's word, which comes before the kubelet's
	// (its status of the step's end): wait for that, for the step's result and times.
	stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if done, err := b.pods.waitFor(stepCtx, match, func(p podTimes) bool {
		full, _ := prepareResult(p.last)
		return full != nil
	}); err == nil {
		pt = done
	} else {
		pt, _ = b.pods.find(match)
	}
	cancel()
	b.fill(ctx, &s, pt)
	s.fullFetch, s.spare = prepareResult(pt.last)
	return s, nil
}

// prepareResult reads the prepare step's result (its termination message, as the controller
// does): whether it fetched the repository whole, and whether it claimed a spare worktree.
func prepareResult(pod *corev1.Pod) (fullFetch, spare *bool) {
	if pod == nil {
		return nil, nil
	}
	// Beside the agent's container; an init container in pods of older managers.
	for _, st := range append(slices.Clone(pod.Status.ContainerStatuses), pod.Status.InitContainerStatuses...) {
		if st.Name != shepherdPrepare || st.State.Terminated == nil {
			continue
		}
		var res struct {
			Path      string `json:"path"`
			FullFetch bool   `json:"fullFetch"`
			Spare     bool   `json:"spare"`
		}
		if json.Unmarshal([]byte(st.State.Terminated.Message), &res) != nil || res.Path == "" {
			return nil, nil
		}
		return &res.FullFetch, &res.Spare
	}
	return nil, nil
}

// podState describes a pod for an error message.
func (b *bench) podState(name string) string {
	pt, ok := b.pods.find(byName(name))
	if !ok || pt.last == nil {
		return "(pod " + name + " not seen)"
	}
	raw, _ := json.MarshalIndent(pt.last.Status, "", "  ")
	return "pod " + name + " status: " + string(raw)
}

// endSession ends a measured session before the next sample: by default it stops it (the agent
// pod goes, the Worktree and its checkout stay); with -between=delete it deletes it and waits
// until its Worktree's finalizer removed the checkout. Either way it waits until nothing of the
// session runs, so that the next sample starts on a quiet node.
func (b *bench) endSession(ctx context.Context, name string) error {
	if b.o.between == "delete" {
		return b.deleteSession(ctx, name)
	}
	sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	patch := []byte(`{"spec":{"state":"` + string(agentsv1alpha1.SessionStopped) + `"}}`)
	if err := b.env.cl.Patch(ctx, sess, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("stop AgentSession %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := b.env.cl.List(ctx, &pods, client.InNamespace(b.o.namespace), client.MatchingLabels{agentsv1alpha1.LabelWorktree: name}); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the pods of session %s still there 5m after it was stopped: %w", name, err)
	}
	return nil
}

// deleteSession deletes a session and waits until its pod, its Worktree (whose finalizer removes
// the checkout with a pod of its own) and that pod are gone.
func (b *bench) deleteSession(ctx context.Context, name string) error {
	sess := &agentsv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	if err := b.env.cl.Delete(ctx, sess, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete AgentSession %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range []client.Object{&agentsv1alpha1.AgentSession{}, &agentsv1alpha1.Worktree{}} {
			if err := b.env.cl.Get(ctx, client.ObjectKey{Namespace: b.o.namespace, Name: name}, o); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		var pods corev1.PodList
		if err := b.env.cl.List(ctx, &pods, client.InNamespace(b.o.namespace), client.MatchingLabels{agentsv1alpha1.LabelWorktree: name}); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("session %s, its Worktree or their pods still there after 5m: %w", name, err)
	}
	return nil
}

// The baselines' pods: the same image, security context and volumes as Shepherd's agent pods,
// and the same git work, with nothing of Shepherd in between.

const handMount = "/data"

func restricted() *corev1.SecurityContext {
	f := false
	t := true
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f, RunAsNonRoot: &t,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// handPod is a pod like Shepherd's agent pods (uid 65532, fsGroup, restricted, no API token, a
// /tmp emptyDir) whose init containers are inits and whose container runs the fake Claude Code in
// workdir. claim, when set, is mounted at /data.
func (b *bench) handPod(name, claim string, inits []corev1.Container, workdir string) *corev1.Pod {
	uid, no, yes, grace := int64(65532), false, true, int64(2)
	change := corev1.FSGroupChangeOnRootMismatch
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if claim != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "data", MountPath: handMount})
		volumes = append(volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	// The same CPU request as the Projects' agents (their prepare and agent containers).
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: b.o.cpu.DeepCopy()}}
	for i := range inits {
		inits[i].Image, inits[i].ImagePullPolicy = testAgentImage, corev1.PullIfNotPresent
		inits[i].VolumeMounts, inits[i].SecurityContext, inits[i].Resources = mounts, restricted(), res
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace, Labels: map[string]string{"bench.shepherd.dev/baseline": "true"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid, FSGroupChangePolicy: &change,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: inits,
			Containers: []corev1.Container{{
				Name: shepherdAgent, Image: testAgentImage, ImagePullPolicy: corev1.PullIfNotPresent,
				// The command line the runner gives Claude Code (internal/agent/claudecode), the
				// prompt as an argument.
				Command:         []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions", "Benchmark: start in the checkout and wait."},
				WorkingDir:      workdir,
				Env:             []corev1.EnvVar{{Name: "FAKEAGENT_SCENARIO_JSON", Value: agentScenario}},
				VolumeMounts:    mounts,
				SecurityContext: restricted(),
				Resources:       res,
			}},
			Volumes: volumes,
		},
	}
}

// gitArgs are the git settings Shepherd's runner uses for every command (internal/workspace):
// parallel checkout with one worker per CPU.
func gitArgs(args ...string) []string {
	return append([]string{"git", "-c", "checkout.workers=0"}, args...)
}

// handSample creates pod (and nothing else) and measures it until the agent's first output.
func (b *bench) handSample(ctx context.Context, group string, pod *corev1.Pod) (sample, error) {
	s := sample{group: group, name: pod.Name, load: load1()}
	ctx, cancel := context.WithTimeout(ctx, b.o.timeout)
	defer cancel()
	s.t0 = time.Now()
	if err := b.env.cl.Create(ctx, pod); err != nil {
		return s, fmt.Errorf("create pod: %w", err)
	}
	pt, err := b.pods.waitFor(ctx, byName(pod.Name), func(p podTimes) bool { return !p.running.IsZero() })
	if err != nil {
		return s, fmt.Errorf("%w\n%s", err, b.podState(pod.Name))
	}
	if pt.last != nil && pt.last.Status.Phase == corev1.PodFailed {
		return s, fmt.Errorf("pod failed: %s", b.podState(pod.Name))
	}
	at, err := b.agentLine(ctx, pod.Name, shepherdAgent)
	if err != nil {
		return s, fmt.Errorf("%w\n%s", err, b.podState(pod.Name))
	}
	s.agent = at.Sub(s.t0)
	pt, _ = b.pods.find(byName(pod.Name))
	b.fill(ctx, &s, pt)
	return s, nil
}

// podStartSample: a pod that only starts the agent, no volume: the node's own pod-start latency.
func (b *bench) podStartSample(ctx context.Context, name string) (sample, error) {
	return b.handSample(ctx, groupPodStart, b.handPod(name, "", nil, "/tmp"))
}

// handColdSample: on a new volume (a claim of the default class, like a Project's), `git clone
// --mirror` then `git worktree add`, then the agent in the checkout. The claim is created before
// the clock starts, as a Project's is before its first session.
func (b *bench) handColdSample(ctx context.Context, name string) (sample, error) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}
	if err := b.env.cl.Create(ctx, pvc); err != nil {
		return sample{group: groupHandCold, name: name}, fmt.Errorf("create claim: %w", err)
	}
	wt := handMount + "/worktrees/" + name
	pod := b.handPod(name, name, []corev1.Container{
		{Name: "mirror", Command: gitArgs("clone", "--mirror", "--quiet", "--", b.plainURL, handMount+"/mirror.git")},
		{Name: "checkout", Command: gitArgs("--git-dir="+handMount+"/mirror.git", "worktree", "add", "--quiet", "-b", name, wt, "main")},
	}, wt)
	return b.handSample(ctx, groupHandCold, pod)
}

// handWarmSample: `git worktree add` from the mirror a cold sample by hand left on its volume,
// then the agent in the checkout.
func (b *bench) handWarmSample(ctx context.Context, name, claim string) (sample, error) {
	wt := handMount + "/worktrees/" + name
	pod := b.handPod(name, claim, []corev1.Container{
		{Name: "checkout", Command: gitArgs("--git-dir="+handMount+"/mirror.git", "worktree", "add", "--quiet", "-b", name, wt, "main")},
	}, wt)
	return b.handSample(ctx, groupHandWarm, pod)
}

// deletePod deletes a baseline pod and waits until it is gone.
func (b *bench) deletePod(ctx context.Context, name string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	if err := b.env.cl.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := b.env.cl.Get(ctx, client.ObjectKey{Namespace: b.o.namespace, Name: name}, &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s still there after 2m: %w", name, err)
	}
	return nil
}

// gitInImage asks a running baseline pod for the image's git version.
func (b *bench) gitInImage(ctx context.Context, pod string) string {
	out, err := b.kubectl(ctx, nil, "-n", b.o.namespace, "exec", pod, "-c", "agent", "--", "git", "version")
	if err != nil {
		return "unknown (" + lastLines(err.Error(), 1) + ")"
	}
	return strings.TrimPrefix(strings.TrimSpace(out), "git version ")
}
