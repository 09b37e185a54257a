package fakegithub

import (
	"embed"
	"encoding/json"
	"fmt"
	"sort"
)

// testdata holds GitHub's documented shapes: REST responses, GraphQL responses and webhook
// payloads, written out from GitHub's documentation examples. The adapter's parsers are tested on
// them, and the fake's own answers are checked against them, so that the fake and the adapter
// cannot drift away from GitHub together.
//
//go:embed testdata
var fixtures embed.FS

// Fixture returns a documented example ("rest/pull-request.json", "webhooks/push.json", …).
func Fixture(name string) []byte {
	b, err := fixtures.ReadFile("testdata/" + name)
	if err != nil {
		panic(fmt.Sprintf("fakegithub: no fixture %s: %v", name, err))
	}
	return b
}

// ShapeDiff compares JSON documents: every field of actual must exist in the documented example
// with the same JSON kind (null matches any kind, as GitHub's fields are often nullable). It
// returns one line per violation; the fake may leave fields out, but never invent or retype one.
func ShapeDiff(documented, actual []byte) ([]string, error) {
	var d, a any
	if err := json.Unmarshal(documented, &d); err != nil {
		return nil, fmt.Errorf("documented: %w", err)
	}
	if err := json.Unmarshal(actual, &a); err != nil {
		return nil, fmt.Errorf("actual: %w", err)
	}
	var out []string
	shapeDiff("$", d, a, &out)
	sort.Strings(out)
	return out, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	}
	return "?"
}

func shapeDiff(path string, d, a any, out *[]string) {
	if d == nil || a == nil {
		return
	}
	if kind(d) != kind(a) {
		*out = append(*out, fmt.Sprintf("%s: documented %s, got %s", path, kind(d), kind(a)))
		return
	}
	switch dv := d.(type) {
	case map[string]any:
		av := a.(map[string]any)
		for k, v := range av {
			dd, ok := dv[k]
			if !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: not in GitHub's shape", path, k))
				continue
			}
			shapeDiff(path+"."+k, dd, v, out)
		}
	case []any:
		av := a.([]any)
		if len(dv) == 0 {
			return
		}
		for i, v := range av {
			shapeDiff(fmt.Sprintf("%s[%d]", path, i), sameType(dv, v), v, out)
		}
	}
}

// sameType picks the documented element to compare with: the one of the same __typename in a
// GraphQL union list, else the first.
func sameType(documented []any, v any) any {
	if m, ok := v.(map[string]any); ok {
		if tn, ok := m["__typename"]; ok {
			for _, d := range documented {
				if dm, ok := d.(map[string]any); ok && dm["__typename"] == tn {
					return d
				}
			}
		}
	}
	return documented[0]
}

// MissingFields lists the paths of want (dotted, "[]" for array elements) absent from doc, to
// check that a document carries every field the adapter reads.
func MissingFields(doc []byte, want ...string) ([]string, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range want {
		if !hasPath(v, splitPath(p)) {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

func splitPath(p string) []string {
	var parts []string
	cur := ""
	for _, c := range p {
		if c == '.' {
			parts = append(parts, cur)
			cur = ""
			continue
		}
		cur += string(c)
	}
	return append(parts, cur)
}

func hasPath(v any, parts []string) bool {
	if len(parts) == 0 {
		return true
	}
	p := parts[0]
	if p == "[]" {
		arr, ok := v.([]any)
		if !ok || len(arr) == 0 {
			return false
		}
		return hasPath(arr[0], parts[1:])
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	next, ok := m[p]
	if !ok {
		return false
	}
	if next == nil {
		return len(parts) == 1
	}
	return hasPath(next, parts[1:])
}
