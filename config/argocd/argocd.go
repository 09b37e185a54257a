// Package argocd holds Shepherd's Argo CD resource customizations (health checks and resource
// actions in Argo CD's own layout under resource_customizations/<group>/<Kind>/) and runs them
// the way Argo CD does: gopher-lua with only the package, base and table libraries open (and
// Argo CD's "safe" os module, time and date only, behind require("os")), obj decoded from the
// object's JSON, actionParams as a table of strings, a 1 s limit, and results encoded to JSON
// with the same encoder (layeh.com/gopher-json). Tests run every script through it, and
// ConfigMapData renders the argocd-cm keys that install them (docs/gitops.md).
package argocd

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
)

// Scripts is the resource_customizations tree.
//
//go:embed resource_customizations
var Scripts embed.FS

// Group is the API group of every Shepherd kind.
const Group = "agents.shepherd.dev"

// Kinds are the kinds with a health check.
var Kinds = []string{"AgentSession", "AgentTask", "BudgetPolicy", "Project", "Worktree"}

// Health statuses Argo CD knows (a script returning any other is Unknown).
const (
	Healthy     = "Healthy"
	Progressing = "Progressing"
	Degraded    = "Degraded"
	Suspended   = "Suspended"
	Missing     = "Missing"
	Unknown     = "Unknown"
)

// invalidHealthStatus is Argo CD's message for a status outside its list.
const invalidHealthStatus = "Lua returned an invalid health status"

// scriptTimeout is Argo CD's limit on one script's run.
const scriptTimeout = time.Second

// HealthStatus is a health check's result, as Argo CD decodes it.
type HealthStatus struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// ActionParam is a parameter an action asks for in the UI.
type ActionParam struct {
	Name    string `json:"name,omitempty"`
	Value   string `json:"value,omitempty"`
	Type    string `json:"type,omitempty"`
	Default string `json:"default,omitempty"`
}

// Action is one entry of a discovery script's result.
type Action struct {
	Name        string        `json:"name"`
	Disabled    bool          `json:"disabled"`
	IconClass   string        `json:"iconClass"`
	DisplayName string        `json:"displayName"`
	Params      []ActionParam `json:"params,omitempty"`
}

func kindDir(kind string) string { return path.Join("resource_customizations", Group, kind) }

func read(name string) (string, error) {
	b, err := Scripts.ReadFile(name)
	return string(b), err
}

// HealthScript is the health check of kind.
func HealthScript(kind string) (string, error) { return read(path.Join(kindDir(kind), "health.lua")) }

// ActionNames lists the actions of kind (the directories under actions/ holding action.lua).
func ActionNames(kind string) ([]string, error) {
	entries, err := fs.ReadDir(Scripts, path.Join(kindDir(kind), "actions"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if _, err := fs.Stat(Scripts, path.Join(kindDir(kind), "actions", e.Name(), "action.lua")); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// newState is Argo CD's VM.runLua setup (util/lua/lua.go), with UseOpenLibs false: the
// package, base and table libraries, os preloaded with time and date only.
func newState(ctx context.Context) *lua.LState {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, pair := range []struct {
		n string
		f lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(pair.f), NRet: 0, Protect: true}, lua.LString(pair.n)); err != nil {
			panic(err) // the libraries of the linked gopher-lua: a build defect
		}
	}
	l.PreloadModule(lua.OsLibName, safeOsLoader)
	l.SetContext(ctx)
	return l
}

// safeOsLoader is Argo CD's SafeOsLoader: a module with os.time and os.date only. They are
// gopher-lua's own, taken from a scratch state's os library.
func safeOsLoader(l *lua.LState) int {
	scratch := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer scratch.Close()
	lua.OpenOs(scratch)
	full, _ := scratch.GetGlobal(lua.OsLibName).(*lua.LTable)
	mod := l.NewTable()
	for _, name := range []string{"time", "date"} {
		if fn, ok := full.RawGetString(name).(*lua.LFunction); ok && fn.GFunction != nil {
			mod.RawSetString(name, l.NewFunction(fn.GFunction))
		}
	}
	l.Push(mod)
	return 1
}

// decodeValue is Argo CD's decodeValue: JSON values to Lua (nulls vanish).
func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, item := range v {
			tbl.RawSetH(lua.LString(k), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// run runs script with obj and params as Argo CD does and returns its last value as JSON
// ("" for nil).
func run(obj *unstructured.Unstructured, script string, params map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	l := newState(ctx)
	defer l.Close()
	ap := l.CreateTable(0, len(params))
	for k, v := range params {
		ap.RawSetH(lua.LString(k), lua.LString(v))
	}
	l.SetGlobal("actionParams", ap)
	l.SetGlobal("obj", decodeValue(l, obj.Object))
	fn, err := l.LoadString(script)
	if err == nil {
		l.Push(fn)
		err = l.PCall(0, lua.MultRet, nil)
	}
	var apiErr *lua.ApiError
	if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
		apiErr.StackTrace = "" // Argo CD strips it: the error reaches the user
		err = apiErr
	}
	if err != nil {
		return "", err
	}
	ret := l.Get(-1)
	switch ret.Type() {
	case lua.LTNil:
		return "", nil
	case lua.LTTable:
		b, err := luajson.Encode(ret)
		return string(b), err
	}
	return "", fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
}

// Health runs kind's health check on obj as Argo CD's ExecuteHealthLua does.
func Health(obj *unstructured.Unstructured) (HealthStatus, error) {
	script, err := HealthScript(obj.GetKind())
	if err != nil {
		return HealthStatus{}, err
	}
	out, err := run(obj, script, nil)
	if err != nil || out == "" {
		return HealthStatus{}, err
	}
	var hs HealthStatus
	if err := json.Unmarshal([]byte(out), &hs); err != nil {
		return HealthStatus{}, err
	}
	switch hs.Status {
	case Healthy, Progressing, Degraded, Suspended, Missing, Unknown:
		return hs, nil
	}
	return HealthStatus{Status: Unknown, Message: invalidHealthStatus}, nil
}

// Discover runs kind's discovery script on obj as ExecuteResourceActionDiscovery does; the
// actions come sorted by name.
func Discover(obj *unstructured.Unstructured) ([]Action, error) {
	script, err := read(path.Join(kindDir(obj.GetKind()), "actions", "discovery.lua"))
	if err != nil {
		return nil, err
	}
	out, err := run(obj, script, nil)
	if err != nil || out == "" {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return nil, fmt.Errorf("discovery returned %s: %w", out, err)
	}
	actions := make([]Action, 0, len(m))
	for name, raw := range m {
		a := Action{Name: name}
		if string(raw) != "null" {
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("action %s: %w", name, err)
			}
		}
		a.Name = name
		actions = append(actions, a)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].Name < actions[j].Name })
	return actions, nil
}

// RunAction runs action on obj as ExecuteResourceAction does for an action returning the
// modified object, and returns that object as Argo CD would patch it in.
func RunAction(obj *unstructured.Unstructured, action string, params map[string]string) (*unstructured.Unstructured, error) {
	script, err := read(path.Join(kindDir(obj.GetKind()), "actions", action, "action.lua"))
	if err != nil {
		return nil, err
	}
	out, err := run(obj.DeepCopy(), script, params)
	if err != nil {
		return nil, err
	}
	if len(out) < 2 || out[0] != '{' {
		return nil, fmt.Errorf("action %s returned %q, not the modified object", action, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: cleanReturnedObj(m, obj.Object)}, nil
}

// cleanReturnedObj is Argo CD's: an empty object that Lua turned into an empty array (or
// null) is an empty object again where the input had one.
func cleanReturnedObj(newObj, obj map[string]any) map[string]any {
	for key, oldValue := range obj {
		newValue, ok := newObj[key]
		if !ok {
			continue
		}
		switch nv := newValue.(type) {
		case map[string]any:
			if ov, ok := oldValue.(map[string]any); ok {
				newObj[key] = cleanReturnedObj(nv, ov)
			}
		case []any:
			switch ov := oldValue.(type) {
			case map[string]any:
				if len(nv) == 0 {
					newObj[key] = map[string]any{}
				}
			case []any:
				for i := range nv {
					if i >= len(ov) {
						break
					}
					if nm, ok := nv[i].(map[string]any); ok {
						if om, ok := ov[i].(map[string]any); ok {
							nv[i] = cleanReturnedObj(nm, om)
						}
					}
				}
			}
		}
	}
	return newObj
}

// ConfigMapData is the argocd-cm data that installs every check and action: the keys
// resource.customizations.health.<group>_<Kind> and resource.customizations.actions.<group>_<Kind>
// (the latter holding discovery.lua and definitions, as Argo CD's docs describe).
func ConfigMapData() (map[string]string, error) {
	data := map[string]string{}
	for _, kind := range Kinds {
		key := Group + "_" + kind
		h, err := HealthScript(kind)
		if err != nil {
			return nil, err
		}
		data["resource.customizations.health."+key] = h
		names, err := ActionNames(kind)
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			continue
		}
		disc, err := read(path.Join(kindDir(kind), "actions", "discovery.lua"))
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		b.WriteString("discovery.lua: |\n")
		indent(&b, disc, "  ")
		b.WriteString("definitions:\n")
		for _, n := range names {
			a, err := read(path.Join(kindDir(kind), "actions", n, "action.lua"))
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "- name: %s\n  action.lua: |\n", n)
			indent(&b, a, "    ")
		}
		data["resource.customizations.actions."+key] = b.String()
	}
	return data, nil
}

func indent(b *strings.Builder, text, prefix string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(prefix + line + "\n")
	}
}

// PatchFile is the argocd-cm patch kept beside the scripts (argocd-cm.yaml); the test
// TestPatchFileIsCurrent fails when it differs from ConfigMapPatch and rewrites it under
// UPDATE=1.
const PatchFile = "argocd-cm.yaml"

// ConfigMapPatch renders ConfigMapData as a strategic-merge patch of Argo CD's argocd-cm
// (namespace argocd), for `kubectl patch` or a kustomization over Argo CD's install.
func ConfigMapPatch() (string, error) {
	data, err := ConfigMapData()
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Shepherd's Argo CD health checks and resource actions (docs/gitops.md). Generated from\n")
	b.WriteString("# config/argocd/resource_customizations by `UPDATE=1 go test ./config/argocd/`; do not edit.\n")
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n  labels:\n    app.kubernetes.io/name: argocd-cm\n    app.kubernetes.io/part-of: argocd\ndata:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: |\n", k)
		indent(&b, data[k], "    ")
	}
	return b.String(), nil
}

// Must returns hs, panicking on err: for tests that poll a health verdict.
func Must(hs HealthStatus, err error) HealthStatus {
	if err != nil {
		panic(err)
	}
	return hs
}
