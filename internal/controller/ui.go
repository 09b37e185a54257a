package controller

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/kubectlplugin"
	"github.com/shepherd-dev/shepherd/internal/tracker"
	"github.com/shepherd-dev/shepherd/internal/ui"
)

// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;patch,resourceNames=v1alpha1.ui.agents.shepherd.dev
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// The API server's front-proxy settings, as every aggregated API server reads them (the
// informers ask for this one name, which resourceNames allow for list and watch too).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,resourceNames=extension-apiserver-authentication

var apiServiceGVK = schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}

// setupUI adds the aggregated API server (transcripts and the dashboard) and keeps the
// APIService's caBundle on the runner CA that signs its certificate. It serves on the leader,
// which holds the transcript windows. A cluster whose API server has no aggregation layer gets
// an error in the log and no UI; reconciling goes on.
func setupUI(_ context.Context, mgr ctrl.Manager, cfg Config, deps *Deps) error {
	if cfg.UIBindAddress == "" || cfg.UIBindAddress == "0" {
		return nil
	}
	if deps.runnerCerts == nil {
		return errors.New("the UI server needs the runner channel's TLS (--runner-tls): its certificate is the channel's")
	}
	if err := mgr.Add(&uiServer{mgr: mgr, addr: cfg.UIBindAddress, deps: deps}); err != nil {
		return err
	}
	if cfg.PodName != "" && cfg.ManagerNamespace != "" {
		if err := mgr.Add(&uiServingLabel{client: mgr.GetClient(), pod: types.NamespacedName{Namespace: cfg.ManagerNamespace, Name: cfg.PodName},
			elected: mgr.Elected(), log: mgr.GetLogger().WithName("ui")}); err != nil {
			return err
		}
	}
	inject := &caBundleInjector{client: mgr.GetClient(), reader: mgr.GetAPIReader(), ca: deps.RunnerCA, kick: make(chan struct{}, 1), log: mgr.GetLogger().WithName("ui")}
	deps.onCAChange(inject.poke)
	return mgr.Add(inject)
}

// uiServer reads how the API server vouches for users, then serves the UI until ctx ends.
type uiServer struct {
	mgr  ctrl.Manager
	addr string
	deps *Deps
}

func (u *uiServer) Start(ctx context.Context) error {
	log := u.mgr.GetLogger().WithName("ui")
	var delegated *ui.Delegated
	for {
		var err error
		if delegated, err = ui.NewDelegated(ctx, u.mgr.GetConfig()); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Error(err, "The transcript API and dashboard cannot start yet; trying again in a minute")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Minute):
		}
	}
	go delegated.Run(ctx)
	dyn, err := dynamic.NewForConfig(u.mgr.GetConfig())
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(u.mgr.GetConfig())
	if err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	srv, err := ui.NewServer(ui.Options{Sessions: u.mgr.GetClient(), Transcripts: u.deps.Transcripts,
		Authenticator: delegated.Authenticator, Authorizer: delegated.Authorizer,
		Steer: &kubectlplugin.Steerer{Dynamic: dyn, Kube: kube}, Issues: projectIssues{deps: u.deps}, CSRFKey: key, Now: u.deps.now, Log: log})
	if err != nil {
		return err
	}
	// The API server's front proxy shows its client certificate; the authenticator checks it
	// against the front-proxy CA (a request without one is only accepted with a bearer token
	// the API server reviews).
	tlsCfg := u.deps.runnerCerts.ServerConfig().Clone()
	tlsCfg.ClientAuth = tls.RequestClientCert
	tlsCfg.NextProtos = []string{"http/1.1"}
	hs := &httpServer{name: "ui", addr: u.addr, handler: srv, tls: tlsCfg, ready: u.deps.RunnerCA.wait, cancelOnStop: true}
	return hs.Start(ctx)
}

// NeedLeaderElection: the leader holds the transcript windows.
func (u *uiServer) NeedLeaderElection() bool { return true }

// caBundleInjector writes the runner CA into the APIService's caBundle, at start and whenever
// the CA changes, so the API server verifies the UI server's certificate (no cert-manager
// needed). An APIService that does not exist (the UI is not installed) is left alone.
type caBundleInjector struct {
	client client.Client
	// reader reads the APIService from the API server (the manager may get that one object,
	// not list or watch APIServices).
	reader client.Reader
	ca     *runnerCA
	kick   chan struct{}
	log    interface {
		Info(string, ...any)
		Error(error, string, ...any)
	}
}

func (c *caBundleInjector) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Start implements manager.Runnable; it runs on every replica (any may write it first: they
// write the same CA).
func (c *caBundleInjector) Start(ctx context.Context) error {
	select {
	case <-c.ca.wait:
	case <-ctx.Done():
		return nil
	}
	// A retry a minute covers an APIService created after the manager started.
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		if err := c.inject(ctx); err != nil {
			c.log.Error(err, "Write the UI APIService's caBundle")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-t.C:
		}
	}
}

func (c *caBundleInjector) NeedLeaderElection() bool { return false }

func (c *caBundleInjector) inject(ctx context.Context) error {
	pem := c.ca.get()
	if len(pem) == 0 {
		return nil
	}
	svc := &unstructured.Unstructured{}
	svc.SetGroupVersionKind(apiServiceGVK)
	if err := c.reader.Get(ctx, types.NamespacedName{Name: ui.APIServiceName}, svc); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return err
	}
	want := base64.StdEncoding.EncodeToString(pem)
	if got, _, _ := unstructured.NestedString(svc.Object, "spec", "caBundle"); got == want {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": want}})
	if err := c.client.Patch(ctx, svc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patch APIService %s: %w", ui.APIServiceName, err)
	}
	c.log.Info("Wrote the runner CA into the UI APIService's caBundle", "apiService", ui.APIServiceName)
	return nil
}

// LabelUIServing marks the manager pod that serves the UI (the leader): the UI Service selects it.
const LabelUIServing = "agents.shepherd.dev/ui-serving"

// uiServingLabel drops LabelUIServing from this replica's pod as it starts (a container restarted
// after it lost the lease keeps its pod, and the label), and sets it once elected.
type uiServingLabel struct {
	client  client.Client
	pod     types.NamespacedName
	elected <-chan struct{}
	log     interface {
		Info(string, ...any)
		Error(error, string, ...any)
	}
}

func (l *uiServingLabel) NeedLeaderElection() bool { return false }

func (l *uiServingLabel) Start(ctx context.Context) error {
	if err := l.set(ctx, nil); err != nil {
		l.log.Error(err, "Drop the UI label from this replica's pod", "pod", l.pod)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-l.elected:
	}
	v := "true"
	for {
		err := l.set(ctx, &v)
		if err == nil {
			l.log.Info("Serving the UI: labelled this replica's pod", "pod", l.pod, "label", LabelUIServing)
			return nil
		}
		l.log.Error(err, "Label this replica's pod as the UI's; trying again", "pod", l.pod)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

// set writes the label (nil removes it) with a merge patch.
func (l *uiServingLabel) set(ctx context.Context, v *string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelUIServing: v}}})
	pod := &unstructured.Unstructured{}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetNamespace(l.pod.Namespace)
	pod.SetName(l.pod.Name)
	return client.IgnoreNotFound(l.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}

// projectIssues lists a Project's open tracker issues for the UI (`kubectl shepherd batch`),
// with the tracker and credentials the backlog uses: the user's machine never holds them.
type projectIssues struct{ deps *Deps }

// ProjectIssues implements ui.IssueLister.
func (pi projectIssues) ProjectIssues(ctx context.Context, p *agentsv1alpha1.Project, labels []string, limit int) ([]tracker.Issue, error) {
	if p.Spec.Tracker == nil {
		return nil, ui.ErrNoTracker
	}
	f, err := pi.deps.connectForge(ctx, p)
	if err != nil {
		return nil, err
	}
	tr, err := pi.deps.connectTracker(ctx, p, f)
	if err != nil {
		return nil, err
	}
	if tr == nil {
		return nil, ui.ErrNoTracker
	}
	return tr.ListIssues(ctx, tracker.ListOptions{Labels: labels, Limit: limit})
}
