package restmapcache

import (
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// counting counts the RESTMapping calls that reach the real apimachinery mapper beneath.
type counting struct {
	meta.RESTMapper
	calls atomic.Int64
}

func (c *counting) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls.Add(1)
	return c.RESTMapper.RESTMapping(gk, versions...)
}

var (
	pods    = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	nodes   = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	session = schema.GroupVersionKind{Group: "agents.shepherd.dev", Version: "v1alpha1", Kind: "AgentSession"}
)

func newMapper(limit int) (*Mapper, *counting, *meta.DefaultRESTMapper) {
	d := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	d.Add(pods, meta.RESTScopeNamespace)
	d.Add(nodes, meta.RESTScopeRoot)
	c := &counting{RESTMapper: d}
	return New(c, limit), c, d
}

func TestRESTMapping(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gvk      schema.GroupVersionKind
		versions []string
		// reach is how many of three lookups reach the mapper beneath.
		reach     int64
		scope     meta.RESTScopeName
		wantError bool
	}{
		{name: "a namespaced kind, asked three times", gvk: pods, versions: []string{"v1"}, reach: 1, scope: meta.RESTScopeNameNamespace},
		{name: "a cluster kind", gvk: nodes, versions: []string{"v1"}, reach: 1, scope: meta.RESTScopeNameRoot},
		{name: "no version: the mapper picks, every time", gvk: pods, reach: 3, scope: meta.RESTScopeNameNamespace},
		{name: "an empty version: the mapper picks, every time", gvk: pods, versions: []string{""}, reach: 3, scope: meta.RESTScopeNameNamespace},
		{name: "several versions", gvk: pods, versions: []string{"v2", "v1"}, reach: 3, scope: meta.RESTScopeNameNamespace},
		{name: "an unknown kind is asked again", gvk: session, versions: []string{"v1alpha1"}, reach: 3, wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, c, _ := newMapper(0)
			for i := 0; i < 3; i++ {
				got, err := m.RESTMapping(tc.gvk.GroupKind(), tc.versions...)
				if tc.wantError {
					if !meta.IsNoMatchError(err) {
						t.Fatalf("lookup %d: got %v, %v; want a no-match error", i, got, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("lookup %d: %v", i, err)
				}
				if got.Scope.Name() != tc.scope || got.GroupVersionKind != tc.gvk || got.Resource.Resource == "" {
					t.Fatalf("lookup %d: got %+v", i, got)
				}
			}
			if n := c.calls.Load(); n != tc.reach {
				t.Fatalf("%d lookups reached the mapper beneath, want %d", n, tc.reach)
			}
		})
	}
}

// A kind installed after a miss (a CRD applied while the manager runs) is found: misses are
// never remembered.
func TestAKindInstalledLaterIsFound(t *testing.T) {
	m, _, d := newMapper(0)
	if _, err := m.RESTMapping(session.GroupKind(), session.Version); !meta.IsNoMatchError(err) {
		t.Fatalf("before the CRD: %v", err)
	}
	d.Add(session, meta.RESTScopeNamespace)
	got, err := m.RESTMapping(session.GroupKind(), session.Version)
	if err != nil || got.Resource.Resource != "agentsessions" {
		t.Fatalf("after the CRD: %+v, %v", got, err)
	}
}

// Each answer is the caller's own: changing it does not change the next caller's.
func TestAnswersAreCopies(t *testing.T) {
	m, _, _ := newMapper(0)
	first, err := m.RESTMapping(pods.GroupKind(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	first.Resource.Resource = "changed"
	second, _ := m.RESTMapping(pods.GroupKind(), "v1")
	second.Scope = meta.RESTScopeRoot
	third, _ := m.RESTMapping(pods.GroupKind(), "v1")
	if third.Resource.Resource != "pods" || third.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("a caller's change leaked: %+v", third)
	}
}

// Past the limit nothing more is remembered; what is remembered still answers.
func TestLimit(t *testing.T) {
	m, c, _ := newMapper(1)
	for i := 0; i < 3; i++ {
		if _, err := m.RESTMapping(pods.GroupKind(), "v1"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.RESTMapping(nodes.GroupKind(), "v1"); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 1 {
		t.Fatalf("%d mappings remembered, limit 1", m.Len())
	}
	if n := c.calls.Load(); n != 4 {
		t.Fatalf("%d lookups reached the mapper beneath, want 4 (pods once, nodes three times)", n)
	}
}

func TestConcurrentLookups(t *testing.T) {
	m, c, _ := newMapper(0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				gvk := pods
				if i%2 == 1 {
					gvk = nodes
				}
				if _, err := m.RESTMapping(gvk.GroupKind(), "v1"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Two kinds; goroutines racing on the first lookup of a kind may each ask.
	if n := c.calls.Load(); n < 2 || n > 16 {
		t.Fatalf("%d lookups reached the mapper beneath", n)
	}
	if m.Len() != 2 {
		t.Fatalf("%d mappings remembered, want 2", m.Len())
	}
}
