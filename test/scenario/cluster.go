package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm/webhook"
)

// Where config/default puts the manager and its webhook receiver.
const (
	ManagerNamespace = "shepherd-system"
	WebhooksService  = "shepherd-webhooks"
)

// NodeIP is the InternalIP of the cluster's real node (KWOK's fake nodes left out): where pods
// reach servers that run on the machine.
func NodeIP(ctx context.Context, cl client.Reader) (string, error) {
	var nodes corev1.NodeList
	if err := cl.List(ctx, &nodes); err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if _, fake := n.Annotations["kwok.x-k8s.io/node"]; fake {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address, nil
			}
		}
	}
	return "", errors.New("no real node with an InternalIP")
}

// WebhookURL is a Project's path on the manager's webhook receiver, through the receiver
// Service's cluster IP, which the machine reaches through kube-proxy: where the forges on the
// node deliver that Project's webhooks.
func WebhookURL(ctx context.Context, cl client.Reader, project types.NamespacedName) (string, error) {
	return WebhookURLIn(ctx, cl, ManagerNamespace, project)
}

// WebhookURLIn is WebhookURL for a manager in managerNS (a shard's release namespace).
func WebhookURLIn(ctx context.Context, cl client.Reader, managerNS string, project types.NamespacedName) (string, error) {
	svc := &corev1.Service{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: managerNS, Name: WebhooksService}, svc); err != nil {
		return "", fmt.Errorf("the manager's webhooks Service: %w", err)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", fmt.Errorf("service %s/%s has no cluster IP and port", managerNS, WebhooksService)
	}
	return fmt.Sprintf("http://%s%s", net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), webhook.ProjectPath(project)), nil
}

// RestrictedNamespace is a namespace enforcing the restricted Pod Security Standard, which agent
// pods meet.
func RestrictedNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
}

// WaitProjectReady waits until the Project's Ready condition is True; the error carries the
// condition the controller reported last.
func WaitProjectReady(ctx context.Context, cl client.Reader, key client.ObjectKey, timeout time.Duration) error {
	var last *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p := &agentsv1alpha1.Project{}
		if err := cl.Get(ctx, key, p); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		last = meta.FindStatusCondition(p.Status.Conditions, agentsv1alpha1.ConditionReady)
		return last != nil && last.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("project %s not Ready after %s: %s: %s", key, timeout, last.Reason, last.Message)
		}
		return fmt.Errorf("project %s not Ready after %s: no Ready condition", key, timeout)
	}
	return nil
}

// DeleteNamespace deletes a namespace and waits up to timeout until it is gone. Its Worktrees get
// the force-delete annotation first, so that one holding unpushed commits of an interrupted run
// does not hold the namespace; the manager must be running to release their finalizers.
func DeleteNamespace(ctx context.Context, cl client.Client, name string, timeout time.Duration) error {
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		return nil
	}
	var wts agentsv1alpha1.WorktreeList
	if err := cl.List(ctx, &wts, client.InNamespace(name)); err != nil {
		return err
	}
	for i := range wts.Items {
		wt := &wts.Items[i]
		patch := client.MergeFrom(wt.DeepCopy())
		if wt.Annotations == nil {
			wt.Annotations = map[string]string{}
		}
		wt.Annotations[agentsv1alpha1.ForceDeleteAnnotation] = "true"
		if err := cl.Patch(ctx, wt, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("annotate Worktree %s: %w", wt.Name, err)
		}
	}
	if err := cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s still terminating after %s (kubectl get all,shepherd -n %s): %w", name, timeout, name, err)
	}
	return nil
}

// Clients connects to the cluster of kubeconfig with a scheme that knows Shepherd's kinds: a
// controller-runtime client that can watch, and a clientset. qps and burst bound the client
// (client-go's defaults, 5 and 10, would pace a tool's own watching and polling).
func Clients(kubeconfig string, qps float32, burst int) (*rest.Config, client.WithWatch, kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, cl, cs, nil
}

// Scheme knows the built-in kinds and Shepherd's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(agentsv1alpha1.AddToScheme(s))
	return s
}
