package agent

import (
	"reflect"
	"testing"
)

type lenientLine struct {
	Type    string   `json:"type"`
	Cost    float64  `json:"total_cost_usd"`
	Result  string   `json:"result"`
	Errors  []string `json:"errors"`
	Attempt int      `json:"attempt"`
	Usage   *struct {
		In  int64 `json:"input_tokens"`
		Out int64 `json:"output_tokens"`
	} `json:"usage"`
	Inner struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	} `json:"inner"`
}

func TestDecodeLenient(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      lenientLine
		skipped   []string
		err       bool
	}{
		{name: "all well", raw: `{"type":"result","total_cost_usd":0.5,"result":"done","errors":["x"],"attempt":2}`,
			want: lenientLine{Type: "result", Cost: 0.5, Result: "done", Errors: []string{"x"}, Attempt: 2}},
		{name: "unneeded fields changed type", raw: `{"type":"result","total_cost_usd":0.5,"result":"done","errors":[{"message":"x"}],"attempt":"2"}`,
			want: lenientLine{Type: "result", Cost: 0.5, Result: "done"}, skipped: []string{"attempt", "errors"}},
		{name: "a nested field changed type", raw: `{"type":"result","usage":{"input_tokens":"12","output_tokens":7},"inner":{"name":"a","n":"x"}}`,
			want: func() lenientLine {
				l := lenientLine{Type: "result", Usage: &struct {
					In  int64 `json:"input_tokens"`
					Out int64 `json:"output_tokens"`
				}{Out: 7}}
				l.Inner.Name = "a"
				return l
			}(), skipped: []string{"inner.n", "usage.input_tokens"}},
		{name: "keys in another case", raw: `{"Type":"result","RESULT":"done"}`, want: lenientLine{Type: "result", Result: "done"}},
		{name: "null", raw: `null`},
		{name: "not an object", raw: `["result"]`, err: true},
		{name: "truncated", raw: `{"type":"res`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got lenientLine
			skipped, err := DecodeLenient([]byte(tc.raw), &got)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if tc.err {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(skipped, tc.skipped) && (len(skipped) != 0 || len(tc.skipped) != 0) {
				t.Errorf("skipped %v, want %v", skipped, tc.skipped)
			}
		})
	}
}

func FuzzDecodeLenient(f *testing.F) {
	f.Add([]byte(`{"type":"result","total_cost_usd":0.5,"usage":{"input_tokens":"1"}}`))
	f.Add([]byte(`{"inner":[1,2],"errors":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var l lenientLine
		_, _ = DecodeLenient(raw, &l) // never panics
	})
}
