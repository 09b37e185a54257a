package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
)

// testProvisioner is a provisioner on a fake core/v1 API (client-go's object tracker, which
// keeps what is written and answers reads from it) whose listers read the given indexers, so a
// test decides what the caches hold.
type testProvisioner struct {
	*provisioner
	cs                       *fakecorev1.FakeCoreV1
	claims, volumes, classes cache.Indexer
	events                   *record.FakeRecorder
}

func newTestProvisioner(t *testing.T, objs ...any) *testProvisioner {
	t.Helper()
	tp := &testProvisioner{
		cs:      fakeCore(),
		claims:  cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		volumes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		classes: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		events:  record.NewFakeRecorder(10),
	}
	tp.provisioner = &provisioner{
		name: provisionerName, node: nodeName, volumesDir: filepath.Join(t.TempDir(), "volumes"),
		cs: tp.cs, recorder: tp.events, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		claims:  corelisters.NewPersistentVolumeClaimLister(tp.claims),
		volumes: corelisters.NewPersistentVolumeLister(tp.volumes),
		classes: storagelisters.NewStorageClassLister(tp.classes),
	}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.PersistentVolumeClaim:
			err = tp.claims.Add(o)
		case *corev1.PersistentVolume:
			err = tp.volumes.Add(o)
			if err == nil {
				_, err = tp.cs.PersistentVolumes().Create(context.Background(), o, metav1.CreateOptions{})
			}
		case *storagev1.StorageClass:
			err = tp.classes.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// fakeCore is client-go's fake core/v1 client on an object tracker, as fake.NewClientset wires it.
func fakeCore() *fakecorev1.FakeCoreV1 {
	tracker := clienttesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())
	f := &clienttesting.Fake{}
	f.AddReactor("*", "*", clienttesting.ObjectReaction(tracker))
	return &fakecorev1.FakeCoreV1{Fake: f}
}

// pendingClaim is a claim of the local class after the scheduler picked node and the PV
// controller handed it to our provisioner.
func pendingClaim(node string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace", Namespace: "team", UID: types.UID("0f1e2d3c"), ResourceVersion: "7",
			Annotations: map[string]string{annStorageProvisioner: provisionerName, annSelectedNode: node}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(storageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")}},
		},
	}
}

func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown to the volume group needs root")
	}
}

// TestProvisionAndDelete: a claim handed to us gets a directory root:65532 2770 and a `local`
// volume pre-bound to it on the node; once Released, both go.
func TestProvisionAndDelete(t *testing.T) {
	skipUnlessRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	claim := pendingClaim(nodeName)
	tp := newTestProvisioner(t, claim, storageClass())

	g.Expect(tp.syncClaim(ctx, claim.Namespace, claim.Name)).To(Succeed())
	pv, err := tp.cs.PersistentVolumes().Get(ctx, "pvc-0f1e2d3c", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	dir := filepath.Join(tp.volumesDir, "pvc-0f1e2d3c")
	g.Expect(pv.Annotations).To(HaveKeyWithValue(annProvisionedBy, provisionerName))
	g.Expect(pv.Finalizers).To(ConsistOf(volumeFinalizer))
	g.Expect(pv.Spec.Local).To(Equal(&corev1.LocalVolumeSource{Path: dir}))
	g.Expect(pv.Spec.Capacity.Storage().String()).To(Equal("3Gi"))
	g.Expect(pv.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteMany))
	g.Expect(pv.Spec.PersistentVolumeReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimDelete))
	g.Expect(pv.Spec.StorageClassName).To(Equal(storageClassName))
	g.Expect(pv.Spec.ClaimRef).To(HaveField("UID", claim.UID))
	g.Expect(pv.Spec.ClaimRef).To(HaveField("Namespace", "team"))
	g.Expect(pv.Spec.NodeAffinity.Required.NodeSelectorTerms).To(ConsistOf(HaveField("MatchExpressions", ConsistOf(corev1.NodeSelectorRequirement{
		Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}))))
	st, err := os.Stat(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode()).To(Equal(os.ModeDir | volumeDirMode))
	g.Expect(st.Sys().(*syscall.Stat_t).Uid).To(BeZero())
	g.Expect(st.Sys().(*syscall.Stat_t).Gid).To(BeEquivalentTo(volumeGID))
	g.Expect(<-tp.events.Events).To(HavePrefix("Normal ProvisioningSucceeded"))

	// A second sync of the same claim makes nothing new.
	g.Expect(tp.volumes.Add(pv)).To(Succeed())
	g.Expect(tp.syncClaim(ctx, claim.Namespace, claim.Name)).To(Succeed())

	g.Expect(os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)).To(Succeed())
	pv.Status.Phase = corev1.VolumeReleased
	g.Expect(tp.volumes.Update(pv)).To(Succeed())
	g.Expect(tp.syncVolume(ctx, pv.Name)).To(Succeed())
	g.Expect(dir).NotTo(BeAnExistingFile())
	_, err = tp.cs.PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("not found")))
}

// TestShouldProvision: only claims the PV controller handed to this provisioner, of a class it
// serves, and for WaitForFirstConsumer only once a node is selected.
func TestShouldProvision(t *testing.T) {
	other := storageClass()
	other.Name, other.Provisioner = "other", "example.com/other"
	tp := newTestProvisioner(t, storageClass(), other)
	for name, tc := range map[string]struct {
		edit func(*corev1.PersistentVolumeClaim)
		want bool
	}{
		"handed to us": {func(*corev1.PersistentVolumeClaim) {}, true},
		"beta annotation": {func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[annBetaStorageProvisioner] = c.Annotations[annStorageProvisioner]
			delete(c.Annotations, annStorageProvisioner)
		}, true},
		"not handed over yet":  {func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, annStorageProvisioner) }, false},
		"no node selected yet": {func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, annSelectedNode) }, false},
		"another provisioner":  {func(c *corev1.PersistentVolumeClaim) { c.Annotations[annStorageProvisioner] = "example.com/other" }, false},
		"another class":        {func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To("other") }, false},
		"no class":             {func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = nil }, false},
	} {
		t.Run(name, func(t *testing.T) {
			c := pendingClaim(nodeName)
			tc.edit(c)
			_, ok, err := tp.shouldProvision(c)
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(Equal(tc.want))
		})
	}
}

// TestShouldProvisionUnknownClass: a claim handed to us whose class the cache lacks is retried.
func TestShouldProvisionUnknownClass(t *testing.T) {
	g := NewWithT(t)
	tp := newTestProvisioner(t)
	_, ok, err := tp.shouldProvision(pendingClaim(nodeName))
	g.Expect(ok).To(BeFalse())
	g.Expect(err).To(MatchError(ContainSubstring("not found")))
}

// TestProvisionRefusals: what no retry fixes is an event on the claim, no volume and no error.
func TestProvisionRefusals(t *testing.T) {
	type claimAndClass = func(*corev1.PersistentVolumeClaim, *storagev1.StorageClass)
	for name, edit := range map[string]claimAndClass{
		"a KWOK node": func(c *corev1.PersistentVolumeClaim, _ *storagev1.StorageClass) {
			c.Annotations[annSelectedNode] = kwokNodeName(0)
		},
		"block mode": func(c *corev1.PersistentVolumeClaim, _ *storagev1.StorageClass) {
			c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
		},
		"a clone": func(c *corev1.PersistentVolumeClaim, _ *storagev1.StorageClass) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		},
		"no size":      func(c *corev1.PersistentVolumeClaim, _ *storagev1.StorageClass) { c.Spec.Resources.Requests = nil },
		"a broken gid": func(_ *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) { sc.Parameters[paramGID] = "staff" },
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			claim, class := pendingClaim(nodeName), storageClass()
			edit(claim, class)
			tp := newTestProvisioner(t, claim, class)
			g.Expect(tp.syncClaim(context.Background(), claim.Namespace, claim.Name)).To(Succeed())
			g.Expect(<-tp.events.Events).To(HavePrefix("Warning ProvisioningFailed"))
			pvs, err := tp.cs.PersistentVolumes().List(context.Background(), metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pvs.Items).To(BeEmpty())
		})
	}
}

// TestDeleteOnlyOwnDirectories: a volume object claiming our name but pointing elsewhere never
// makes the provisioner delete that path.
func TestDeleteOnlyOwnDirectories(t *testing.T) {
	g := NewWithT(t)
	elsewhere := t.TempDir()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-forged", Annotations: map[string]string{annProvisionedBy: provisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: elsewhere}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
	}
	tp := newTestProvisioner(t, pv)
	g.Expect(tp.syncVolume(context.Background(), pv.Name)).To(Succeed())
	g.Expect(elsewhere).To(BeADirectory())
	g.Expect(<-tp.events.Events).To(HavePrefix("Warning VolumeFailedDelete"))
	_, err := tp.cs.PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the object stays for a human to look at")
}

// TestFinalizer: a volume deleted by hand keeps its finalizer while bound, and loses it (with
// its directory) once it is not.
func TestFinalizer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tp := newTestProvisioner(t)
	dir := filepath.Join(tp.volumesDir, "pvc-byhand")
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-byhand", Annotations: map[string]string{annProvisionedBy: provisionerName},
			Finalizers: []string{"kubernetes.io/pv-protection", volumeFinalizer}, DeletionTimestamp: ptr.To(metav1.Now())},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	g.Expect(tp.volumes.Add(pv)).To(Succeed())
	_, err := tp.cs.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(tp.syncVolume(ctx, pv.Name)).To(Succeed())
	g.Expect(dir).To(BeADirectory(), "bound: still in use")

	pv.Status.Phase = corev1.VolumeReleased
	g.Expect(tp.volumes.Update(pv)).To(Succeed())
	g.Expect(tp.syncVolume(ctx, pv.Name)).To(Succeed())
	g.Expect(dir).NotTo(BeAnExistingFile())
	got, err := tp.cs.PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Finalizers).To(ConsistOf("kubernetes.io/pv-protection"))
}

// TestResize: a bound claim whose request grew gets the new size on its volume and in its
// status, with no resize condition left.
func TestResize(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	claim := pendingClaim(nodeName)
	claim.Spec.VolumeName = volumeNameFor(claim)
	claim.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	claim.Status = corev1.PersistentVolumeClaimStatus{
		Phase:      corev1.ClaimBound,
		Capacity:   corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("3Gi")},
		Conditions: []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}},
	}
	tp := newTestProvisioner(t, storageClass())
	pv := tp.volumeFor(claim, storageClass(), claim.Spec.VolumeName, filepath.Join(tp.volumesDir, claim.Spec.VolumeName), resource.MustParse("3Gi"))
	g.Expect(tp.volumes.Add(pv)).To(Succeed())
	g.Expect(tp.claims.Add(claim)).To(Succeed())
	_, err := tp.cs.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = tp.cs.PersistentVolumeClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(tp.syncClaim(ctx, claim.Namespace, claim.Name)).To(Succeed())
	gotPV, err := tp.cs.PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gotPV.Spec.Capacity.Storage().String()).To(Equal("5Gi"))
	gotClaim, err := tp.cs.PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gotClaim.Status.Capacity.Storage().String()).To(Equal("5Gi"))
	g.Expect(gotClaim.Status.AllocatedResources.Storage().String()).To(Equal("5Gi"))
	g.Expect(gotClaim.Status.Conditions).To(BeEmpty())
	g.Expect(<-tp.events.Events).To(HavePrefix("Normal VolumeResizeSuccessful"))
}

// TestStorageClass: the class the brief asks for, served by our provisioner on the real node.
func TestStorageClass(t *testing.T) {
	g := NewWithT(t)
	sc := storageClass()
	g.Expect(sc.Name).To(Equal("shepherd-local"))
	g.Expect(sc.Annotations).To(HaveKeyWithValue("storageclass.kubernetes.io/is-default-class", "true"))
	g.Expect(sc.Provisioner).To(Equal(provisionerName))
	g.Expect(*sc.VolumeBindingMode).To(Equal(storagev1.VolumeBindingWaitForFirstConsumer))
	g.Expect(*sc.ReclaimPolicy).To(Equal(corev1.PersistentVolumeReclaimDelete))
	g.Expect(*sc.AllowVolumeExpansion).To(BeTrue())
	gid, err := classGID(sc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gid).To(Equal(65532))
	g.Expect(provisionerArgs(newLayout("/run/x"))).To(ContainElements("--volumes-dir=/run/x/volumes", "--node="+nodeName, "--name="+provisionerName))
}
