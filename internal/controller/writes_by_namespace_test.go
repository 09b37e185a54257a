package controller_test

import (
	"context"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// managerWrites counts the writes every manager under test sends to the API server, by kind and
// namespace, refused or not (as shepherd_api_writes_total does, which has no namespace: a spec
// reading that counter also counts what earlier specs' objects still do in the background).
var managerWrites = &writesByNamespace{n: map[string]int{}}

type writesByNamespace struct {
	mu sync.Mutex
	n  map[string]int
}

// in is how many writes of kind (lower case, "networkpolicy"; "project/status" for a status) were sent in namespace ns.
func (w *writesByNamespace) in(ns, kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[ns+"/"+kind]
}

// newCountingClient is the managers' NewClient: the real client, its writes counted.
func newCountingClient(cfg *rest.Config, o client.Options) (client.Client, error) {
	c, err := client.New(cfg, o)
	if err != nil {
		return nil, err
	}
	return &nsCountingClient{Client: c}, nil
}

type nsCountingClient struct{ client.Client }

func (c *nsCountingClient) count(obj client.Object) { c.countAs(obj, "") }

// countAs counts a write of obj's kind, with suffix ("/status") for a subresource.
func (c *nsCountingClient) countAs(obj client.Object, suffix string) {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if gvk, err := c.GroupVersionKindFor(obj); kind == "" && err == nil {
		kind = gvk.Kind
	}
	managerWrites.mu.Lock()
	defer managerWrites.mu.Unlock()
	managerWrites.n[obj.GetNamespace()+"/"+strings.ToLower(kind)+suffix]++
}

func (c *nsCountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *nsCountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *nsCountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.count(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *nsCountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count(obj)
	return c.Client.Delete(ctx, obj, opts...)
}

// Status counts the status writes as kind+"/status" ("project/status").
func (c *nsCountingClient) Status() client.SubResourceWriter {
	return &nsCountingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type nsCountingStatus struct {
	client.SubResourceWriter
	c *nsCountingClient
}

func (s *nsCountingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.countAs(obj, "/status")
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *nsCountingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.countAs(obj, "/status")
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
