package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The local cluster's storage (hack/localcluster/storage.go and provisioner.go).
const (
	localStorageClass = "shepherd-local"
	localProvisioner  = "shepherd.dev/local"
	// agentUID is the uid, gid and fsGroup of Shepherd's pods (the images' nonroot user).
	agentUID = int64(65532)
)

// restrictedNamespace creates a namespace enforcing the restricted Pod Security Standard, like
// the ones agent pods run in, and waits for its default ServiceAccount. The caller deletes it.
func restrictedNamespace(ctx context.Context, c *cluster, prefix string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	Expect(c.client.Create(ctx, ns)).To(Succeed())
	// The controller-manager creates the namespace's default ServiceAccount.
	Eventually(func() error {
		return c.client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	return ns
}

// claim is a PersistentVolumeClaim without a class: the default class (shepherd-local) applies.
func claim(ns, name, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// volumePod runs command as Shepherd's pods run: uid/gid 65532, fsGroup 65532, the restricted
// profile, the claim mounted at /workspace.
func volumePod(ns, name, claimName string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(agentUID),
				RunAsGroup:          ptr.To(agentUID),
				FSGroup:             ptr.To(agentUID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "main", Image: runnerImage, ImagePullPolicy: corev1.PullNever,
				Command: command,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}},
			}},
			Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
			}}},
		},
	}
}

// runToCompletion creates pod and waits until it succeeded; a failure shows its logs.
func runToCompletion(ctx context.Context, c *cluster, pod *corev1.Pod) {
	Expect(c.client.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		if pod.Status.Phase == corev1.PodFailed {
			StopTrying(fmt.Sprintf("pod %s failed: %s", pod.Name, podLogs(ctx, c, pod))).Now()
		}
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s: %s", pod.Name, describePending(ctx, c, pod))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// describePending says why a pod has not finished: its conditions and its claim's events.
func describePending(ctx context.Context, c *cluster, pod *corev1.Pod) string {
	out := ""
	for _, cond := range pod.Status.Conditions {
		out += string(cond.Type) + "=" + string(cond.Status) + " " + cond.Message + "; "
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out += "claim events: " + eventsOf(ctx, c, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// eventsOf lists the reasons and messages of an object's events.
func eventsOf(ctx context.Context, c *cluster, ns, name string) string {
	evs, err := c.clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	out := ""
	for _, e := range evs.Items {
		out += e.Reason + ": " + e.Message + "\n"
	}
	return out
}

// boundVolume waits for the claim to be bound and returns it with its volume.
func boundVolume(ctx context.Context, c *cluster, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	Eventually(func(g Gomega) {
		g.Expect(c.client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
	}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	pv := &corev1.PersistentVolume{}
	Expect(c.client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	return pv
}

// volumeDir is where the provisioner keeps a volume's data on the host.
func volumeDir(c *cluster, pv *corev1.PersistentVolume) string {
	return filepath.Join(c.runDir, "volumes", pv.Name)
}

// deleteAndWait deletes obj and waits until the API no longer has it.
func deleteAndWait(ctx context.Context, c *cluster, obj client.Object) {
	Expect(client.IgnoreNotFound(c.client.Delete(ctx, obj))).To(Succeed())
	waitGone(ctx, c, obj)
}

// waitGone waits until the API no longer has obj (deleted by someone else).
func waitGone(ctx context.Context, c *cluster, obj client.Object) {
	Eventually(func() error {
		return c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	}).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(Satisfy(isNotFound), "%T %s is gone", obj, obj.GetName())
}

func isNotFound(err error) bool { return err != nil && client.IgnoreNotFound(err) == nil }
