package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// The annotations of the external-provisioner contract (kubernetes-csi/external-provisioner and
// the PV controller in kube-controller-manager).
const (
	// annProvisionedBy on a volume names the provisioner that made it (and must delete it).
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// annStorageProvisioner on a claim: the PV controller sets it to the class's provisioner
	// once the claim should be provisioned (for WaitForFirstConsumer: once a node is selected).
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// annSelectedNode on a claim: the node the scheduler picked for its first pod.
	annSelectedNode = "volume.kubernetes.io/selected-node"
	// volumeFinalizer keeps a volume object until its directory is gone, so a PV deleted by
	// hand does not leave its data behind (external-provisioner does the same with its own).
	volumeFinalizer = "shepherd.dev/local-volume"
)

// provisionerAPITimeout bounds every API call the provisioner makes.
const provisionerAPITimeout = 15 * time.Second

// volumeDirMode is group-writable with setgid (new files and directories inherit the group):
// the state the kubelet gives a volume for fsGroup, so `fsGroupChangePolicy: OnRootMismatch`
// finds nothing to change. Owner root, like the root of a freshly formatted disk.
const volumeDirMode = 0o770 | fs.ModeSetgid

// provisioner provisions, deletes and resizes `local` PersistentVolumes for claims of
// StorageClasses whose provisioner is name, as directories under volumesDir on node.
type provisioner struct {
	name       string
	node       string
	volumesDir string
	// cs is the core/v1 client, all the provisioner writes with (its tests need no fake of the
	// whole clientset, whose ~70 packages cost a minute of CPU on every cold `make test`).
	cs       typedcorev1.CoreV1Interface
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	recorder record.EventRecorder
	log      *slog.Logger
}

func cmdProvisioner(ctx context.Context, args []string) error {
	var (
		kubeconfig, healthzAddr string
		p                       provisioner
		workers                 int
	)
	fs := flag.NewFlagSet("provisioner", flag.ContinueOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig of the provisioner's identity.")
	fs.StringVar(&p.volumesDir, "volumes-dir", "", "Directory holding one directory per volume.")
	fs.StringVar(&p.node, "node", nodeName, "The node whose disk holds the volumes.")
	fs.StringVar(&p.name, "name", provisionerName, "Provisioner name (the StorageClass's provisioner field).")
	fs.StringVar(&healthzAddr, "healthz-address", fmt.Sprintf("127.0.0.1:%d", provisionerPort), "Address of /healthz (200 once the caches are synced).")
	fs.IntVar(&workers, "workers", 2, "Claims and volumes handled in parallel.")
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	if kubeconfig == "" || p.volumesDir == "" {
		return usageErr{"provisioner needs --kubeconfig and --volumes-dir"}
	}
	var err error
	if p.volumesDir, err = filepath.Abs(p.volumesDir); err != nil {
		return err
	}
	p.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	klog.SetSlogLogger(p.log) // client-go's own messages in the same format
	if err := os.MkdirAll(p.volumesDir, 0o755); err != nil {
		return err
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "shepherd-local-provisioner"
	cfg.QPS, cfg.Burst = 50, 100
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	p.cs = clientset.CoreV1()

	// /healthz answers before the caches sync (503), so `up` tells "not ready" from "not running".
	var synced atomic.Bool
	ln, err := net.Listen("tcp", healthzAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", healthzAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("healthz server stopped", "err", err)
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.cs.Events("")})
	defer broadcaster.Shutdown()
	p.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "shepherd-local-provisioner"})

	factory := informers.NewSharedInformerFactory(clientset, 0)
	claimInformer := factory.Core().V1().PersistentVolumeClaims()
	volumeInformer := factory.Core().V1().PersistentVolumes()
	p.claims, p.volumes = claimInformer.Lister(), volumeInformer.Lister()
	p.classes = factory.Storage().V1().StorageClasses().Lister()

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "provisioner"})
	enqueue := func(kind string) func(obj any) {
		return func(obj any) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(kind + "/" + key)
			}
		}
	}
	handlers := func(kind string) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: enqueue(kind), UpdateFunc: func(_, obj any) { enqueue(kind)(obj) }}
	}
	if _, err := claimInformer.Informer().AddEventHandler(handlers("claim")); err != nil {
		return err
	}
	if _, err := volumeInformer.Informer().AddEventHandler(handlers("volume")); err != nil {
		return err
	}

	p.log.Info("starting", "provisioner", p.name, "node", p.node, "volumesDir", p.volumesDir, "healthz", ln.Addr().String())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %v cache did not sync", typ)
		}
	}
	synced.Store(true)
	p.log.Info("caches synced; serving claims")

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p.processNext(ctx, queue) {
			}
		})
	}
	<-ctx.Done()
	p.log.Info("stopping")
	queue.ShutDown()
	wg.Wait()
	return nil
}

// processNext handles one key of the queue; false when the queue shut down. Failures are retried
// with the controller rate limiter's exponential backoff.
func (p *provisioner) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := p.sync(ctx, key); err != nil {
		// A conflict means the cache was behind the API server (another controller wrote the
		// object): routine, retried at once from the newer copy.
		level := slog.LevelError
		if apierrors.IsConflict(err) {
			level = slog.LevelInfo
		}
		p.log.Log(ctx, level, "sync failed; retrying", "key", key, "retries", queue.NumRequeues(key), "err", err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}

// sync dispatches "claim/<namespace>/<name>" and "volume/<name>".
func (p *provisioner) sync(ctx context.Context, key string) error {
	kind, rest, _ := strings.Cut(key, "/")
	switch kind {
	case "claim":
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			return p.syncClaim(ctx, ns, name)
		}
	case "volume":
		return p.syncVolume(ctx, rest)
	}
	return nil
}

// syncClaim provisions a volume for an unbound claim that asks for this provisioner, or resizes
// the volume of a bound claim whose request grew.
func (p *provisioner) syncClaim(ctx context.Context, ns, name string) error {
	claim, err := p.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // deleted: its volume turns Released and syncVolume deletes it
	}
	if err != nil {
		return err
	}
	if claim.DeletionTimestamp != nil {
		return nil
	}
	if claim.Spec.VolumeName != "" {
		return p.resize(ctx, claim)
	}
	class, ok, err := p.shouldProvision(claim)
	if !ok {
		return err
	}
	return p.provision(ctx, claim, class)
}

// shouldProvision follows external-provisioner: the PV controller has annotated the claim with
// this provisioner's name (it does so for WaitForFirstConsumer classes only after the scheduler
// selected a node), and the claim's class is served by this provisioner. A class the cache does
// not hold yet (just created) is an error, so the claim is retried.
func (p *provisioner) shouldProvision(claim *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, bool, error) {
	who := claim.Annotations[annStorageProvisioner]
	if who == "" {
		who = claim.Annotations[annBetaStorageProvisioner]
	}
	if who != p.name || claim.Spec.StorageClassName == nil {
		return nil, false, nil
	}
	class, err := p.classes.Get(*claim.Spec.StorageClassName)
	if err != nil {
		return nil, false, fmt.Errorf("StorageClass %s of claim %s/%s: %w", *claim.Spec.StorageClassName, claim.Namespace, claim.Name, err)
	}
	if class.Provisioner != p.name {
		return nil, false, nil
	}
	if class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer &&
		claim.Annotations[annSelectedNode] == "" {
		return nil, false, nil
	}
	return class, true, nil
}

// volumeNameFor is external-provisioner's naming: pvc-<claim UID>.
func volumeNameFor(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

func (p *provisioner) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	start := time.Now()
	pvName := volumeNameFor(claim)
	log := p.log.With("claim", claim.Namespace+"/"+claim.Name, "volume", pvName)
	if _, err := p.volumes.Get(pvName); err == nil {
		return nil // made already; the PV controller binds it
	}
	// Problems no retry fixes: say so on the claim (kubectl describe pvc) and stop.
	fail := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		log.Warn("cannot provision", "reason", msg)
		p.recorder.Event(claim, corev1.EventTypeWarning, "ProvisioningFailed", msg)
		return nil
	}
	if node := claim.Annotations[annSelectedNode]; node != "" && node != p.node {
		return fail("the scheduler selected node %q, but only %q has local volumes", node, p.node)
	}
	if claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
		return fail("volume mode %s is not supported: local volumes are directories", *claim.Spec.VolumeMode)
	}
	if claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil {
		return fail("data sources (clones, snapshots, populators) are not supported")
	}
	size, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || size.Sign() <= 0 {
		return fail("the claim requests no storage size")
	}
	gid, err := classGID(class)
	if err != nil {
		return fail("%v", err)
	}

	dir := filepath.Join(p.volumesDir, pvName)
	if err := makeVolumeDir(dir, gid); err != nil {
		p.recorder.Eventf(claim, corev1.EventTypeWarning, "ProvisioningFailed", "create %s: %v", dir, err)
		return err
	}
	pv := p.volumeFor(claim, class, pvName, dir, size)
	cctx, cancel := context.WithTimeout(ctx, provisionerAPITimeout)
	defer cancel()
	if _, err := p.cs.PersistentVolumes().Create(cctx, pv, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		p.recorder.Eventf(claim, corev1.EventTypeWarning, "ProvisioningFailed", "create volume %s: %v", pvName, err)
		return fmt.Errorf("create volume %s: %w", pvName, err)
	}
	log.Info("provisioned", "path", dir, "size", size.String(), "accessModes", claim.Spec.AccessModes, "node", p.node, "took", time.Since(start).Round(time.Millisecond))
	p.recorder.Eventf(claim, corev1.EventTypeNormal, "ProvisioningSucceeded", "Successfully provisioned volume %s at %s on %s", pvName, dir, p.node)
	return nil
}

// classGID reads the group that owns the class's volumes (parameter "gid", default 65532).
func classGID(class *storagev1.StorageClass) (int, error) {
	v, ok := class.Parameters[paramGID]
	if !ok {
		return volumeGID, nil
	}
	gid, err := strconv.Atoi(v)
	if err != nil || gid < 0 {
		return 0, fmt.Errorf("StorageClass %s: parameter %s=%q is not a group ID", class.Name, paramGID, v)
	}
	return gid, nil
}

// makeVolumeDir creates dir owned by root:gid with mode 2770. Mkdir's mode passes through the
// umask and cannot set setgid, hence the explicit chmod.
func makeVolumeDir(dir string, gid int) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		return err
	}
	return os.Chmod(dir, volumeDirMode)
}

// volumeFor is the PersistentVolume for a claim: a `local` volume at dir on the node, the
// claim's size and access modes, the class's reclaim policy and mount options, pre-bound to the
// claim (the PV controller completes the binding).
func (p *provisioner) volumeFor(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, name, dir string, size resource.Quantity) *corev1.PersistentVolume {
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{annProvisionedBy: p.name},
			Finalizers:  []string{volumeFinalizer},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   slices.Clone(claim.Spec.AccessModes),
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			MountOptions:                  slices.Clone(class.MountOptions),
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
			},
		},
	}
}

// syncVolume deletes the directory and the object of a volume this provisioner made once its
// claim is gone (Released, reclaim policy Delete), and releases the finalizer of a volume
// deleted by hand once no claim is bound to it.
func (p *provisioner) syncVolume(ctx context.Context, name string) error {
	pv, err := p.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Annotations[annProvisionedBy] != p.name {
		return nil
	}
	reclaimDelete := pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete
	log := p.log.With("volume", pv.Name)
	switch {
	case pv.DeletionTimestamp == nil && pv.Status.Phase == corev1.VolumeReleased && reclaimDelete:
		start := time.Now()
		if done, err := p.removeVolumeDir(pv); !done {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, provisionerAPITimeout)
		defer cancel()
		err := p.cs.PersistentVolumes().Delete(cctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete volume %s: %w", pv.Name, err)
		}
		log.Info("deleted: its claim is gone", "claim", claimOf(pv), "path", pv.Spec.Local.Path, "took", time.Since(start).Round(time.Millisecond))
		return nil
	case pv.DeletionTimestamp != nil && slices.Contains(pv.Finalizers, volumeFinalizer):
		if pv.Status.Phase == corev1.VolumeBound {
			return nil // still in use; Released once its claim is gone
		}
		if reclaimDelete {
			if done, err := p.removeVolumeDir(pv); !done {
				return err
			}
		}
		return p.dropFinalizer(ctx, pv)
	}
	return nil
}

func claimOf(pv *corev1.PersistentVolume) string {
	if pv.Spec.ClaimRef == nil {
		return ""
	}
	return pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
}

// removeVolumeDir deletes a volume's directory. It only ever deletes <volumes dir>/<volume
// name>, never another path a volume object may carry, and never through a mount. done is false
// when the volume must wait (err set: retry) or must be left alone (err nil: an event says why).
func (p *provisioner) removeVolumeDir(pv *corev1.PersistentVolume) (done bool, err error) {
	dir := filepath.Join(p.volumesDir, pv.Name)
	if pv.Spec.Local == nil || filepath.Clean(pv.Spec.Local.Path) != dir {
		msg := fmt.Sprintf("not deleting: the volume's path is not %s", dir)
		p.log.Warn(msg, "volume", pv.Name)
		p.recorder.Event(pv, corev1.EventTypeWarning, "VolumeFailedDelete", msg)
		return false, nil
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return false, err
	}
	if len(mounts) > 0 {
		return false, fmt.Errorf("%s still has mounts: %v", dir, mounts)
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove %s: %w", dir, err)
	}
	return true, nil
}

// dropFinalizer removes this provisioner's finalizer with a JSON patch that tests its position,
// so it neither needs the latest resourceVersion nor touches the other finalizers.
func (p *provisioner) dropFinalizer(ctx context.Context, pv *corev1.PersistentVolume) error {
	i := slices.Index(pv.Finalizers, volumeFinalizer)
	if i < 0 {
		return nil
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`, i, volumeFinalizer, i)
	cctx, cancel := context.WithTimeout(ctx, provisionerAPITimeout)
	defer cancel()
	_, err := p.cs.PersistentVolumes().Patch(cctx, pv.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the finalizer of %s: %w", pv.Name, err)
	}
	p.log.Info("removed the finalizer", "volume", pv.Name)
	return nil
}

// resize is the external-resizer's part for a bound claim of ours whose request exceeds its
// capacity (the apiserver accepts a larger request only when the class allows expansion): the
// volume's capacity, then the claim's status. A directory has no size to grow.
func (p *provisioner) resize(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	if claim.Status.Phase != corev1.ClaimBound {
		return nil
	}
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := claim.Status.Capacity[corev1.ResourceStorage]
	if want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := p.volumes.Get(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Annotations[annProvisionedBy] != p.name || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, provisionerAPITimeout)
	defer cancel()
	if pvSize := pv.Spec.Capacity[corev1.ResourceStorage]; pvSize.Cmp(want) < 0 {
		pv = pv.DeepCopy()
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := p.cs.PersistentVolumes().Update(cctx, pv, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("resize volume %s: %w", pv.Name, err)
		}
	}
	claim = claim.DeepCopy()
	if claim.Status.Capacity == nil {
		claim.Status.Capacity = corev1.ResourceList{}
	}
	claim.Status.Capacity[corev1.ResourceStorage] = want
	if claim.Status.AllocatedResources == nil {
		claim.Status.AllocatedResources = corev1.ResourceList{}
	}
	claim.Status.AllocatedResources[corev1.ResourceStorage] = want
	delete(claim.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	claim.Status.Conditions = slices.DeleteFunc(claim.Status.Conditions, func(c corev1.PersistentVolumeClaimCondition) bool {
		switch c.Type {
		case corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
			corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError:
			return true
		}
		return false
	})
	if _, err := p.cs.PersistentVolumeClaims(claim.Namespace).UpdateStatus(cctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	p.log.Info("resized", "claim", claim.Namespace+"/"+claim.Name, "volume", pv.Name, "from", have.String(), "to", want.String())
	p.recorder.Eventf(claim, corev1.EventTypeNormal, "VolumeResizeSuccessful", "Resized volume %s to %s (local directories have no size limit)", pv.Name, want.String())
	return nil
}
