package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
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
// escalation, all capabilities dropped, the runtime's default seccomp profile, a read-only root
// file system, and no API token.
//
// An agent pod has two trust domains (docs/security.md):
//
//	init  runner       (runner image, uid 65533)  native sidecar (restartPolicy Always): the token, the
//	                                              model key, the mirror; copies its binary for the agent's
//	                                              containers, serves git and the model API on the pod's
//	                                              loopback; started once the copy and the volume are ready
//	init  prepare      (agent image, uid 65532)   the checkout and the setup commands, no token
//	      agent        (agent image, uid 65532)   the agent container's host, which runs the CLI
//
// The agent's containers mount only their own checkout and home (subPath) and the mirror
// read-only; the runner's mounts the whole volume, and never runs git in what an agent wrote.

// The pod's users. They share the pod's fsGroup (podUser), so that what the runner makes for
// the agent (its directories, a spare checkout) is the agent's to write, while the token, the
// model key and the runner's own state stay where only the runner's container mounts them.
const (
	podUser    int64 = 65532
	runnerUser int64 = 65533
)

// tokenExpiry is the life of the projected runner token; the kubelet renews it at 80%.
const tokenExpiry int64 = 3600

// Ports on the pod's loopback.
const (
	runnerListen = "127.0.0.1:8737"
	hostListen   = "127.0.0.1:8738"
)

// RunnerCAConfigMap holds the CA bundle that signs the manager's runner channel certificate, in
// every namespace with agent pods (the Project controller publishes it).
const RunnerCAConfigMap = "shepherd-runner-ca"

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

// subPath is a path's place on its volume (the part below workspaceMount).
func subPath(path string) string { return strings.TrimPrefix(path, workspaceMount+"/") }

// sharedCache says where a checkout's shared paths (spec.workspace.sharedPaths) live: the
// directory "shared" on the Project's workspace volume, the volume that holds the mirror and
// every worktree. In worktree mode that volume is the checkout's, at workspaceMount; in clone
// mode it is mounted as a second volume at projectMount (claim is then its name). No shared
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

// localRemote is the checkout's origin: the runner's git endpoint on the pod's loopback, for the
// repository's path (so that `git remote -v` still names the repository).
func localRemote(p *agentsv1alpha1.Project) string {
	path := "repository.git"
	if u, err := url.Parse(string(p.Spec.Repository.URL)); err == nil && u.Path != "" {
		path = strings.TrimPrefix(u.Path, "/")
	}
	return "http://" + runnerListen + "/git/" + path
}

// runnerArgs are the runner sidecar's arguments: the volume it makes ready (the mirror in
// worktree mode, the checkout's and the home's directories), and for a session the agent's
// checkout, its state, the spares and the model proxy.
func (d *Deps) runnerArgs(p *agentsv1alpha1.Project, vol checkoutVolume, home, session string, agent *agentsv1alpha1.AgentSpec) []string {
	args := []string{"run", "--listen=" + runnerListen, "--volume-mode=" + string(vol.Mode), "--checkout-dir=" + vol.Path}
	dirs := []string{}
	if home != "" {
		dirs = append(dirs, home)
	}
	if dir, _ := sharedCache(p, vol.Mode); dir != "" {
		dirs = append(dirs, dir)
	}
	if len(dirs) > 0 {
		args = append(args, "--agent-dirs="+strings.Join(dirs, ","))
	}
	if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
		args = append(args, "--mirror="+mirrorPath)
	}
	if session == "" {
		return append(args, "--serve-only")
	}
	args = append(args, "--workdir="+vol.Path, "--agent-home="+home, "--host-addr="+hostListen, "--state-dir="+runnerStatePath(session))
	if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
		args = append(args, "--spare-worktrees="+strconv.Itoa(int(p.Spec.Workspace.SpareWorktrees)), "--base="+projectBase(p))
	}
	if m := agent.ModelAPI; m != nil {
		args = append(args, "--model-api="+string(m.API))
		if m.URL != "" {
			args = append(args, "--model-url="+string(m.URL))
		}
		if m.KeySecretRef != nil {
			args = append(args, "--model-key-file="+modelKeyMount+"/key")
		}
		if l := m.Limits; l != nil && l.MaxRequests != nil {
			args = append(args, "--model-max-requests="+strconv.FormatInt(*l.MaxRequests, 10))
		}
		if l := m.Limits; l != nil && l.MaxTokens != nil {
			args = append(args, "--model-max-tokens="+strconv.FormatInt(*l.MaxTokens, 10))
		}
		if d.Options.EgressProxyURL != "" {
			args = append(args, "--egress-proxy="+d.Options.EgressProxyURL)
		}
	}
	return args
}

// prepareArgs are the runner's prepare flags for a Worktree (the checkout step, as the agent).
func prepareArgs(p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume) ([]string, error) {
	args := []string{
		"prepare",
		"--mode=" + string(vol.Mode),
		"--path=" + vol.Path,
		"--remote-url=" + localRemote(p),
		"--branch=" + string(wt.Spec.Branch),
		"--base=" + baseOf(p, wt),
		"--adopt=" + strconv.FormatBool(wt.Spec.Adopt),
		"--runner-addr=" + runnerListen,
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

// restrictedContainer is the container security context of the restricted standard, with a
// read-only root file system, as user uid.
func restrictedContainer(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		RunAsNonRoot:             ptrTo(true),
		RunAsUser:                ptrTo(uid),
		RunAsGroup:               ptrTo(uid),
		ReadOnlyRootFilesystem:   ptrTo(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// Size limits of the pods' scratch space.
var (
	runnerTmpLimit = resource.MustParse("256Mi")
	agentTmpLimit  = resource.MustParse("2Gi")
	binLimit       = resource.MustParse("128Mi")
)

// Volume names of the pods.
const (
	volBin       = "shepherd-bin"
	volRunnerTmp = "runner-tmp"
	volAgentTmp  = "agent-tmp"
	volWorkspace = "workspace"
	volToken     = "runner-token"
	volModelKey  = "model-key"
	// projectVolume names the Project's workspace volume in a clone-mode pod that mounts it.
	projectVolume = "project-workspace"
)

// modelKeyMount is where the runner's container finds the model API key.
const modelKeyMount = "/var/run/secrets/shepherd-model"

// basePod is what agent and worktree pods share: the runner binary's copy, scratch space per
// trust domain, the checkout volume, the runner's token and CA (and the model key, for a
// session), and the runner's sidecar. The caller adds the agent's containers.
func (d *Deps) basePod(name, namespace string, labels map[string]string, p *agentsv1alpha1.Project, vol checkoutVolume, runnerArgs []string, agent *agentsv1alpha1.AgentSpec) *corev1.Pod {
	pull := d.pullPolicy()
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
			Volumes: d.baseVolumes(p, vol, agent),
		},
	}
	always := corev1.ContainerRestartPolicyAlways
	// The runner first copies itself (and the agent's git configuration) for the agent's
	// containers, then serves: one container less to start in a row (each start after another
	// costs the kubelet up to a second).
	runnerArgs = append(runnerArgs, "--copy-to="+runnerBinary, "--git-config="+agentGitConfig)
	pod.Spec.InitContainers = []corev1.Container{{
		Name:            containerRunner,
		Image:           d.Options.RunnerImage,
		ImagePullPolicy: pull,
		RestartPolicy:   &always,
		Args:            runnerArgs,
		Env:             d.runnerEnv(),
		VolumeMounts:    d.runnerMounts(pod),
		SecurityContext: restrictedContainer(runnerUser),
		Resources:       runnerResources(),
		// The agent's containers start once the runner made what they mount final (a spare
		// moved into place, their directories made): the kubelet bind-mounts a directory when
		// the container starts, so it must be there, and final, by then. A postStart hook, not a
		// startup probe: the kubelet starts the next containers only once the hook returned, and
		// it returns the moment the runner is ready (milliseconds: the mirror's fetch comes
		// after), where a probe runs on a ticker of its own (up to a second more, on top of the
		// kubelet's relist).
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{runnerImageBinary, "probe", "--addr=" + runnerListen, "--wait=" + mountsWait}},
		}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	if sc := p.Spec.Scheduling; sc != nil {
		if len(sc.NodeSelector) > 0 {
			pod.Spec.NodeSelector = make(map[string]string, len(sc.NodeSelector))
			maps.Copy(pod.Spec.NodeSelector, sc.NodeSelector)
		}
		pod.Spec.Tolerations = slices.Clone(sc.Tolerations)
		pod.Spec.PriorityClassName = sc.PriorityClassName
		if sc.RuntimeClassName != "" {
			pod.Spec.RuntimeClassName = ptrTo(sc.RuntimeClassName)
		}
	}
	return pod
}

// mountsWait bounds the runner's postStart hook: the mounts take milliseconds; a runner not
// ready by then is restarted by the kubelet (the hook failed), which retries the claim.
const mountsWait = "60s"

// runnerImageBinary is the runner in its own image.
const runnerImageBinary = "/usr/local/bin/shepherd-runner"

func (d *Deps) pullPolicy() corev1.PullPolicy {
	if d.Options.ImagePullPolicy != "" {
		return corev1.PullPolicy(d.Options.ImagePullPolicy)
	}
	return corev1.PullIfNotPresent
}

// baseVolumes are the pod's volumes. The token and the CA are one projected volume (the runner's
// container alone mounts it); the model key another.
func (d *Deps) baseVolumes(p *agentsv1alpha1.Project, vol checkoutVolume, agent *agentsv1alpha1.AgentSpec) []corev1.Volume {
	empty := func(limit resource.Quantity) corev1.VolumeSource {
		l := limit
		return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &l}}
	}
	vols := []corev1.Volume{
		{Name: volBin, VolumeSource: empty(binLimit)},
		{Name: volRunnerTmp, VolumeSource: empty(runnerTmpLimit)},
		{Name: volAgentTmp, VolumeSource: empty(agentTmpLimit)},
		{Name: volWorkspace, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vol.ClaimName}}},
		{Name: volToken, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: d.tokenSources()}}},
	}
	if agent != nil && agent.ModelAPI != nil && agent.ModelAPI.KeySecretRef != nil {
		ref := agent.ModelAPI.KeySecretRef
		vols = append(vols, corev1.Volume{Name: volModelKey, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ref.Name, Items: []corev1.KeyToPath{{Key: ref.Key, Path: "key"}}, DefaultMode: ptrTo(int32(0o400)),
		}}})
	}
	if _, claim := sharedCache(p, vol.Mode); claim != "" {
		vols = append(vols, corev1.Volume{Name: projectVolume,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	return vols
}

// tokenSources are the runner's token and, when the channel is TLS, the CA that signs the
// manager's certificate (the Project controller publishes it in the namespace; the kubelet
// waits for it before starting the pod, and refreshes it after a rotation).
func (d *Deps) tokenSources() []corev1.VolumeProjection {
	src := []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: runnerapi.Audience, ExpirationSeconds: ptrTo(tokenExpiry), Path: "token"}},
	}
	if d.runnerTLS() {
		src = append(src, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: RunnerCAConfigMap}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}})
	}
	return src
}

// runnerTLS says whether agent pods reach the channel over TLS.
func (d *Deps) runnerTLS() bool { return strings.HasPrefix(d.Options.RunnerURL, "https://") }

// runnerMounts are the runner container's: the whole volume (it makes the agent's directories
// and keeps the mirror and spares), the Project's volume in clone mode with shared paths, the
// token and CA, the model key, and its own scratch space.
func (d *Deps) runnerMounts(pod *corev1.Pod) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: volBin, MountPath: binMount},
		{Name: volRunnerTmp, MountPath: "/tmp"},
		{Name: volWorkspace, MountPath: workspaceMount},
		{Name: volToken, MountPath: tokenMount, ReadOnly: true},
	}
	for _, v := range pod.Spec.Volumes {
		switch v.Name {
		case projectVolume:
			mounts = append(mounts, corev1.VolumeMount{Name: projectVolume, MountPath: projectMount})
		case volModelKey:
			mounts = append(mounts, corev1.VolumeMount{Name: volModelKey, MountPath: modelKeyMount, ReadOnly: true})
		}
	}
	return mounts
}

// agentMounts are the mounts of the agent's containers (prepare and agent): the runner binary,
// their own scratch space, their checkout and home only, the mirror read-only (worktree mode:
// the checkout borrows its objects), and the shared paths' cache, read-only to the agent (the
// checkout step's setup commands fill it: cacheWritable is set for prepare).
func agentMounts(p *agentsv1alpha1.Project, vol checkoutVolume, home string, cacheWritable bool) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: volBin, MountPath: binMount, ReadOnly: true},
		{Name: volAgentTmp, MountPath: "/tmp"},
		{Name: volWorkspace, MountPath: vol.Path, SubPath: subPath(vol.Path)},
	}
	if home != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: volWorkspace, MountPath: home, SubPath: subPath(home)})
	}
	if vol.Mode == agentsv1alpha1.WorkspaceWorktree {
		mounts = append(mounts, corev1.VolumeMount{Name: volWorkspace, MountPath: mirrorPath, SubPath: subPath(mirrorPath), ReadOnly: true})
	}
	switch dir, claim := sharedCache(p, vol.Mode); {
	case claim != "":
		mounts = append(mounts, corev1.VolumeMount{Name: projectVolume, MountPath: dir, SubPath: "shared", ReadOnly: !cacheWritable})
	case dir != "":
		mounts = append(mounts, corev1.VolumeMount{Name: volWorkspace, MountPath: dir, SubPath: subPath(dir), ReadOnly: !cacheWritable})
	}
	return mounts
}

// runnerEnv is the runner container's environment: the channel (a URL and paths, no secret) and
// a home of its own.
func (d *Deps) runnerEnv() []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "HOME", Value: "/tmp"},
		{Name: "SHEPHERD_MANAGER_URL", Value: d.Options.RunnerURL},
		{Name: "SHEPHERD_TOKEN_FILE", Value: tokenFile},
	}
	if d.runnerTLS() {
		env = append(env, corev1.EnvVar{Name: "SHEPHERD_CA_FILE", Value: tokenMount + "/ca.crt"})
	}
	return env
}

// runnerResources are the runner container's: it serves git and the model API to the pod and
// makes spare checkouts (git writing a tree).
func runnerResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
	}
}

// agentBaseEnv is what the agent's containers get before the Project's own: their home, and
// the egress proxy as the way out (the runner's local server is on loopback, never proxied).
func (d *Deps) agentBaseEnv(home string) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "HOME", Value: home}, {Name: "GIT_CONFIG_SYSTEM", Value: agentGitConfig}}
	if u := d.Options.EgressProxyURL; u != "" {
		env = append(env,
			corev1.EnvVar{Name: "HTTP_PROXY", Value: u}, corev1.EnvVar{Name: "HTTPS_PROXY", Value: u},
			corev1.EnvVar{Name: "http_proxy", Value: u}, corev1.EnvVar{Name: "https_proxy", Value: u},
			corev1.EnvVar{Name: "NO_PROXY", Value: "127.0.0.1,localhost"}, corev1.EnvVar{Name: "no_proxy", Value: "127.0.0.1,localhost"})
	}
	return env
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

// agentResources converts the API's resources, with the default requests and limits.
func agentResources(r *agentsv1alpha1.ResourceRequirements) corev1.ResourceRequirements {
	out := userResources(r)
	defaultRequests(&out)
	defaultLimits(&out)
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

// The limits of an agent's containers when neither the Project nor the session names them: an
// agent that runs away (a build filling the disk, a test leaking memory) is stopped before it
// takes the node. Never below a request that is set.
var (
	defaultAgentMemoryLimit  = resource.MustParse("4Gi")
	defaultAgentStorageLimit = resource.MustParse("8Gi")
)

// defaultLimits fills the memory and ephemeral-storage limits left unset, never below a request.
func defaultLimits(r *corev1.ResourceRequirements) {
	for name, def := range map[corev1.ResourceName]resource.Quantity{corev1.ResourceMemory: defaultAgentMemoryLimit, corev1.ResourceEphemeralStorage: defaultAgentStorageLimit} {
		if _, ok := r.Limits[name]; ok {
			continue
		}
		v := def
		if req, ok := r.Requests[name]; ok && req.Cmp(v) > 0 {
			v = req
		}
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Limits[name] = v
	}
}

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
		out.Type, out.Image, out.Model, out.Custom = o.Type, "", "", nil
	}
	if o.Custom != nil {
		out.Custom = o.Custom.DeepCopy()
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
	if o.ModelAPI != nil {
		// Whole: another API (an AgentTask's Codex attempt in a Claude Code Project) comes with
		// its own URL and key.
		out.ModelAPI = o.ModelAPI.DeepCopy()
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

// worktreePod prepares (or removes) a Worktree's checkout when no session pod does it. Its
// checkout step runs in the Project's agent image, so setup commands find the agent's toolchain.
func (d *Deps) worktreePod(p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume, op string) (*corev1.Pod, error) {
	labels := mergeLabels(managedLabels(p.Name), map[string]string{
		agentsv1alpha1.LabelWorktree: wt.Name, agentsv1alpha1.LabelComponent: componentWorktree,
	})
	home := homePath("worktree-" + wt.Name)
	pod := d.basePod(worktreePodName(wt.Name), wt.Namespace, labels, p, vol, d.runnerArgs(p, vol, home, "", nil), nil)
	colocate(pod, p, wt, vol)
	pod.Annotations = map[string]string{annotationOperation: op, annotationGeneration: strconv.FormatInt(wt.Generation, 10)}
	if req := wt.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]; req != "" {
		pod.Annotations[agentsv1alpha1.ReconcileRequestAnnotation] = req
	}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	var args []string
	switch op {
	case operationRemove:
		args = []string{"remove", "--mode=" + string(vol.Mode), "--path=" + vol.Path}
	default:
		var err error
		if args, err = prepareArgs(p, wt, vol); err != nil {
			return nil, err
		}
	}
	pod.Spec.Containers = []corev1.Container{{
		Name:                     op,
		Image:                    d.agentImage(p.Spec.Agent),
		ImagePullPolicy:          d.pullPolicy(),
		Command:                  []string{runnerBinary},
		Args:                     args,
		Env:                      d.agentBaseEnv(home),
		VolumeMounts:             agentMounts(p, vol, home, true),
		SecurityContext:          restrictedContainer(podUser),
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

// agentPod runs one session's agent: the runner's sidecar, then two containers in the agent's
// image started together: the checkout step (prepare, so setup commands find the image's
// toolchain) and the agent's container, whose host waits for the runner to start the agent once
// the checkout step reported. The checkout step is not an init container: the kubelet starts the
// container after an init container only once its relist (every second) saw it end, 0.3-1.9 s
// measured on the warm start's critical path (docs/performance.md, section 3); side by side the
// agent's container is up while the checkout is made.
func (d *Deps) agentPod(sess *agentsv1alpha1.AgentSession, p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume, agent agentsv1alpha1.AgentSpec) (*corev1.Pod, error) {
	labels := mergeLabels(managedLabels(p.Name), map[string]string{
		agentsv1alpha1.LabelSession: sess.Name, agentsv1alpha1.LabelWorktree: wt.Name, componentLabel: componentAgent,
	})
	home := homePath(sess.Name)
	// The runner's /tmp is an emptyDir: the checkout step's outcome outlives a restart of the
	// runner's container, not the pod.
	runnerArgs := append(d.runnerArgs(p, vol, home, sess.Name, &agent), "--prepared-file=/tmp/prepared.json")
	pod := d.basePod(agentPodName(sess.Name), sess.Namespace, labels, p, vol, runnerArgs, &agent)
	colocate(pod, p, wt, vol)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	// The runner stops the agent on SIGTERM within its stop grace (10s) and reports; leave room.
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(30))
	args, err := prepareArgs(p, wt, vol)
	if err != nil {
		return nil, err
	}
	image := d.agentImage(agent)
	env := append(append(d.agentBaseEnv(home), gitIdentity(sess.Name, agent.GitAuthor)...), agentEnv(agent)...)
	pod.Spec.Containers = []corev1.Container{{
		// First: the kubelet starts a pod's containers in order, and this one is on the path to
		// the agent's start.
		Name:                     containerPrepare,
		Image:                    image,
		ImagePullPolicy:          d.pullPolicy(),
		Command:                  []string{runnerBinary},
		Args:                     args,
		Env:                      d.agentBaseEnv(home),
		VolumeMounts:             agentMounts(p, vol, home, true),
		SecurityContext:          restrictedContainer(podUser),
		Resources:                prepareResources(agentResources(agent.Resources)),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}, {
		Name:                     containerAgent,
		Image:                    image,
		ImagePullPolicy:          d.pullPolicy(),
		Command:                  []string{runnerBinary},
		Args:                     []string{"host", "--listen=" + hostListen},
		WorkingDir:               vol.Path,
		Env:                      env,
		VolumeMounts:             agentMounts(p, vol, home, false),
		SecurityContext:          restrictedContainer(podUser),
		Resources:                agentResources(agent.Resources),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	return pod, nil
}

// Requests of the checkout step beside the agent's container.
var (
	prepareCPURequest    = resource.MustParse("10m")
	prepareMemoryRequest = resource.MustParse("64Mi")
)

// prepareResources are the checkout step's when it runs beside the agent's container: the
// agent's limits, and small requests. The pod's requests are its containers' sum, so the agent's
// requests twice would reserve a second agent's worth of the node for a step that ends before the
// agent starts. CPU weight is shared among a pod's containers by their requests, but the agent's
// container is idle while the checkout is made (its host waits), so the step gets the pod's whole
// share; the pod's own share among pods still comes from the agent's requests.
func prepareResources(agent corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Limits: agent.Limits.DeepCopy(), Requests: corev1.ResourceList{}}
	for name, v := range map[corev1.ResourceName]resource.Quantity{corev1.ResourceCPU: prepareCPURequest, corev1.ResourceMemory: prepareMemoryRequest} {
		if req, ok := agent.Requests[name]; ok && req.Cmp(v) < 0 {
			v = req
		}
		if lim, ok := out.Limits[name]; ok && lim.Cmp(v) < 0 {
			v = lim
		}
		out.Requests[name] = v
	}
	return out
}

// homePath is a home directory on the checkout's volume: agents keep their conversations there
// (Claude Code and OpenCode under ~/.claude, ~/.local), so a restored pod resumes the same
// conversation only if its home survived.
func homePath(name string) string { return workspaceMount + "/homes/" + name }

// runnerStatePath is the runner's own state of a session on the volume, which only the runner's
// container mounts.
func runnerStatePath(session string) string { return workspaceMount + "/runner/" + session }

// gitIdentity names the commits an agent makes: agent.gitAuthor, else Shepherd's. git refuses
// to commit with the identity it would guess in a container.
func gitIdentity(session string, a *agentsv1alpha1.GitAuthor) []corev1.EnvVar {
	name, email := "Shepherd agent ("+session+")", session+"@agents.shepherd.dev"
	if a != nil {
		name, email = a.Name, a.Email
	}
	return []corev1.EnvVar{
		{Name: "GIT_AUTHOR_NAME", Value: name},
		{Name: "GIT_AUTHOR_EMAIL", Value: email},
		{Name: "GIT_COMMITTER_NAME", Value: name},
		{Name: "GIT_COMMITTER_EMAIL", Value: email},
	}
}

// colocate keeps the pods that mount the same ReadWriteOnce claim on one node: a block volume
// serves one node at a time, and a second pod elsewhere would wait on its attachment forever (a
// Multi-Attach error). Each such claim labels the pod and asks for a required pod affinity to
// the pods with the same label on the same host. The first pod matches its own term, so it goes
// wherever the scheduler likes; every later one follows it, also when several are created at
// once (the scheduler places them one by one). ReadWriteMany claims need nothing, and a
// ReadWriteOncePod claim admits one pod anyway.
func colocate(pod *corev1.Pod, p *agentsv1alpha1.Project, wt *agentsv1alpha1.Worktree, vol checkoutVolume) {
	var terms []corev1.PodAffinityTerm
	add := func(key, claim string, st agentsv1alpha1.StorageSpec) {
		if st.AccessMode != "" && st.AccessMode != string(corev1.ReadWriteOnce) {
			return
		}
		v := labelValue(claim)
		pod.Labels[key] = v
		terms = append(terms, corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: v}},
			TopologyKey:   corev1.LabelHostname,
		})
	}
	storage := mergeStorage(p.Spec.Workspace.Storage, nil)
	if vol.Mode == agentsv1alpha1.WorkspaceClone && wt != nil {
		add(agentsv1alpha1.LabelClaim, vol.ClaimName, mergeStorage(p.Spec.Workspace.Storage, wt.Spec.Storage))
	} else {
		add(agentsv1alpha1.LabelClaim, vol.ClaimName, storage)
	}
	if _, claim := sharedCache(p, vol.Mode); claim != "" {
		add(agentsv1alpha1.LabelProjectClaim, claim, storage)
	}
	if len(terms) > 0 {
		pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}}
	}
}

// labelValue is name as a label value: itself up to 63 characters, else its first 54 and a hash.
func labelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:54], "-._") + "-" + hex.EncodeToString(sum[:4])
}
