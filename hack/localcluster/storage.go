package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The local cluster's storage: one StorageClass, the cluster's default, served by the provisioner
// component (`localcluster provisioner`, provisioner.go), which makes a directory under
// <run>/volumes for each claim and a `local` PersistentVolume for it. docs/local-cluster.md,
// "Storage".
const (
	storageClassName = "shepherd-local"
	// provisionerName is the StorageClass's provisioner: what the PV controller writes into a
	// claim's volume.kubernetes.io/storage-provisioner annotation and the provisioner into each
	// volume's pv.kubernetes.io/provisioned-by.
	provisionerName = "shepherd.dev/local"
	// provisionerUser is the provisioner's client certificate identity, bound to the
	// provisionerUser ClusterRole below and nothing else.
	provisionerUser = "system:shepherd-local-provisioner"
	// volumeGID owns every volume directory (mode 2770): Shepherd's pods run as 65532 with
	// fsGroup 65532. The StorageClass parameter "gid" carries it to the provisioner.
	volumeGID = 65532
	// paramGID is the StorageClass parameter naming the volumes' group.
	paramGID = "gid"
	// annDefaultClass makes a class the one claims without storageClassName get (admission).
	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
)

// storageClass is the cluster's default class: volumes bound when a pod uses the claim (so the
// scheduler picks the node first, as with real topology-constrained storage), deleted with
// their claim, expandable, and only on the real node (KWOK nodes have no disk).
func storageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        storageClassName,
			Annotations: map[string]string{annDefaultClass: "true"},
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "shepherd-localcluster"},
		},
		Provisioner:          provisionerName,
		Parameters:           map[string]string{paramGID: strconv.Itoa(volumeGID)},
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowVolumeExpansion: ptr.To(true),
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: corev1.LabelHostname, Values: []string{nodeName}},
		}}},
	}
}

// provisionerRBAC is what an external provisioner and resizer need: create and delete volumes
// (update for the finalizer and for resizing), read claims and update their status (resizing),
// read StorageClasses, and write events.
func provisionerRBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	name := "shepherd-local-provisioner"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{storagev1.GroupName}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: provisionerUser}},
	}
	return role, binding
}

// installStorage creates the provisioner's RBAC and the StorageClass (a fresh cluster has
// neither; an existing object is kept).
func installStorage(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	role, binding := provisionerRBAC()
	_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	_, err = cs.StorageV1().StorageClasses().Create(ctx, storageClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", storageClassName, err)
	}
	return nil
}

// provisionerArgs runs the provisioner for the real node with its own identity.
func provisionerArgs(l layout) []string {
	return []string{
		"provisioner",
		"--kubeconfig=" + l.kubeconfig(cProvisioner),
		"--volumes-dir=" + l.volumes(),
		"--node=" + nodeName,
		"--name=" + provisionerName,
		fmt.Sprintf("--healthz-address=127.0.0.1:%d", provisionerPort),
	}
}

// installProvisionerBinary puts this program into the run directory under the component's
// name: `go run` and the e2e suite run it from directories that disappear while the cluster
// keeps running, and `down` recognises components by their executable's name. A hard link when
// the run directory is on the same filesystem, else a copy.
func installProvisionerBinary(l layout) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program: %w", err)
	}
	dst := l.path("bin", cProvisioner)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	_ = os.Remove(dst)
	if err := os.Link(self, dst); err == nil {
		return dst, nil
	}
	if err := copyFile(self, dst, 0o755); err != nil {
		return "", fmt.Errorf("install the provisioner: %w", err)
	}
	return dst, nil
}

func copyFile(src, dst string, mode os.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = io.Copy(out, in)
	return err
}
