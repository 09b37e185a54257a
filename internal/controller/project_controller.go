package controller

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// +kubebuilder:rbac:groups=agents.shepherd.dev,resources=projects/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=serviceaccounts;persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;patch

// ProjectReconciler checks a Project's credentials and repository, keeps the children its
// sessions share (the agent ServiceAccount, the workspace volume with the mirror, the egress
// policy), and counts its sessions.
type ProjectReconciler struct {
	*Deps
	// Events receives reconcile requests from outside the cluster (a notification route that
	// starts or stops failing).
	Events chan event.GenericEvent

	accessMu sync.Mutex
	access   map[types.UID]accessCheck

	backlog backlogMemory

	// counted is how many sessions each Project had at its last count (types.NamespacedName →
	// int): how long its next count waits (coalesceDelay). Memory, not state: after a restart
	// the first count sets it again.
	counted sync.Map
}

// accessCheck remembers the last repository check, so that reconciles caused by session changes
// don't spend the forge's rate limit. It is a cache, not state: a restart checks again.
type accessCheck struct {
	key        types.NamespacedName
	generation int64
	// request is the reconcile-request annotation the check answered: changing it checks again.
	request string
	conn    *scm.Connection
	at      time.Time
	info    scm.RepoInfo
	err     error
}

// projectScope is what one Project reconcile observed.
type projectScope struct {
	project  *agentsv1alpha1.Project
	sessions []agentsv1alpha1.AgentSession
	// worktrees are the Project's Worktrees (read-only, the cache's own): their prepares say
	// whether the mirror was fetched.
	worktrees []agentsv1alpha1.Worktree
	counts    agentsv1alpha1.SessionCounts
	// sessionsRead: sessions were listed this time (spend is summed from them).
	sessionsRead bool
	// policies are the BudgetPolicies that cover the Project, by name (the cache's own objects).
	policies []*agentsv1alpha1.BudgetPolicy
	// budgetNotice is the budget threshold notification to send once the status that marks its
	// window Notified is written.
	budgetNotice string
	// now is the reconcile's clock reading.
	now      time.Time
	forge    *forge
	credErr  error
	checked  bool
	access   scm.RepoInfo
	accErr   error
	volume   *corev1.PersistentVolumeClaim
	requeue  time.Duration
	accessAt time.Time
	routes   []agentsv1alpha1.NotificationRouteStatus
	// backlog is set once the backlog step ran.
	backlog   *backlogScope
	backlogMu sync.Mutex
}

// Reconcile follows the fixed shape: get, patch status once in a defer, then ordered steps that
// stop at the first error.
func (r *ProjectReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &agentsv1alpha1.Project{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		// Children carry owner references; garbage collection removes them.
		return ctrl.Result{}, nil
	}
	orig := p.DeepCopy()
	s := &projectScope{project: p, now: r.now()}
	var recErr error
	defer func() {
		if r.Deliveries != nil && p.Spec.Notifications != nil {
			s.routes = r.Deliveries.routeStatus(p.Namespace, p.Name, p.Spec.Notifications.Routes)
		}
		setProjectStatus(p, s, recErr)
		if p.Spec.Budget != nil || len(s.policies) > 0 {
			// The windows roll over at midnight in the budget's zone: look again then.
			end, _ := windowEnds(s.now, spendZone(p, s.policies))
			next := end.Add(time.Second).Sub(s.now)
			if s.requeue == 0 || next < s.requeue {
				s.requeue = next
			}
		}
		if err := patchStatus(ctx, r.Client, orig, p); err != nil {
			res, retErr = statusWriteFailed(recErr, err)
			return
		}
		emitConditionEvents(r.Recorder, orig.Status.Conditions, p.Status.Conditions, p,
			agentsv1alpha1.ConditionCredentialsValid, agentsv1alpha1.ConditionRepositoryReachable, agentsv1alpha1.ConditionBudgetAvailable)
		if s.budgetNotice != "" {
			r.notifyBudget(ctx, p, s.budgetNotice)
		}
		if s.backlog != nil && r.Recorder != nil {
			for _, e := range s.backlog.events {
				r.Recorder.Eventf(p, nil, e.kind, e.reason, "Backlog", "%s", e.message)
			}
		}
		res, retErr = finish(ctx, r.Recorder, p, orig.Status.Conditions, p.Status.Conditions, recErr, s.requeue)
	}()

	steps := []func(context.Context, *projectScope) error{
		r.observeSessions,
		r.checkSpec,
		r.reconcileAccess,
		r.reconcileServiceAccount,
		r.reconcileRunnerCA,
		r.reconcileWorkspaceVolume,
		r.reconcileEgressPolicy,
		r.reconcileBacklog,
		r.reconcileIssues,
	}
	for _, step := range steps {
		if recErr = step(ctx, s); recErr != nil {
			break
		}
	}
	return res, retErr
}

func (r *ProjectReconciler) observeSessions(ctx context.Context, s *projectScope) error {
	var list agentsv1alpha1.AgentSessionList
	// The cache's own objects, not copies: a Project of thousands of sessions would otherwise copy
	// them all on every reconcile. s.sessions is read-only; whoever changes one copies it first.
	if err := r.Client.List(ctx, &list, client.InNamespace(s.project.Namespace), client.MatchingFields{indexProject: s.project.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	s.sessions = list.Items
	s.sessionsRead = true
	s.counts = countSessions(list.Items)
	r.counted.Store(client.ObjectKeyFromObject(s.project), len(list.Items))
	var wts agentsv1alpha1.WorktreeList
	if err := r.Client.List(ctx, &wts, client.InNamespace(s.project.Namespace), client.MatchingFields{indexProject: s.project.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list Worktrees: %w", err)
	}
	s.worktrees = wts.Items
	var pols agentsv1alpha1.BudgetPolicyList
	if err := r.Client.List(ctx, &pols, client.InNamespace(s.project.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list BudgetPolicies: %w", err)
	}
	s.policies = coveringPolicies(s.project, pols.Items)
	// Counts, not events: the gauge follows every reconcile, whether or not the status changed.
	r.Metrics.SetSessions(s.project.Namespace, s.project.Name, s.counts.ByPhase)
	return nil
}

// countDelay is how long key's session and Worktree changes gather before the Project counts
// them again: Options.SessionCountDelay (or its default), longer for a Project of thousands of
// sessions (coalesceDelay).
func (r *ProjectReconciler) countDelay(key types.NamespacedName) time.Duration {
	base := r.Options.SessionCountDelay
	if base <= 0 {
		base = defaultSessionCountDelay
	}
	n, _ := r.counted.Load(key)
	c, _ := n.(int)
	return coalesceDelay(base, c)
}

// forget drops what this process keeps about a deleted Project.
func (r *ProjectReconciler) forget(key types.NamespacedName) {
	r.accessMu.Lock()
	for uid, c := range r.access {
		if c.key == key {
			delete(r.access, uid)
		}
	}
	r.accessMu.Unlock()
	r.backlog.forget(key)
	r.counted.Delete(key)
	r.Issues.forgetProject(key)
	r.forgetTracker(key)
	r.Metrics.ForgetProject(key.Namespace, key.Name)
}

// checkSpec refuses what the API's schema cannot check: a prompt template or a reaction's
// message that does not render, or that breaks the bounds of internal/safetemplate (the sessions
// would fail one by one, or every reconcile of every session would pay for it). The verdicts are
// remembered per template text, so this costs one render per new text.
func (r *ProjectReconciler) checkSpec(_ context.Context, s *projectScope) error {
	if t := s.project.Spec.Tracker; t != nil && t.PromptTemplate != "" {
		if err := tracker.CheckPrompt(t.PromptTemplate); err != nil {
			return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.tracker.promptTemplate: %v: fix the template (it sees .Issue, .Project and .Branch; see docs/project.md)", err)
		}
	}
	if _, err := lifecycle.ResolveSettings(s.project.Spec.Reactions, s.project.Spec.Activity); err != nil {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.reactions: %v: fix the reaction (a message sees .PullRequest, .Checks, .Threads, .Reviews and the rest of docs/reactions.md)", err)
	}
	if _, err := budgetZone(s.project.Spec.Budget); err != nil {
		return Stalling(agentsv1alpha1.ReasonInvalidSpec, "%v", err)
	}
	return nil
}

// reconcileAccess reads the credentials and checks the repository, at most once per
// AccessCheckInterval unless the spec or the credentials changed.
func (r *ProjectReconciler) reconcileAccess(ctx context.Context, s *projectScope) error {
	f, err := r.connectForge(ctx, s.project)
	if err != nil {
		s.credErr = err
		return err
	}
	s.forge = f
	interval := r.Options.AccessCheckInterval
	if interval == 0 {
		interval = 5 * time.Minute
	}
	r.accessMu.Lock()
	prev, ok := r.access[s.project.UID]
	r.accessMu.Unlock()
	now := r.now()
	request := s.project.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
	if !ok || prev.generation != s.project.Generation || prev.request != request || prev.conn != f.Conn ||
		now.Sub(prev.at) >= interval || prev.err != nil && now.Sub(prev.at) >= forgeRetry {
		cctx, cancel := context.WithTimeout(ctx, forgeCallTimeout)
		info, err := f.Conn.Provider.CheckAccess(cctx, f.Repo)
		cancel()
		prev = accessCheck{key: client.ObjectKeyFromObject(s.project), generation: s.project.Generation, request: request, conn: f.Conn, at: now, info: info, err: err}
		r.accessMu.Lock()
		if r.access == nil {
			r.access = map[types.UID]accessCheck{}
		}
		r.access[s.project.UID] = prev
		r.accessMu.Unlock()
	}
	s.checked, s.access, s.accErr, s.accessAt = true, prev.info, prev.err, prev.at
	s.requeue = interval - now.Sub(prev.at)
	return forgeError(prev.err, "check repository "+f.Repo.String())
}

func (r *ProjectReconciler) reconcileServiceAccount(ctx context.Context, s *projectScope) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentServiceAccountName(s.project.Name), Namespace: s.project.Namespace}}
	_, err := controllerutil.CreateOrPatch(ctx, r.Client, sa, func() error {
		sa.Labels = mergeLabels(sa.Labels, managedLabels(s.project.Name), map[string]string{agentsv1alpha1.LabelComponent: componentAgent})
		// Agent pods get no API token: they prove themselves to the manager with a projected
		// token of another audience, which the API server does not accept.
		sa.AutomountServiceAccountToken = ptrTo(false)
		return controllerutil.SetControllerReference(s.project, sa, r.Scheme)
	})
	if err != nil {
		return fmt.Errorf("ensure agent ServiceAccount: %w", err)
	}
	return nil
}

// reconcileWorkspaceVolume keeps the volume that holds the mirror and the worktrees in worktree
// mode, and the cache of the shared paths (spec.workspace.sharedPaths) in either mode. In clone
// mode every Worktree has its own volume, and the Project needs one only for that cache. A
// volume made for the cache stays when the shared paths go (it holds the cache, and pods may
// still mount it).
func (r *ProjectReconciler) reconcileWorkspaceVolume(ctx context.Context, s *projectScope) error {
	p := s.project
	if p.Spec.Workspace.Mode == agentsv1alpha1.WorkspaceClone && len(p.Spec.Workspace.SharedPaths) == 0 {
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: workspaceClaimName(p.Name), Namespace: p.Namespace}}
	_, err := controllerutil.CreateOrPatch(ctx, r.Client, pvc, func() error {
		pvc.Labels = mergeLabels(pvc.Labels, managedLabels(p.Name), map[string]string{agentsv1alpha1.LabelComponent: componentVolume})
		if pvc.CreationTimestamp.IsZero() {
			// A claim's spec is immutable once created (only the size may grow).
			pvc.Spec = claimSpec(p.Spec.Workspace.Storage, nil)
		} else if want := claimSize(p.Spec.Workspace.Storage, nil); want.Cmp(pvc.Spec.Resources.Requests[corev1.ResourceStorage]) > 0 {
			pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		}
		return controllerutil.SetControllerReference(p, pvc, r.Scheme)
	})
	if err != nil {
		return fmt.Errorf("ensure workspace volume: %w", err)
	}
	s.volume = pvc
	return nil
}

// reconcileEgressPolicy keeps the NetworkPolicy of the Project's agent and checkout pods:
// nothing in, and out only to the cluster's DNS pods, the runner channel, the egress proxy, the
// model API when it is given by address, and the networks the Project opens. Egress is closed
// by default (docs/security.md): a steered agent reaches neither cloud metadata, nor the API
// server, nor another tenant's pods.
func (r *ProjectReconciler) reconcileEgressPolicy(ctx context.Context, s *projectScope) error {
	p := s.project
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: egressPolicyName(p.Name), Namespace: p.Namespace}}
	_, err := controllerutil.CreateOrPatch(ctx, r.Client, np, func() error {
		np.Labels = mergeLabels(np.Labels, managedLabels(p.Name))
		np.Spec = egressPolicySpec(p, r.Options, sessionModelURLs(s.sessions))
		return controllerutil.SetControllerReference(p, np, r.Scheme)
	})
	if err != nil {
		return fmt.Errorf("ensure egress policy: %w", err)
	}
	return nil
}

// maxSessionModelURLs bounds the model APIs by address that sessions add to their Project's
// policy (an AgentTask has at most ten variants).
const maxSessionModelURLs = 16

// sessionModelURLs are the model API URLs the Project's sessions name in their own agent (an
// AgentTask's Codex attempt in a Claude Code Project), distinct and sorted, at most
// maxSessionModelURLs. Pure.
func sessionModelURLs(sessions []agentsv1alpha1.AgentSession) []string {
	seen := map[string]bool{}
	var out []string
	for i := range sessions {
		a := sessions[i].Spec.Agent
		if a == nil || a.ModelAPI == nil || a.ModelAPI.URL == "" || seen[string(a.ModelAPI.URL)] || !sessions[i].DeletionTimestamp.IsZero() {
			continue
		}
		seen[string(a.ModelAPI.URL)] = true
		out = append(out, string(a.ModelAPI.URL))
	}
	sort.Strings(out)
	if len(out) > maxSessionModelURLs {
		out = out[:maxSessionModelURLs]
	}
	return out
}

// egressPolicySpec is the Project's pods' NetworkPolicy; modelURLs are its sessions' own model
// APIs (sessionModelURLs), allowed like the Project's when given by address. Pure.
func egressPolicySpec(p *agentsv1alpha1.Project, o Options, modelURLs []string) networkingv1.NetworkPolicySpec {
	tcp := corev1.ProtocolTCP
	rules := []networkingv1.NetworkPolicyEgressRule{dnsEgressRule(o)}
	if r, ok := runnerEgressRule(o); ok {
		rules = append(rules, r)
	}
	if r, ok := egressProxyRule(o); ok {
		rules = append(rules, r)
	}
	if r, ok := modelAPIRule(p); ok {
		rules = append(rules, r)
	}
	for _, u := range modelURLs {
		if m := p.Spec.Agent.ModelAPI; m != nil && string(m.URL) == u {
			continue
		}
		// A session's own address never opens a denied range (cloud metadata): only the
		// Project's spec may name one (docs/security.md).
		if r, ok := addressRule(u); ok && !inDenied(r, o.DeniedCIDRs) {
			rules = append(rules, r)
		}
	}
	if n := p.Spec.Network; n != nil && n.Egress != nil {
		for _, a := range n.Egress.Allow {
			rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: a.CIDR, Except: exceptions(a.CIDR, append(slices.Clone(o.DeniedCIDRs), o.ClusterCIDRs...))},
			}}}
			for _, port := range a.Ports {
				pp := intstr.FromInt32(port)
				rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &pp})
			}
			rules = append(rules, rule)
		}
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{
			MatchLabels: map[string]string{agentsv1alpha1.LabelProject: p.Name},
			MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: agentsv1alpha1.LabelComponent, Operator: metav1.LabelSelectorOpIn, Values: []string{componentAgent, componentWorktree},
			}},
		},
		// Ingress with no rule: nothing may connect to an agent pod.
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Egress:      rules,
	}
}

// dnsEgressRule allows DNS to the cluster's DNS pods only: port 53 to any address would be a
// way out (DNS tunnels, another resolver).
func dnsEgressRule(o Options) networkingv1.NetworkPolicyEgressRule {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	ns, labels := o.DNSNamespace, o.DNSPodLabels
	if ns == "" {
		ns = metav1.NamespaceSystem
	}
	if len(labels) == 0 {
		labels = map[string]string{"k8s-app": "kube-dns"}
	}
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}
}

// egressProxyRule lets the pods reach the egress proxy: its pods by labels in the manager's
// namespace, else the proxy URL's host when it is an address.
func egressProxyRule(o Options) (networkingv1.NetworkPolicyEgressRule, bool) {
	if o.EgressProxyURL == "" {
		return networkingv1.NetworkPolicyEgressRule{}, false
	}
	if o.ManagerNamespace != "" && len(o.EgressProxyPodLabels) > 0 {
		return podsRule(o.ManagerNamespace, o.EgressProxyPodLabels, o.EgressProxyPort), true
	}
	return addressRule(o.EgressProxyURL)
}

// modelAPIRule lets the runner reach a model API given by address (an in-cluster model server,
// a test's): an address has no name for the egress proxy to check, so the policy allows it,
// on its port only.
func modelAPIRule(p *agentsv1alpha1.Project) (networkingv1.NetworkPolicyEgressRule, bool) {
	m := p.Spec.Agent.ModelAPI
	if m == nil || m.URL == "" {
		return networkingv1.NetworkPolicyEgressRule{}, false
	}
	return addressRule(string(m.URL))
}

// podsRule allows pods of a namespace with labels, on port (all ports when 0). NetworkPolicy
// sees the pod's port, not a Service's.
func podsRule(ns string, labels map[string]string, port int32) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
		}},
		Ports: tcpPort(port),
	}
}

func tcpPort(n int32) []networkingv1.NetworkPolicyPort {
	if n <= 0 {
		return nil
	}
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(n)
	return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
}

// addressRule allows a URL's host and port when the host is an IP address.
func addressRule(raw string) (networkingv1.NetworkPolicyEgressRule, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return networkingv1.NetworkPolicyEgressRule{}, false
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return networkingv1.NetworkPolicyEgressRule{}, false
	}
	n, _ := strconv.ParseInt(u.Port(), 10, 32)
	if n == 0 {
		n = map[string]int64{"http": 80, "https": 443}[u.Scheme]
	}
	return networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(ip, ip.BitLen()).String()}}},
		Ports: tcpPort(int32(n)),
	}, true
}

// inDenied reports whether an address rule's address lies in one of the denied ranges.
func inDenied(r networkingv1.NetworkPolicyEgressRule, denied []string) bool {
	for _, to := range r.To {
		if to.IPBlock == nil {
			continue
		}
		addr, err := netip.ParsePrefix(to.IPBlock.CIDR)
		if err != nil {
			return true
		}
		for _, d := range denied {
			if dp, err := netip.ParsePrefix(d); err == nil && dp.Contains(addr.Addr()) {
				return true
			}
		}
	}
	return false
}

// exceptions are the denied ranges a Project's CIDR contains (and does not lie within): a
// Project that opens 0.0.0.0/0 still does not reach cloud metadata or the cluster's ranges,
// but one that names 10.96.0.10/32 reaches that address.
func exceptions(cidr string, denied []string) []string {
	allow, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range denied {
		dp, err := netip.ParsePrefix(d)
		if err != nil || dp.Addr().Is4() != allow.Addr().Is4() {
			continue
		}
		if dp.Bits() > allow.Bits() && allow.Contains(dp.Addr()) {
			out = append(out, dp.Masked().String())
		}
	}
	return out
}

// runnerEgressRule lets agent pods reach the runner channel: the manager's pods by namespace and
// labels when it runs in the cluster (a NetworkPolicy sees the pod's port, not the Service's),
// else RunnerURL's host when it is an IP address. A manager known only by a host name cannot be
// allowed by a NetworkPolicy; docs/project.md says to list its address in egress.allow.
func runnerEgressRule(o Options) (networkingv1.NetworkPolicyEgressRule, bool) {
	if o.ManagerNamespace != "" && len(o.ManagerPodLabels) > 0 {
		return podsRule(o.ManagerNamespace, o.ManagerPodLabels, o.RunnerPort), true
	}
	return addressRule(o.RunnerURL)
}

// claimSpec is a PersistentVolumeClaim spec from a Project's storage with an override.
func claimSpec(storage, override *agentsv1alpha1.StorageSpec) corev1.PersistentVolumeClaimSpec {
	st := mergeStorage(storage, override)
	mode := corev1.ReadWriteOnce
	if st.AccessMode != "" {
		mode = corev1.PersistentVolumeAccessMode(st.AccessMode)
	}
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
		StorageClassName: st.StorageClassName,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceStorage: claimSize(storage, override),
		}},
	}
}

// defaultClaimSize is the size of a checkout or workspace volume when the Project sets none.
var defaultClaimSize = resource.MustParse("10Gi")

func claimSize(storage, override *agentsv1alpha1.StorageSpec) resource.Quantity {
	st := mergeStorage(storage, override)
	if st.Size != nil {
		return st.Size.DeepCopy()
	}
	return defaultClaimSize.DeepCopy()
}

func mergeStorage(base, override *agentsv1alpha1.StorageSpec) agentsv1alpha1.StorageSpec {
	var out agentsv1alpha1.StorageSpec
	for _, s := range []*agentsv1alpha1.StorageSpec{base, override} {
		if s == nil {
			continue
		}
		if s.StorageClassName != nil {
			out.StorageClassName = s.StorageClassName
		}
		if s.Size != nil {
			out.Size = s.Size
		}
		if s.AccessMode != "" {
			out.AccessMode = s.AccessMode
		}
	}
	return out
}

// SetupWithManager watches Projects, their children, their sessions (for counts) and the Secrets
// they reference (metadata only).
func (r *ProjectReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		// Not woken by a write to its status (its own, most of all): during a fan-out every count
		// changed, so every reconcile wrote and the write woke it again, back to back, each
		// reconcile reading all of its sessions; the coalescing of session changes below never
		// got a say. What a person changes moves the generation, an annotation or a label.
		For(&agentsv1alpha1.Project{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&corev1.ServiceAccount{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// Session counts are coalesced: a fan-out of thousands of sessions changes phases thousands
		// of times a minute, and the Project's status needs one write per burst, not one per change.
		Watches(&agentsv1alpha1.AgentSession{}, enqueueAfter(r.countDelay, func(o client.Object) types.NamespacedName {
			return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.(*agentsv1alpha1.AgentSession).Spec.ProjectRef.Name}
		}), builder.WithPredicates(sessionPhaseChanged())).
		// A Worktree's prepare is the mirror's news (MirrorReady), coalesced like the sessions.
		Watches(&agentsv1alpha1.Worktree{}, enqueueAfter(r.countDelay, func(o client.Object) types.NamespacedName {
			return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.(*agentsv1alpha1.Worktree).Spec.ProjectRef.Name}
		}), builder.WithPredicates(worktreePhaseChanged())).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.projectsForSecret), builder.OnlyMetadata).
		// A shared cap's news (spent, or room again) is the covered Projects' BudgetAvailable.
		Watches(&agentsv1alpha1.BudgetPolicy{}, handler.EnqueueRequestsFromMapFunc(projectsForPolicy(r.Client)), builder.WithPredicates(policyChanged()))
	if r.Events != nil {
		b = b.WatchesRawSource(source.Channel(r.Events, &handler.EnqueueRequestForObject{}))
	}
	return b.Named("project").Complete(r)
}

// projectsForSecret maps a Secret to the Projects that reference it.
func (r *ProjectReconciler) projectsForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list agentsv1alpha1.ProjectList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexSecret: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List Projects for Secret", "secret", client.ObjectKeyFromObject(o))
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return out
}

func mergeLabels(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
