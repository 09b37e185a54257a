package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/runnertls"
)

// RunnerTLSSecret holds the runner channel's CA and serving certificate in the manager's
// namespace (docs/security.md, "The runner channel").
const RunnerTLSSecret = "shepherd-runner-tls"

// runnerCA is the CA certificate agent pods verify the manager with, once known.
type runnerCA struct {
	mu   sync.Mutex
	pem  []byte
	wait chan struct{}
}

func newRunnerCA() *runnerCA { return &runnerCA{wait: make(chan struct{})} }

// get returns the CA certificate, or nil before the first sync.
func (c *runnerCA) get() []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pem
}

// set records the CA and reports whether it changed.
func (c *runnerCA) set(p []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if runnertls.SameCA(c.pem, p) {
		return false
	}
	first := c.pem == nil
	c.pem = p
	if first {
		close(c.wait)
	}
	return true
}

// certSync keeps the runner channel's CA and serving certificate: read from the Secret, made
// or renewed when due, written back (optimistically: several replicas may race, the loser reads
// again), installed in the channel's listener, and the CA published for the Projects.
type certSync struct {
	client    client.Client
	reader    client.Reader
	namespace string
	names     []string
	certs     *runnertls.Certificates
	ca        *runnerCA
	now       func() time.Time
	// onCA is called when the CA changed (the Projects publish it again).
	onCA func()
}

var _ manager.LeaderElectionRunnable = (*certSync)(nil)

// NeedLeaderElection: every replica serves the channel with the shared certificate.
func (c *certSync) NeedLeaderElection() bool { return false }

// Start syncs at once, then every hour and whenever a sync failed (a minute later).
func (c *certSync) Start(ctx context.Context) error {
	log := ctrllog.FromContext(ctx).WithName("runner-tls")
	for {
		wait := time.Hour
		if err := c.sync(ctx); err != nil {
			log.Error(err, "Runner channel certificate not synced; retrying in a minute")
			wait = time.Minute
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (c *certSync) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var sec *corev1.Secret
	var have runnertls.Bundle
	if c.namespace != "" {
		sec = &corev1.Secret{}
		err := c.reader.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: RunnerTLSSecret}, sec)
		switch {
		case apierrors.IsNotFound(err):
			sec = nil
		case err != nil:
			return fmt.Errorf("read the runner TLS Secret: %w", err)
		default:
			have = runnertls.FromData(sec.Data)
		}
	} else if cur := c.ca.get(); cur != nil {
		return nil // no namespace (a manager outside the cluster): the bundle lives in memory
	}
	b, changed, err := runnertls.Ensure(have, c.names, c.now())
	if err != nil {
		return err
	}
	if changed && c.namespace != "" {
		if err := c.write(ctx, sec, b); err != nil {
			return err
		}
	}
	if err := c.certs.Set(b); err != nil {
		return err
	}
	if c.ca.set(b.CACert) && c.onCA != nil {
		c.onCA()
	}
	return nil
}

func (c *certSync) write(ctx context.Context, sec *corev1.Secret, b runnertls.Bundle) error {
	if sec == nil {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: RunnerTLSSecret,
			Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue}}, Type: corev1.SecretTypeOpaque, Data: b.Data()}
		if err := c.client.Create(ctx, sec); err != nil {
			return fmt.Errorf("create the runner TLS Secret: %w", err)
		}
		return nil
	}
	sec.Data = b.Data()
	if err := c.client.Update(ctx, sec); err != nil {
		return fmt.Errorf("update the runner TLS Secret: %w", err)
	}
	return nil
}

// reconcileRunnerCA publishes the runner channel's CA certificate as a ConfigMap in the
// Project's namespace, where agent pods mount it (the CA's key never leaves the manager's
// namespace). The ConfigMap is shared by the namespace's Projects and left in place when one is
// deleted: it holds nothing secret.
func (r *ProjectReconciler) reconcileRunnerCA(ctx context.Context, s *projectScope) error {
	ca := r.RunnerCA.get()
	if ca == nil {
		return nil
	}
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: s.project.Namespace, Name: RunnerCAConfigMap}
	err := r.Client.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByValue}},
			Data: map[string]string{"ca.crt": string(ca)}}
		if err := r.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("publish the runner CA: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read the runner CA ConfigMap: %w", err)
	case cm.Data["ca.crt"] == string(ca):
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data = map[string]string{"ca.crt": string(ca)}
	if err := r.Client.Patch(ctx, cm, patch); err != nil {
		return fmt.Errorf("update the runner CA: %w", err)
	}
	return nil
}
