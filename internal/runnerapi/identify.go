package runnerapi

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// PodNames is the naming the controllers give the pods they make, which a caller's pod must
// follow to be served.
type PodNames struct {
	// AgentPod is the agent pod of a session.
	AgentPod func(session string) string
	// CheckoutPod is the pod that prepares or removes a Worktree's checkout.
	CheckoutPod func(worktree string) string
	// ServiceAccount is the service account the Project's pods run as.
	ServiceAccount func(project string) string
}

// DefaultPodNames is the controllers' naming (internal/controller/names.go; a test there keeps
// the two in step).
var DefaultPodNames = PodNames{
	AgentPod:       func(s string) string { return s + "-agent" },
	CheckoutPod:    func(w string) string { return w + "-worktree" },
	ServiceAccount: func(p string) string { return p + "-agent" },
}

// StandardIdentify maps a pod to its caller. A label alone proves nothing (anyone who may create
// pods in the namespace can set it), so a pod is served only when all of these hold: Shepherd's
// managed-by label; a controller owner reference to an AgentSession (or, for a checkout pod, a
// Worktree) of Shepherd's API group, named as the pod's label says; the pod's own name as the
// controller names it; and the Project's agent service account. The owner's UID goes to the
// Backend, which checks it against the object it reads.
func StandardIdentify(n PodNames) func(pod *corev1.Pod) (Session, error) {
	return func(pod *corev1.Pod) (Session, error) {
		refuse := func(why string, args ...any) (Session, error) {
			return Session{}, fmt.Errorf("pod %s/%s is not one of Shepherd's: %s: %w", pod.Namespace, pod.Name, fmt.Sprintf(why, args...), ErrForbidden)
		}
		if pod.Labels[agentsv1alpha1.LabelManagedBy] != agentsv1alpha1.ManagedByValue {
			return refuse("no %s=%s label", agentsv1alpha1.LabelManagedBy, agentsv1alpha1.ManagedByValue)
		}
		project := pod.Labels[agentsv1alpha1.LabelProject]
		if project == "" {
			return refuse("no %s label", agentsv1alpha1.LabelProject)
		}
		owner := metav1.GetControllerOf(pod)
		if owner == nil {
			return refuse("no controller owner reference")
		}
		gv, err := schema.ParseGroupVersion(owner.APIVersion)
		if err != nil || gv.Group != agentsv1alpha1.GroupVersion.Group {
			return refuse("its controller is a %s, not Shepherd's", owner.APIVersion)
		}
		if pod.Spec.ServiceAccountName != n.ServiceAccount(project) {
			return refuse("it runs as service account %q, not %q", pod.Spec.ServiceAccountName, n.ServiceAccount(project))
		}
		s := Session{PodName: pod.Name, PodUID: pod.UID, Project: project, OwnerUID: owner.UID,
			Worktree: pod.Labels[agentsv1alpha1.LabelWorktree]}
		switch owner.Kind {
		case "AgentSession":
			if pod.Labels[agentsv1alpha1.LabelSession] != owner.Name || pod.Name != n.AgentPod(owner.Name) {
				return refuse("its labels and name do not match its session %s", owner.Name)
			}
			s.Namespace, s.Name = pod.Namespace, owner.Name
		case "Worktree":
			if s.Worktree != owner.Name || pod.Name != n.CheckoutPod(owner.Name) || pod.Labels[agentsv1alpha1.LabelSession] != "" {
				return refuse("its labels and name do not match its Worktree %s", owner.Name)
			}
			s.Namespace = pod.Namespace
		default:
			return refuse("its controller is a %s", owner.Kind)
		}
		return s, nil
	}
}
