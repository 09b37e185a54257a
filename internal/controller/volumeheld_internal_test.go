package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHeldBy(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "widgets-workspace"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}}
	pv := func(s string) *string { return &s }
	va := func(node, volume string, attached bool) storagev1.VolumeAttachment {
		return storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: pv(volume)}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
	}
	nodes := map[string]*corev1.Node{
		"lost": {Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-4 * time.Minute))}}}},
		"busy": {Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
	}
	node := func(n string) (*corev1.Node, bool) { x, ok := nodes[n]; return x, ok }
	for _, c := range []struct {
		name string
		vas  []storagev1.VolumeAttachment
		want []string
	}{
		{"attached to a lost node", []storagev1.VolumeAttachment{va("lost", "pv-1", true)},
			[]string{"volume pv-1 (claim widgets-workspace, ReadWriteOnce) is still attached to node lost", "not been Ready for 4m0s", "out-of-service"}},
		{"attached to a node that is gone", []storagev1.VolumeAttachment{va("vanished", "pv-1", true)}, []string{"which is gone"}},
		{"attached to a healthy node", []storagev1.VolumeAttachment{va("busy", "pv-1", true)}, []string{"another pod uses it", "ReadWriteMany"}},
		{"attached to the pod's own node", []storagev1.VolumeAttachment{va("here", "pv-1", true)}, nil},
		{"detaching (not attached)", []storagev1.VolumeAttachment{va("lost", "pv-1", false)}, nil},
		{"another volume", []storagev1.VolumeAttachment{va("lost", "pv-2", true)}, nil},
		{"nothing attached", nil, nil},
	} {
		got := heldBy([]*corev1.PersistentVolumeClaim{claim}, c.vas, "here", node, now)
		if (got == "") != (c.want == nil) {
			t.Errorf("%s: heldBy = %q", c.name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
	}
}
