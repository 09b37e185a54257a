package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Server-side apply: the applied object is the field manager's whole intent, and a field it
// owned and leaves out is removed. So each apply carries everything kubectl-shepherd already owns
// on the session (its messages, spec.state, its annotations), read from the live object's
// managedFields, plus the change.

// ownedFields is what FieldManager owns on an object.
type ownedFields struct {
	messages    map[string]bool // spec.messages ids
	state       bool            // spec.state
	annotations map[string]bool
}

// fieldsOf parses a managedFields entry's field set down to the depth the plugin reads
// (f:spec.f:messages.k:{...}, f:metadata.f:annotations.f:<key>).
func fieldsOf(u *unstructured.Unstructured, mf metav1.ManagedFieldsEntry) (map[string]map[string]map[string]json.RawMessage, error) {
	var f map[string]map[string]map[string]json.RawMessage
	if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &f); err != nil {
		return nil, fmt.Errorf("read the managed fields of %s: %w", u.GetName(), err)
	}
	return f, nil
}

// owned reads manager's apply entry of u's managedFields.
func owned(u *unstructured.Unstructured, manager string) (ownedFields, error) {
	o := ownedFields{messages: map[string]bool{}, annotations: map[string]bool{}}
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		f, err := fieldsOf(u, mf)
		if err != nil {
			return o, err
		}
		for k := range f["f:spec"]["f:messages"] {
			var id struct{ ID string }
			if key, ok := strings.CutPrefix(k, "k:"); ok && json.Unmarshal([]byte(key), &id) == nil && id.ID != "" {
				o.messages[id.ID] = true
			}
		}
		_, o.state = f["f:spec"]["f:state"]
		for k := range f["f:metadata"]["f:annotations"] {
			if a, ok := strings.CutPrefix(k, "f:"); ok {
				o.annotations[a] = true
			}
		}
	}
	return o, nil
}

// change is what one command adds to the intent.
type change struct {
	message     map[string]any    // a new spec.messages item
	state       string            // spec.state
	annotations map[string]string // metadata.annotations
}

// intent is the apply configuration: what manager owns on live, with c on top.
func intent(live *unstructured.Unstructured, c change, manager string) (*unstructured.Unstructured, error) {
	own, err := owned(live, manager)
	if err != nil {
		return nil, err
	}
	spec := map[string]any{}
	var msgs []any
	liveMsgs, _, _ := unstructured.NestedSlice(live.Object, "spec", "messages")
	for _, m := range liveMsgs {
		mm, _ := m.(map[string]any)
		if id, _ := mm["id"].(string); own.messages[id] {
			msgs = append(msgs, mm)
		}
	}
	if c.message != nil {
		msgs = append(msgs, c.message)
	}
	if len(msgs) > 0 {
		spec["messages"] = msgs
	}
	switch {
	case c.state != "":
		spec["state"] = c.state
	case own.state:
		spec["state"], _, _ = unstructured.NestedString(live.Object, "spec", "state")
	}
	meta := map[string]any{"name": live.GetName(), "namespace": live.GetNamespace()}
	ann := map[string]any{}
	for k := range own.annotations {
		if v, ok := live.GetAnnotations()[k]; ok {
			ann[k] = v
		}
	}
	for k, v := range c.annotations {
		ann[k] = v
	}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	obj := map[string]any{"apiVersion": sessionGVK.GroupVersion().String(), "kind": sessionGVK.Kind, "metadata": meta}
	if len(spec) > 0 {
		obj["spec"] = spec
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// ErrConflict is returned when another field manager (a GitOps tool, say) owns a field the
// command would set to another value.
var ErrConflict = errors.New("conflict")

// declarativeManagers write what a file in Git or a release declares, with an update rather
// than an apply: Argo CD's default (client-side) sync, `kubectl apply` without --server-side,
// Flux's and Helm's controllers. What they own is re-declared on their next sync.
var declarativeManagers = map[string]bool{
	"argocd-controller": true, "kubectl-client-side-apply": true, "kustomize-controller": true,
	"helm-controller": true, "helm": true, "flux": true,
}

// steeringManagers are the field managers of people steering a session (this plugin and the
// dashboard): what one of them wrote is not a declaration the other must respect.
var steeringManagers = map[string]bool{FieldManager: true, DashboardFieldManager: true}

// declaredElsewhere reports whether a manager other than the steering ones declares one of the
// fields c sets: an apply, or an update by a declarative tool. A field only an imperative
// write owns (the creator's defaulted spec.state, a `kubectl patch`) is taken over without
// asking: nobody will set it back.
func declaredElsewhere(live *unstructured.Unstructured, c change) (bool, error) {
	for _, mf := range live.GetManagedFields() {
		if steeringManagers[mf.Manager] || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		if mf.Operation != metav1.ManagedFieldsOperationApply && !declarativeManagers[mf.Manager] {
			continue
		}
		f, err := fieldsOf(live, mf)
		if err != nil {
			return false, err
		}
		if _, ok := f["f:spec"]["f:state"]; ok && c.state != "" {
			return true, nil
		}
		for k := range c.annotations {
			if _, ok := f["f:metadata"]["f:annotations"]["f:"+k]; ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// apply applies c to the session as the env's field manager. A field another manager declares
// is not taken unless force: the server reports the conflict when the values differ.
func (e *env) apply(ctx context.Context, live *unstructured.Unstructured, c change, force bool) error {
	obj, err := intent(live, c, e.manager())
	if err != nil {
		return err
	}
	declared, err := declaredElsewhere(live, c)
	if err != nil {
		return err
	}
	force = force || !declared
	_, err = e.sessions(live.GetNamespace()).Apply(ctx, live.GetName(), obj, metav1.ApplyOptions{FieldManager: e.manager(), Force: force})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %s\nThe field is declared by another manager (GitOps keeps it in Git): change it there, or pass --force to take it over here (that tool will set it back on its next sync)", ErrConflict, conflictFields(err))
	}
	return err
}

// conflictFields lists who owns which field, from a conflict's causes.
func conflictFields(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return err.Error()
	}
	var parts []string
	for _, c := range status.Status().Details.Causes {
		parts = append(parts, fmt.Sprintf("%s (%s)", c.Field, c.Message))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return err.Error()
	}
	return strings.Join(parts, "; ")
}
