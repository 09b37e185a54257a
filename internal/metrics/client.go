package metrics

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CountingClient counts the writes a client makes in APIWrites, by kind, verb and subresource.
// Every attempt is counted, refused or not: each costs the API server a request. Reads are served
// from the manager's cache and are not counted; neither are Events (the recorder writes them
// through its own client, aggregated and rate-limited) nor leader-election lease renewals.
type CountingClient struct {
	client.Client
	M *Metrics
}

var _ client.Client = (*CountingClient)(nil)

func (c *CountingClient) count(obj runtime.Object, verb, subresource string) {
	if c.M == nil {
		return
	}
	c.M.APIWrites.WithLabelValues(c.kindOf(obj), verb, subresource).Inc()
}

func (c *CountingClient) kindOf(obj runtime.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, err := c.GroupVersionKindFor(obj); err == nil {
			kind = gvk.Kind
		}
	}
	if kind == "" {
		kind = "unknown"
	}
	return strings.ToLower(kind)
}

// applyKind names the kind of an apply configuration, which carries it as a field.
func applyKind(obj runtime.ApplyConfiguration) string {
	if k, ok := obj.(interface{ GetKind() *string }); ok && k.GetKind() != nil {
		return strings.ToLower(*k.GetKind())
	}
	return "unknown"
}

// Create counts and creates.
func (c *CountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count(obj, "create", "")
	return c.Client.Create(ctx, obj, opts...)
}

// Update counts and updates.
func (c *CountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count(obj, "update", "")
	return c.Client.Update(ctx, obj, opts...)
}

// Patch counts and patches.
func (c *CountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.count(obj, "patch", "")
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Apply counts and applies.
func (c *CountingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if c.M != nil {
		c.M.APIWrites.WithLabelValues(applyKind(obj), "apply", "").Inc()
	}
	return c.Client.Apply(ctx, obj, opts...)
}

// Delete counts and deletes.
func (c *CountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count(obj, "delete", "")
	return c.Client.Delete(ctx, obj, opts...)
}

// DeleteAllOf counts and deletes a collection.
func (c *CountingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.count(obj, "deletecollection", "")
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

// Status counts status writes.
func (c *CountingClient) Status() client.SubResourceWriter {
	return &countingWriter{SubResourceWriter: c.Client.Status(), c: c, sub: "status"}
}

// SubResource counts writes to the named subresource.
func (c *CountingClient) SubResource(sub string) client.SubResourceClient {
	inner := c.Client.SubResource(sub)
	return &countingSubResource{SubResourceClient: inner, w: countingWriter{SubResourceWriter: inner, c: c, sub: sub}}
}

type countingWriter struct {
	client.SubResourceWriter
	c   *CountingClient
	sub string
}

func (w *countingWriter) Create(ctx context.Context, obj client.Object, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	w.c.count(obj, "create", w.sub)
	return w.SubResourceWriter.Create(ctx, obj, subResource, opts...)
}

func (w *countingWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	w.c.count(obj, "update", w.sub)
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w *countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.c.count(obj, "patch", w.sub)
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (w *countingWriter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if w.c.M != nil {
		w.c.M.APIWrites.WithLabelValues(applyKind(obj), "apply", w.sub).Inc()
	}
	return w.SubResourceWriter.Apply(ctx, obj, opts...)
}

// countingSubResource is a subresource client whose reads pass through and whose writes count.
type countingSubResource struct {
	client.SubResourceClient
	w countingWriter
}

func (s *countingSubResource) Create(ctx context.Context, obj client.Object, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	return s.w.Create(ctx, obj, subResource, opts...)
}

func (s *countingSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.w.Update(ctx, obj, opts...)
}

func (s *countingSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.w.Patch(ctx, obj, patch, opts...)
}

func (s *countingSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.w.Apply(ctx, obj, opts...)
}
