package pricing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultsAreValidAndDated(t *testing.T) {
	d := Defaults()
	if d.Date == "" || len(d.Models) == 0 {
		t.Fatalf("defaults: date %q, %d models", d.Date, len(d.Models))
	}
	for _, m := range []string{"claude-sonnet-4-5", "gpt-5", "gpt-5-codex"} {
		if _, ok := d.Lookup(m); !ok {
			t.Errorf("the defaults have no price for %s", m)
		}
	}
}

func TestLookup(t *testing.T) {
	tbl := Table{Models: map[string]Price{"claude-sonnet-4-5": {Input: 3}, "gpt-4.1": {Input: 2}, "my/model-20250101": {Input: 9}}}
	for _, c := range []struct {
		model string
		want  float64
		ok    bool
	}{
		{"claude-sonnet-4-5", 3, true},
		{"claude-sonnet-4-5-20250929", 3, true},
		{"anthropic/claude-sonnet-4-5", 3, true},
		{"openai/gpt-4.1-2025-04-14", 2, true},
		{"my/model-20250101", 9, true},
		{"claude-sonnet-4-5x", 0, false},
		{"gpt-4.1-mini", 0, false},
		{"", 0, false},
	} {
		p, ok := tbl.Lookup(c.model)
		if ok != c.ok || p.Input != c.want {
			t.Errorf("Lookup(%q) = %v, %v; want %v, %v", c.model, p.Input, ok, c.want, c.ok)
		}
	}
}

func TestCostAndFormat(t *testing.T) {
	p := Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	got := p.Cost(Tokens{Input: 1_000_000, Output: 100_000, CacheRead: 2_000_000, CacheWrite: 10_000})
	if want := 3 + 1.5 + 0.6 + 0.0375; got < want-1e-9 || got > want+1e-9 {
		t.Fatalf("cost %v, want %v", got, want)
	}
	for in, want := range map[float64]string{5.1375: "5.1375", 0: "0", 0.0000001: "0", 12: "12", 0.000123: "0.000123", -1: "0"} {
		if s := Format(in); s != want {
			t.Errorf("Format(%v) = %q, want %q", in, s, want)
		}
	}
}

func TestLoadOverridesTheDefaults(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(path, []byte(`{"date": "2027-01-01", "models": {"claude-sonnet-4-5": {"input": 2.5, "output": 12, "cacheRead": 0.25, "cacheWrite": 3}, "local-llama": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tbl, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := tbl.Lookup("claude-sonnet-4-5"); p.Input != 2.5 || tbl.Date != "2027-01-01" {
		t.Errorf("override not applied: %+v, date %s", p, tbl.Date)
	}
	if _, ok := tbl.Lookup("gpt-5"); !ok {
		t.Error("a default the override does not name was lost")
	}
	if _, ok := tbl.Lookup("local-llama"); !ok {
		t.Error("a free model is a price, not a missing one")
	}
	for _, bad := range []string{`{"models": {"m": {"input": -1}}}`, `{"models": {"m": {"inptu": 1}}}`, `{"models": {"": {}}}`, `not json`} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "price table") {
			t.Errorf("Load(%s) = %v, want a price table error", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"date":"d","models":{"m":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tbl, err := Parse(b)
		if err != nil {
			return
		}
		for name := range tbl.Models {
			p, ok := tbl.Lookup(name)
			if !ok || p.Cost(Tokens{Input: 1e6, Output: 1e6, CacheRead: 1e6, CacheWrite: 1e6}) < 0 {
				t.Fatalf("model %q: %v %v", name, p, ok)
			}
		}
	})
}
