package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// SecretReader reads the Secret keys that Projects reference. The manager watches Secrets as
// metadata only (an informer of every Secret's data in the cluster would cost memory and widen
// what a compromised manager leaks); data is read with a direct GET and cached until the
// Secret's resourceVersion, seen through the metadata cache, changes. So a reconcile costs no API
// call unless the Secret changed.
type SecretReader struct {
	// Meta is a reader backed by a metadata-only cache of Secrets.
	Meta client.Reader
	// API reads Secrets straight from the API server.
	API client.Reader

	mu    sync.Mutex
	cache map[types.NamespacedName]cachedSecret
}

type cachedSecret struct {
	resourceVersion string
	data            map[string][]byte
}

// Key returns the value of ref in namespace ns, or a *StallingError with reason
// SecretNotFound or SecretKeyNotFound that tells the user what to create.
func (r *SecretReader) Key(ctx context.Context, ns string, ref agentsv1alpha1.SecretKeyRef, what string) ([]byte, error) {
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	rv, err := r.resourceVersion(ctx, key)
	if apierrors.IsNotFound(err) {
		return nil, Stalling(agentsv1alpha1.ReasonSecretNotFound, "Secret %q (%s) not found in namespace %s: create it with the key %q", ref.Name, what, ns, ref.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("read Secret %s metadata: %w", key, err)
	}
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if !ok || c.resourceVersion != rv {
		var s corev1.Secret
		if err := r.API.Get(ctx, key, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, Stalling(agentsv1alpha1.ReasonSecretNotFound, "Secret %q (%s) not found in namespace %s: create it with the key %q", ref.Name, what, ns, ref.Key)
			}
			return nil, fmt.Errorf("read Secret %s: %w", key, err)
		}
		c = cachedSecret{resourceVersion: s.ResourceVersion, data: s.Data}
		r.mu.Lock()
		if r.cache == nil {
			r.cache = map[types.NamespacedName]cachedSecret{}
		}
		r.cache[key] = c
		r.mu.Unlock()
	}
	v, ok := c.data[ref.Key]
	if !ok || len(v) == 0 {
		return nil, Stalling(agentsv1alpha1.ReasonSecretKeyNotFound, "Secret %q (%s) has no key %q: add it, or point the reference at the key that holds the value", ref.Name, what, ref.Key)
	}
	return v, nil
}

func (r *SecretReader) resourceVersion(ctx context.Context, key types.NamespacedName) (string, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.Meta.Get(ctx, key, m); err != nil {
		return "", err
	}
	return m.ResourceVersion, nil
}
