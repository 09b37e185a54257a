package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// Pod builders are pure: the same inputs give the same pod, so the reconcilers compare and never
// drift. Every pod meets the restricted Pod Security Standard: non-root, no privilege
// escalation, all capabilities dropped, the runtime's default seccomp profile, and no API token.

// podUser is the uid and gid agent and worktree pods run as; fsGroup makes volumes writable.
const podUser int64 = 65532

// tokenExpiry is the life of the projected runner token; the kubelet renews it at 80%.
const tokenExpiry int64 = 3600

// checkoutVolume says which volume holds a Worktree's checkout and where.
type checkoutVolume struct {
	ClaimName string
	Mode      agentsv1alpha1.WorkspaceMode
	Path      string
}

// worktreeVolume is where a Worktree's checkout lives: the Project's workspace volume in worktree
// mode, the Worktree's own claim in clone mode.
func worktreeVolume(project string, wt *agentsv1alpha1.Worktree, mode agentsv1alpha1.WorkspaceMode) checkoutVolume {
	if mode == agentsv1alpha1.WorkspaceClone {
		return checkoutVolume{ClaimName: checkoutClaimName(wt.Name), Mode: mode, Path: checkoutPath(mode, wt.Name)}
	}
	return checkoutVolume{ClaimName: workspaceClaimName(project), Mode: mode, Path: checkoutPath(mode, wt.Name)}
}

// sharedCache says where a checkout's shared paths (spec.workspace.sharedPaths) live: the
// directory "shared" on the Project's workspace volume, the volume that holds the mirror and
// every worktree. In worktree mode that volume is already the checkout's, at workspaceMount; in
// clone mode it is mounted as a second volume at projectMount (claim is then its name). No shared
// paths: no directory.
func sharedCache(p *agentsv1alpha1.Project, mode agentsv1alpha1.WorkspaceMode) (dir, claim string) {
	if len(p.Spec.Workspace.SharedPaths) == 0 {
		return "", ""
	}
	if mode == agentsv1alpha1.WorkspaceClone {
		return projectMount + "/shared", workspaceClaimName(p.Name)
	}
	return workspaceMount + "/shared", ""
}

// baseOf is the branch, tag or commit a Worktree's branch starts from.
func baseOf(p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree) string {
	if wt.Spec.Base != "" {
		return string(wt.Spec.Base)
	}
	return projectBase(p)
}

// projectBase is the Project's default branch, which spare worktrees are checked out at (a
// session on another base claims one all the same: its branch switch writes the difference).
func projectBase(p *agentsv1alpha1.Project) string {
	if p.Spec.Repository.DefaultBranch != "" {
		return string(p.Spec.Repository.DefaultBranch)
	}
	return "main"
}

// runArgs are the agent container's runner arguments. In worktree mode the runner keeps the
// Project's spare worktrees (spec.workspace.spareWorktrees; 0 removes any left from before) once
// its agent has started.
func runArgs(p *agentsv1alpha1.Project, vol checkoutVolume) []string {
	args := []string{"run", "--workdir=" + vol.Path}
	if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
		args = append(args, "--spare-worktrees="+strconv.Itoa(int(p.Spec.Workspace.SpareWorktrees)),
			"--mirror="+mirrorPath, "--base="+projectBase(p))
	}
	return args
}

// prepareArgs are the runner's prepare flags for a Worktree.
func prepareArgs(p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume) ([]string, error) {
	base := baseOf(p, wt)
	args := []string{
		"prepare",
		"--mode=" + string(vol.Mode),
		"--path=" + vol.Path,
		"--remote-url=" + string(p.Spec.Repository.URL),
		"--branch=" + string(wt.Spec.Branch),
		"--base=" + base,
		"--adopt=" + strconv.FormatBool(wt.Spec.Adopt),
		"--result-file=/dev/termination-log",
	}
	if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
		args = append(args, "--mirror="+mirrorPath)
	}
	if len(p.Spec.Workspace.Setup) > 0 {
		raw, err := json.Marshal(p.Spec.Workspace.Setup)
		if err != nil {
			return nil, fmt.Errorf("encode setup commands: %w", err)
		}
		args = append(args, "--setup="+string(raw))
	}
	if dir, _ := sharedCache(p, vol.Mode); dir != "" {
		args = append(args, "--shared-paths="+strings.Join(p.Spec.Workspace.SharedPaths, ","), "--shared-dir="+dir)
	}
	return args, nil
}

// restrictedContainer is the container security context of the restricted standard.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		RunAsNonRoot:             ptrTo(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// basePod is what agent and worktree pods share: the runner copied into an emptyDir, the
// checkout volume, a writable home, the projected runner token, and in clone mode with shared
// paths the Project's workspace volume that holds their cache.
func (d *Deps) basePod(name, namespace string, labels map[string]string, p *agentsv1alpha1.Project, vol checkoutVolume) *corev1.Pod {
	pull := corev1.PullIfNotPresent
	if d.Options.ImagePullPolicy != "" {
		pull = corev1.PullPolicy(d.Options.ImagePullPolicy)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName:           agentServiceAccountName(p.Name),
			AutomountServiceAccountToken: ptrTo(false),
			EnableServiceLinks:           ptrTo(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptrTo(true),
				RunAsUser:    ptrTo(podUser),
				RunAsGroup:   ptrTo(podUser),
				FSGroup:      ptrTo(podUser),
				// Only a volume whose root is not already ours is walked: a large mirror would
				// otherwise be re-chowned on every pod start.
				FSGroupChangePolicy: ptrTo(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            "copy-runner",
				Image:           d.Options.RunnerImage,
				ImagePullPolicy: pull,
				Args:            []string{"copy-self", "--to=" + runnerBinary},
				VolumeMounts:    []corev1.VolumeMount{{Name: "shepherd-bin", MountPath: binMount}},
				SecurityContext: restrictedContainer(),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "shepherd-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vol.ClaimName}}},
				{Name: "runner-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: runnerapi.Audience, ExpirationSeconds: ptrTo(tokenExpiry), Path: "token",
					}}},
				}}},
			},
		},
	}
	if _, claim := sharedCache(p, vol.Mode); claim != "" {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: projectVolume,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	if sc := p.Spec.Scheduling; sc != nil {
		if len(sc.NodeSelector) > 0 {
			pod.Spec.NodeSelector = make(map[string]string, len(sc.NodeSelector))
			maps.Copy(pod.Spec.NodeSelector, sc.NodeSelector)
		}
		pod.Spec.Tolerations = slices.Clone(sc.Tolerations)
		pod.Spec.PriorityClassName = sc.PriorityClassName
	}
	return pod
}

// projectVolume names the Project's workspace volume in a clone-mode pod that mounts it.
const projectVolume = "project-workspace"

// runnerMounts are the mounts of a container that runs the copied runner.
func runnerMounts(pod *corev1.Pod) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: "shepherd-bin", MountPath: binMount, ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "workspace", MountPath: workspaceMount},
		{Name: "runner-token", MountPath: tokenMount, ReadOnly: true},
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == projectVolume {
			mounts = append(mounts, corev1.VolumeMount{Name: projectVolume, MountPath: projectMount})
		}
	}
	return mounts
}

// runnerEnv is the environment of a container that runs the copied runner.
// HOME is on the workspace volume, one per session, because agents keep their conversations
// there (Claude Code and OpenCode under ~/.local, ~/.claude): a restored pod resumes the same
// conversation only if its home survived. The runner creates it on first use.
func (d *Deps) runnerEnv(home string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "HOME", Value: home},
		{Name: "SHEPHERD_MANAGER_URL", Value: d.Options.RunnerURL},
		{Name: "SHEPHERD_TOKEN_FILE", Value: tokenFile},
	}
}

// agentImage is the image in effect: the session's, the Project's, or the manager's default for
// the agent type.
func (d *Deps) agentImage(agent agentsv1alpha1.AgentSpec) string {
	if agent.Image != "" {
		return agent.Image
	}
	return d.Options.AgentImages[agent.Type]
}

// agentEnv is the agent container's environment: plain values, then Secret references. Secret
// values never appear in the pod spec.
func agentEnv(agent agentsv1alpha1.AgentSpec) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, e := range agent.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, c := range agent.Credentials {
		env = append(env, corev1.EnvVar{Name: c.EnvName, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.SecretRef.Name}, Key: c.SecretRef.Key,
		}}})
	}
	sort.SliceStable(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	return env
}

// agentResources converts the API's resources.
func agentResources(r *agentsv1alpha1.ResourceRequirements) corev1.ResourceRequirements {
	out := userResources(r)
	defaultRequests(&out)
	return out
}

// userResources converts what the Project or session asked for.
func userResources(r *agentsv1alpha1.ResourceRequirements) corev1.ResourceRequirements {
	var out corev1.ResourceRequirements
	if r == nil {
		return out
	}
	conv := func(l agentsv1alpha1.ResourceList) corev1.ResourceList {
		m := corev1.ResourceList{}
		if l.CPU != nil {
			m[corev1.ResourceCPU] = *l.CPU
		}
		if l.Memory != nil {
			m[corev1.ResourceMemory] = *l.Memory
		}
		if l.EphemeralStorage != nil {
			m[corev1.ResourceEphemeralStorage] = *l.EphemeralStorage
		}
		if len(m) == 0 {
			return nil
		}
		return m
	}
	out.Requests, out.Limits = conv(r.Requests), conv(r.Limits)
	return out
}

// The requests of an agent's containers when neither the Project nor the session names them: an
// agent CLI and git. Without a request a pod runs at the lowest CPU weight (its checkout and its
// agent wait behind every other process on a busy node) and is the first evicted under memory
// pressure.
var (
	defaultAgentCPU    = resource.MustParse("250m")
	defaultAgentMemory = resource.MustParse("512Mi")
)

// defaultRequests fills the CPU and memory requests left unset, never above a limit that is set.
func defaultRequests(r *corev1.ResourceRequirements) {
	for name, def := range map[corev1.ResourceName]resource.Quantity{corev1.ResourceCPU: defaultAgentCPU, corev1.ResourceMemory: defaultAgentMemory} {
		if _, ok := r.Requests[name]; ok {
			continue
		}
		v := def
		if lim, ok := r.Limits[name]; ok && lim.Cmp(v) < 0 {
			v = lim
		}
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[name] = v
	}
}

// mergeAgent applies a session's overrides to the Project's agent defaults.
func mergeAgent(base agentsv1alpha1.AgentSpec, o *agentsv1alpha1.AgentSpec) agentsv1alpha1.AgentSpec {
	out := *base.DeepCopy()
	if o == nil {
		return out
	}
	if o.Type != "" && o.Type != base.Type {
		// Another agent: the Project's image and model were chosen for its type.
		out.Type, out.Image, out.Model = o.Type, "", ""
	}
	if o.Image != "" {
		out.Image = o.Image
	}
	if o.Model != "" {
		out.Model = o.Model
	}
	if o.PermissionMode != "" {
		out.PermissionMode = o.PermissionMode
	}
	out.Credentials = mergeByKey(out.Credentials, o.Credentials, func(c agentsv1alpha1.AgentCredential) string { return c.EnvName })
	out.Env = mergeByKey(out.Env, o.Env, func(e agentsv1alpha1.EnvVar) string { return e.Name })
	if len(o.ExtraArgs) > 0 {
		out.ExtraArgs = append([]string(nil), o.ExtraArgs...)
	}
	if o.ExtraInstructions != "" {
		out.ExtraInstructions = o.ExtraInstructions
	}
	if o.Resources != nil {
		out.Resources = o.Resources.DeepCopy()
	}
	return out
}

func mergeByKey[T any](base, over []T, key func(T) string) []T {
	out := append([]T(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if key(out[i]) == key(o) {
				out[i], replaced = o, true
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}

// worktreePod prepares (or removes) a Worktree's checkout when no session pod does it. It runs
// the runner in the Project's agent image, so setup commands find the agent's toolchain.
func (d *Deps) worktreePod(p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume, op string) (*corev1.Pod, error) {
	labels := mergeLabels(managedLabels(p.Name), map[string]string{
		agentsv1alpha1.LabelWorktree: wt.Name, agentsv1alpha1.LabelComponent: componentWorktree,
	})
	pod := d.basePod(worktreePodName(wt.Name), wt.Namespace, labels, p, vol)
	pod.Annotations = map[string]string{annotationOperation: op, annotationGeneration: strconv.FormatInt(wt.Generation, 10)}
	if req := wt.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]; req != "" {
		pod.Annotations[agentsv1alpha1.ReconcileRequestAnnotation] = req
	}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	var args []string
	switch op {
	case operationRemove:
		args = []string{"remove", "--mode=" + string(vol.Mode), "--path=" + vol.Path}
		if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
			args = append(args, "--mirror="+mirrorPath)
		}
	default:
		var err error
		if args, err = prepareArgs(p, wt, vol); err != nil {
			return nil, err
		}
	}
	pull := pod.Spec.InitContainers[0].ImagePullPolicy
	pod.Spec.Containers = []corev1.Container{{
		Name:                     op,
		Image:                    d.agentImage(p.Spec.Agent),
		ImagePullPolicy:          pull,
		Command:                  []string{runnerBinary},
		Args:                     args,
		Env:                      d.runnerEnv(homePath("worktree-" + wt.Name)),
		VolumeMounts:             runnerMounts(pod),
		SecurityContext:          restrictedContainer(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources:                agentResources(p.Spec.Agent.Resources),
	}}
	return pod, nil
}

// Annotations on worktree pods.
const (
	annotationOperation  = "agents.shepherd.dev/operation"
	annotationGeneration = "agents.shepherd.dev/generation"
	operationPrepare     = "prepare"
	operationRemove      = "remove"
)

// agentPod runs one session's agent: copy the runner in, prepare the checkout (in the agent
// image, so setup commands find its toolchain), then run the agent under the runner.
func (d *Deps) agentPod(sess *agentsv1alpha1.AgentSession, p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume, agent agentsv1alpha1.AgentSpec) (*corev1.Pod, error) {
	labels := mergeLabels(managedLabels(p.Name), map[string]string{
		agentsv1alpha1.LabelSession: sess.Name, agentsv1alpha1.LabelWorktree: wt.Name, componentLabel: componentAgent,
	})
	pod := d.basePod(agentPodName(sess.Name), sess.Namespace, labels, p, vol)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	// The runner stops the agent on SIGTERM within its stop grace (10s) and reports; leave room.
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(30))
	args, err := prepareArgs(p, wt, vol)
	if err != nil {
		return nil, err
	}
	image := d.agentImage(agent)
	pull := pod.Spec.InitContainers[0].ImagePullPolicy
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name:                     containerPrepare,
		Image:                    image,
		ImagePullPolicy:          pull,
		Command:                  []string{runnerBinary},
		Args:                     args,
		Env:                      d.runnerEnv(homePath(sess.Name)),
		VolumeMounts:             runnerMounts(pod),
		SecurityContext:          restrictedContainer(),
		Resources:                agentResources(agent.Resources),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	})
	pod.Spec.Containers = []corev1.Container{{
		Name:                     containerAgent,
		Image:                    image,
		ImagePullPolicy:          pull,
		Command:                  []string{runnerBinary},
		Args:                     runArgs(p, vol),
		WorkingDir:               vol.Path,
		Env:                      append(append(d.runnerEnv(homePath(sess.Name)), gitIdentity(sess.Name)...), agentEnv(agent)...),
		VolumeMounts:             runnerMounts(pod),
		SecurityContext:          restrictedContainer(),
		Resources:                agentResources(agent.Resources),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	return pod, nil
}

// homePath is a home directory on the workspace volume.
func homePath(name string) string { return workspaceMount + "/homes/" + name }

// gitIdentity names the commits an agent makes; a Project's agent.env may override it. git
// refuses to commit with the identity it would guess in a container.
func gitIdentity(session string) []corev1.EnvVar {
	email := session + "@agents.shepherd.dev"
	return []corev1.EnvVar{
		{Name: "GIT_AUTHOR_NAME", Value: "Shepherd agent (" + session + ")"},
		{Name: "GIT_AUTHOR_EMAIL", Value: email},
		{Name: "GIT_COMMITTER_NAME", Value: "Shepherd agent (" + session + ")"},
		{Name: "GIT_COMMITTER_EMAIL", Value: email},
	}
}
