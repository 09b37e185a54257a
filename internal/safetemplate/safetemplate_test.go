package safetemplate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"text/template"
	"time"
)

type item struct {
	Name string
	Tags []string
}

type data struct {
	Number int64
	Title  string
	Items  []item
	ByName map[string]item
	Ptr    *item
}

var dataType = reflect.TypeFor[data]()

func sample() data {
	return data{Number: 1 << 40, Title: "t", Items: []item{{Name: "a", Tags: []string{"x"}}, {Name: "b"}},
		ByName: map[string]item{"a": {Name: "a"}}, Ptr: &item{Name: "p", Tags: []string{"y"}}}
}

func TestBoundsRefuseTheBombs(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"range over a huge literal", `{{range 9223372036854775807}}{{end}}`, "range over the data's own lists"},
		{"range over a number of the data", `{{range .Number}}{{range $.Number}}{{end}}{{end}}`, "not a list"},
		{"range over a function", `{{range len .Items}}{{end}}`, "range over the data's own lists"},
		{"range over a parenthesised pipeline", `{{range (.Items)}}{{end}}`, "range over the data's own lists"},
		{"ranges three deep", `{{range .Items}}{{range .Tags}}{{range $.Items}}{{end}}{{end}}{{end}}`, "nested more than 2"},
		{"a define", `{{define "a"}}x{{end}}{{template "a"}}`, "define"},
		{"recursion through block", `{{block "a" .}}{{template "a" .}}{{end}}`, "define"},
		{"a template call", `{{template "missing"}}`, "not allowed"},
		{"a variable of a number", `{{$n := .Number}}{{range $n}}{{end}}`, "not a list"},
		{"a reassigned variable", `{{$n := .Items}}{{$n = .Number}}{{range $n}}{{end}}`, "range over the data's own lists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Parse("t", tc.text, nil, dataType)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.text, err, tc.want)
			}
			if !errors.Is(err, ErrRefused) && !strings.Contains(tc.want, "define") {
				t.Errorf("%v does not wrap ErrRefused", err)
			}
			// Refused in well under a second: nothing was executed.
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Logf("slow refusal: %s", d)
			}
		})
	}
}

func TestPrintfWidthsAreBounded(t *testing.T) {
	for _, text := range []string{`{{printf "%0999999999d" 1}}`, `{{printf "%.999999999f" 1.0}}`, `{{printf "%*d" 999999999 1}}`, `{{printf "%[1]0999999d" 1}}`} {
		tpl, err := Parse("t", text, nil, dataType)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		out, err := Execute(tpl, sample(), 1<<20, time.Second)
		if err == nil {
			t.Errorf("%s rendered %d bytes", text, len(out))
		}
	}
	tpl, err := Parse("t", `{{printf "%-8s|%5.2f|%03d" .Title 1.5 7}}`, nil, dataType)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := Execute(tpl, sample(), 1<<10, time.Second); err != nil || out != "t       | 1.50|007" {
		t.Errorf("ordinary printf: %q, %v", out, err)
	}
}

func TestCallIsRefused(t *testing.T) {
	tpl, err := Parse("t", `{{call .Title}}`, nil, dataType)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(tpl, sample(), 1<<10, time.Second); err == nil || !strings.Contains(err.Error(), "call is not allowed") {
		t.Errorf("call: %v", err)
	}
	if _, err := Parse("t", `x`, template.FuncMap{"printf": strings.ToUpper}, dataType); err == nil {
		t.Error("a caller's printf replaced the bounded one")
	}
}

func TestOutputIsBoundedAndClippable(t *testing.T) {
	tpl, err := Parse("t", `{{range .Items}}{{range $.Items}}{{$.Title}}{{$.Title}}{{end}}{{end}}`, nil, dataType)
	if err != nil {
		t.Fatal(err)
	}
	d := sample()
	d.Title = strings.Repeat("x", 1000)
	out, err := Execute(tpl, d, 2500, time.Second)
	if !errors.Is(err, ErrTooLong) || len(out) != 2500 {
		t.Errorf("got %d bytes, %v; want the first 2500 and ErrTooLong", len(out), err)
	}
}

func TestWhatTemplatesDoStillWorks(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{`{{range .Items}}{{.Name}}{{range .Tags}}+{{.}}{{end}};{{end}}`, "a+x;b;"},
		{`{{range $i, $it := .Items}}{{$i}}={{$it.Name}} {{end}}`, "0=a 1=b "},
		{`{{with .Ptr}}{{range .Tags}}{{.}}{{end}}{{end}}`, "y"},
		{`{{range $k, $v := .ByName}}{{$k}}:{{$v.Name}}{{end}}`, "a:a"},
		{`{{$xs := .Items}}{{range $xs}}{{.Name}}{{end}}`, "ab"},
		{`{{range .Items}}{{if eq .Name "b"}}{{break}}{{end}}{{.Name}}{{end}}`, "a"},
		{`{{with .Items}}{{range .}}{{.Name}}{{end}}{{end}}`, "ab"},
		{`#{{.Number}} {{.Title | printf "%q"}}`, `#1099511627776 "t"`},
	} {
		tpl, err := Parse("t", tc.text, nil, dataType)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.text, err)
			continue
		}
		out, err := Execute(tpl, sample(), 1<<10, time.Second)
		if err != nil || out != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.text, out, err, tc.want)
		}
	}
}

func TestTimeoutAbandonsARender(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	tpl, err := Parse("t", `{{wait}}`, template.FuncMap{"wait": func() string { <-block; return "" }}, dataType)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(tpl, sample(), 1<<10, 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want ErrTimeout", err)
	}
}

// FuzzParse: any template text either is refused or renders on the sample within the bounds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{{range .Items}}{{.Name}}{{end}}`, `{{range 10}}{{end}}`, `{{printf "%5d" .Number}}`,
		`{{define "a"}}{{end}}`, `{{with .Ptr}}{{range .Tags}}{{.}}{{end}}{{end}}`, `{{$x := .Items}}{{range $x}}{{end}}`,
		`{{range $i, $e := .ByName}}{{$e.Tags}}{{end}}`, `{{if .Title}}{{.Title}}{{else}}none{{end}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		tpl, err := Parse("t", text, nil, dataType)
		if err != nil {
			return
		}
		out, err := Execute(tpl, sample(), 1<<16, 2*time.Second)
		if errors.Is(err, ErrTimeout) {
			t.Fatalf("%q passed the checks and did not finish", text)
		}
		if len(out) > 1<<16 {
			t.Fatalf("%q wrote %d bytes", text, len(out))
		}
	})
}
