// Package pricing turns token counts into dollars with a price table: per model, per million
// tokens of each kind. Shepherd ships dated defaults (defaults.json); the cluster operator
// overrides or extends them with a file of the same shape (the manager's --price-table, from a
// ConfigMap). A model with no price is never guessed: its tokens are counted, its cost is unknown
// and the session says so.
package pricing

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Price is what a model charges, in US dollars per million tokens of each kind.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
}

// Table is a dated price table.
type Table struct {
	// Date is when the prices were read from the providers' pages ("2026-12-01").
	Date string `json:"date"`
	// Source says where they came from.
	Source string `json:"source,omitempty"`
	// Models maps a model name to its price. Names are matched exactly first, then without a
	// provider prefix ("anthropic/") and a release date suffix ("-20250929", "-2025-04-14").
	Models map[string]Price `json:"models"`
}

//go:embed defaults.json
var defaultsJSON []byte

// Defaults is the table shipped with this version of Shepherd.
func Defaults() Table {
	t, err := Parse(defaultsJSON)
	if err != nil {
		panic("pricing: defaults.json: " + err.Error()) // a test holds it valid
	}
	return t
}

// maxModels bounds a table: it is read into memory and every session's usage is matched to it.
const maxModels = 4096

// Parse reads a table and checks every price.
func Parse(b []byte) (Table, error) {
	var t Table
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Table{}, fmt.Errorf("price table: %w", err)
	}
	if len(t.Models) > maxModels {
		return Table{}, fmt.Errorf("price table: %d models, at most %d", len(t.Models), maxModels)
	}
	var errs []error
	for name, p := range t.Models {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("a model with an empty name"))
		}
		for kind, v := range map[string]float64{"input": p.Input, "output": p.Output, "cacheRead": p.CacheRead, "cacheWrite": p.CacheWrite} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 10000 {
				errs = append(errs, fmt.Errorf("model %q: %s price %v per million tokens: want 0 to 10000", name, kind, v))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Table{}, fmt.Errorf("price table: %w", err)
	}
	return t, nil
}

// Load reads the operator's table from path and lays it over the defaults: a model it names
// takes its price from there, the others keep the default; the date is the operator's.
func Load(path string) (Table, error) {
	if path == "" {
		return Defaults(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Table{}, fmt.Errorf("read the price table: %w", err)
	}
	t, err := Overlay(b)
	if err != nil {
		return Table{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Overlay lays the table in b over the defaults, as Load does with a file's.
func Overlay(b []byte) (Table, error) {
	t := Defaults()
	over, err := Parse(b)
	if err != nil {
		return Table{}, err
	}
	for name, p := range over.Models {
		t.Models[name] = p
	}
	if over.Date != "" {
		t.Date = over.Date
	}
	if over.Source != "" {
		t.Source = over.Source
	}
	return t, nil
}

var dateSuffix = regexp.MustCompile(`-(\d{8}|\d{4}-\d{2}-\d{2})$`)

// Lookup finds model's price: its exact name, else without a provider prefix, else without a
// release date suffix.
func (t Table) Lookup(model string) (Price, bool) {
	if p, ok := t.Models[model]; ok {
		return p, true
	}
	name := model
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
		if p, ok := t.Models[name]; ok {
			return p, true
		}
	}
	if base := dateSuffix.ReplaceAllString(name, ""); base != name {
		if p, ok := t.Models[base]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// Tokens are one model's counts, disjoint as the model proxy keeps them.
type Tokens struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Cost is what tokens cost at p, in dollars.
func (p Price) Cost(t Tokens) float64 {
	return (float64(t.Input)*p.Input + float64(t.Output)*p.Output + float64(t.CacheRead)*p.CacheRead + float64(t.CacheWrite)*p.CacheWrite) / 1e6
}

// Format writes dollars as the API's decimal string: six decimals, trailing zeros trimmed.
func Format(usd float64) string {
	if usd <= 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
		return "0"
	}
	s := strconv.FormatFloat(usd, 'f', 6, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" {
		return "0"
	}
	return s
}

// ParseUSD reads the API's decimal dollars (Format's form); anything else, or a negative, is 0.
func ParseUSD(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// Names lists the table's models, sorted.
func (t Table) Names() []string {
	out := make([]string, 0, len(t.Models))
	for n := range t.Models {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
