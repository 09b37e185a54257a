package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// +kubebuilder:rbac:groups=storage.k8s.io,resources=volumeattachments,verbs=list

// volumeHeldAfter is how long a scheduled agent pod waits for its volumes before Shepherd looks
// for what holds them (attaching takes seconds when nothing does), in nanoseconds; tests
// shorten it.
var volumeHeldAfter atomic.Int64

func init() { volumeHeldAfter.Store(int64(15 * time.Second)) }

// volumeHeld says which ReadWriteOnce volume a scheduled, not yet started pod waits for because
// it is still attached to another node, and what frees it; "" when none is. A node lost with a
// pod on it keeps its volumes attached until Kubernetes' attach-detach controller gives up on the
// unmount (6 minutes) or the node is tainted out-of-service; a healthy node keeps it while a pod
// there uses it. VolumeAttachments are cluster-scoped and read uncached, only for such pods; an
// install without the permission (namespaced) says nothing rather than guess.
func (r *AgentSessionReconciler) volumeHeld(ctx context.Context, pod *corev1.Pod) string {
	if pod.Spec.NodeName == "" || !pod.DeletionTimestamp.IsZero() || pod.Status.Phase != corev1.PodPending ||
		r.now().Sub(pod.CreationTimestamp.Time) < time.Duration(volumeHeldAfter.Load()) {
		return ""
	}
	var claims []*corev1.PersistentVolumeClaim
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); err != nil {
			continue
		}
		single := slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) || slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOncePod)
		if single && pvc.Spec.VolumeName != "" {
			claims = append(claims, pvc)
		}
	}
	if len(claims) == 0 {
		return ""
	}
	var vas storagev1.VolumeAttachmentList
	if err := r.APIReader.List(ctx, &vas); err != nil {
		if !apierrors.IsForbidden(err) {
			log.FromContext(ctx).V(1).Info("cannot list VolumeAttachments", "error", err.Error())
		}
		return ""
	}
	return heldBy(claims, vas.Items, pod.Spec.NodeName, func(name string) (*corev1.Node, bool) {
		n := &corev1.Node{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, n)
		return n, err == nil
	}, r.now())
}

// heldBy is volumeHeld's judgement over what was read. Pure but for node, a lookup.
func heldBy(claims []*corev1.PersistentVolumeClaim, vas []storagev1.VolumeAttachment, podNode string,
	node func(string) (*corev1.Node, bool), now time.Time) string {
	for _, pvc := range claims {
		for _, va := range vas {
			src := va.Spec.Source.PersistentVolumeName
			if src == nil || *src != pvc.Spec.VolumeName || va.Spec.NodeName == podNode || !va.Status.Attached {
				continue
			}
			head := fmt.Sprintf("volume %s (claim %s, ReadWriteOnce) is still attached to node %s", pvc.Spec.VolumeName, pvc.Name, va.Spec.NodeName)
			n, found := node(va.Spec.NodeName)
			switch {
			case !found:
				return head + ", which is gone: Kubernetes detaches it within about 6 minutes"
			case !nodeReady(n):
				since := ""
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady {
						since = fmt.Sprintf(" for %s", now.Sub(c.LastTransitionTime.Time).Round(time.Second))
					}
				}
				return fmt.Sprintf("%s, which has not been Ready%s: Kubernetes detaches it about 6 minutes after the node stopped, "+
					"or at once when the node is known to be down and tainted: kubectl taint nodes %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
					head, since, va.Spec.NodeName)
			default:
				return head + ", where another pod uses it: a ReadWriteOnce volume serves one node at a time (give the Project a ReadWriteMany storage class, or keep its pods on one node)"
			}
		}
	}
	return ""
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
