package argocd

import (
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func load(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	b, err := fs.ReadFile(Scripts, path.Clean(name))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &obj.Object); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

// Every health_test.yaml case, as Argo CD's TestLuaHealthScript runs them: exact status and
// message.
func TestHealthScripts(t *testing.T) {
	for _, kind := range Kinds {
		dir := kindDir(kind)
		var spec struct {
			Tests []struct {
				HealthStatus HealthStatus `json:"healthStatus"`
				InputPath    string       `json:"inputPath"`
			} `json:"tests"`
		}
		b, err := fs.ReadFile(Scripts, path.Join(dir, "health_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, &spec); err != nil {
			t.Fatal(err)
		}
		if len(spec.Tests) < 4 {
			t.Fatalf("%s: %d health cases; every verdict needs one", kind, len(spec.Tests))
		}
		for _, tc := range spec.Tests {
			t.Run(kind+"/"+tc.InputPath, func(t *testing.T) {
				got, err := Health(load(t, path.Join(dir, tc.InputPath)))
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.HealthStatus {
					t.Fatalf("got %+v, want %+v", got, tc.HealthStatus)
				}
			})
		}
	}
}

var messageTime = regexp.MustCompile(`^argocd-\d{8}-\d{6}-`)

// Every action_test.yaml case, as Argo CD's TestLuaResourceActionsScript runs them.
func TestActionScripts(t *testing.T) {
	for _, kind := range Kinds {
		dir := path.Join(kindDir(kind), "actions")
		b, err := fs.ReadFile(Scripts, path.Join(dir, "action_test.yaml"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			DiscoveryTests []struct {
				InputPath string   `json:"inputPath"`
				Result    []Action `json:"result"`
			} `json:"discoveryTests"`
			ActionTests []struct {
				Action               string            `json:"action"`
				InputPath            string            `json:"inputPath"`
				ExpectedOutputPath   string            `json:"expectedOutputPath"`
				ExpectedErrorMessage string            `json:"expectedErrorMessage"`
				Parameters           map[string]string `json:"parameters"`
			} `json:"actionTests"`
		}
		if err := yaml.UnmarshalStrict(b, &spec); err != nil {
			t.Fatal(err)
		}
		names, _ := ActionNames(kind)
		tested := map[string]bool{}
		for _, tc := range spec.DiscoveryTests {
			t.Run(kind+"/discovery/"+tc.InputPath, func(t *testing.T) {
				got, err := Discover(load(t, path.Join(dir, tc.InputPath)))
				if err != nil {
					t.Fatal(err)
				}
				gy, _ := yaml.Marshal(got)
				wy, _ := yaml.Marshal(tc.Result)
				if string(gy) != string(wy) {
					t.Fatalf("got\n%s\nwant\n%s", gy, wy)
				}
			})
		}
		for _, tc := range spec.ActionTests {
			tested[tc.Action] = true
			t.Run(kind+"/"+tc.Action+"/"+tc.InputPath, func(t *testing.T) {
				in := load(t, path.Join(dir, tc.InputPath))
				got, err := RunAction(in, tc.Action, tc.Parameters)
				if tc.ExpectedErrorMessage != "" {
					if err == nil || !strings.Contains(err.Error(), tc.ExpectedErrorMessage) {
						t.Fatalf("error %v, want one containing %q", err, tc.ExpectedErrorMessage)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				normalize(got)
				gy, _ := yaml.Marshal(got.Object)
				wy, _ := yaml.Marshal(load(t, path.Join(dir, tc.ExpectedOutputPath)).Object)
				if string(gy) != string(wy) {
					t.Fatalf("got\n%s\nwant\n%s", gy, wy)
				}
			})
		}
		for _, n := range names {
			if !tested[n] {
				t.Errorf("%s action %s has no actionTests case", kind, n)
			}
		}
	}
}

// normalize sets the time in the ids the send-message action writes to the zero time.
func normalize(obj *unstructured.Unstructured) {
	msgs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "messages")
	for _, m := range msgs {
		if mm, ok := m.(map[string]any); ok {
			if id, ok := mm["id"].(string); ok {
				mm["id"] = messageTime.ReplaceAllString(id, "argocd-00010101-000000-")
			}
		}
	}
	if msgs != nil {
		_ = unstructured.SetNestedSlice(obj.Object, msgs, "spec", "messages")
	}
}

// The harness is as strict as Argo CD: no string, math or full os library, require("os") gives
// time and date only, and a runaway script stops at the limit.
func TestVMIsArgoCDs(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"kind": "AgentSession", "metadata": map[string]any{"name": "x"}}}
	for _, tc := range []struct {
		script, wantErr string
	}{
		{`return {status = string.upper("healthy")}`, "string"},
		{`return {status = tostring(math.floor(1))}`, "non-table object(nil) with key 'floor'"},
		{`local os = require("os"); os.execute("true"); return {}`, "attempt to call a non-function object"},
		{`while true do end`, "context deadline exceeded"},
	} {
		if _, err := run(obj, tc.script, nil); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one naming %q", tc.script, err, tc.wantErr)
		}
	}
	out, err := run(obj, `local os = require("os"); return {status = "Healthy", message = os.date("!%Y", 0) .. " " .. obj.metadata.name .. " " .. #obj.metadata.name}`, nil)
	if err != nil || out != `{"message":"1970 x 1","status":"Healthy"}` {
		t.Fatalf("got %s, %v", out, err)
	}
}

// The argocd-cm data names every kind's health check and action, with the scripts verbatim.
func TestConfigMapData(t *testing.T) {
	data, err := ConfigMapData()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		h, _ := HealthScript(kind)
		if data["resource.customizations.health.agents.shepherd.dev_"+kind] != h {
			t.Errorf("%s: the health key does not hold health.lua", kind)
		}
	}
	actions := data["resource.customizations.actions.agents.shepherd.dev_AgentSession"]
	var parsed struct {
		Discovery   string `json:"discovery.lua"`
		Definitions []struct {
			Name   string `json:"name"`
			Action string `json:"action.lua"`
		} `json:"definitions"`
	}
	if err := yaml.UnmarshalStrict([]byte(actions), &parsed); err != nil {
		t.Fatal(err)
	}
	names, _ := ActionNames("AgentSession")
	if len(parsed.Definitions) != len(names) || len(names) != 4 {
		t.Fatalf("definitions %+v, actions %v", parsed.Definitions, names)
	}
	for _, d := range parsed.Definitions {
		want, _ := read(path.Join(kindDir("AgentSession"), "actions", d.Name, "action.lua"))
		if d.Action != want {
			t.Errorf("%s: action.lua differs from the file", d.Name)
		}
	}
	disc, _ := read(path.Join(kindDir("AgentSession"), "actions", "discovery.lua"))
	if parsed.Discovery != disc {
		t.Error("discovery.lua differs from the file")
	}
}

// argocd-cm.yaml is ConfigMapPatch's output, and parses back to ConfigMapData.
func TestPatchFileIsCurrent(t *testing.T) {
	want, err := ConfigMapPatch()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE") == "1" {
		if err := os.WriteFile(PatchFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(PatchFile)
	if err != nil || string(got) != want {
		t.Fatalf("%s is not current (err %v): run UPDATE=1 go test ./config/argocd/", PatchFile, err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(got, &cm); err != nil {
		t.Fatal(err)
	}
	data, _ := ConfigMapData()
	if len(cm.Data) != len(data) {
		t.Fatalf("%d keys, want %d", len(cm.Data), len(data))
	}
	for k, v := range data {
		if cm.Data[k] != v {
			t.Errorf("%s differs after a YAML round trip", k)
		}
	}
}
