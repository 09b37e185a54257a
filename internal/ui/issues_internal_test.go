package ui

import (
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shepherd-dev/shepherd/internal/tracker"
)

func TestParseIssueQuery(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		labels      []string
		limit       int
		err         string
	}{
		{name: "one label, default limit", query: "label=agent", labels: []string{"agent"}, limit: DefaultIssueLimit},
		{name: "repeated and comma-separated, sorted, deduplicated", query: "label=ready&label=agent,ready&limit=7", labels: []string{"agent", "ready"}, limit: 7},
		{name: "spaces and unicode kept", query: "label=" + url.QueryEscape("good first issue") + "&label=" + url.QueryEscape("ü"), labels: []string{"good first issue", "ü"}, limit: DefaultIssueLimit},
		{name: "no label", query: "limit=3", err: "at least one label"},
		{name: "only empty labels", query: "label=,&label=", err: "at least one label"},
		{name: "control character", query: "label=a%01b", err: "control characters"},
		{name: "not UTF-8", query: "label=%ff", err: "not UTF-8"},
		{name: "too long", query: "label=" + strings.Repeat("x", maxIssueLabelLen+1), err: "longer than"},
		{name: "too many", query: "label=a,b,c,d,e,f,g,h,i,j,k", err: "at most"},
		{name: "limit zero", query: "label=a&limit=0", err: "limit must be"},
		{name: "limit too high", query: "label=a&limit=251", err: "limit must be"},
		{name: "limit not a number", query: "label=a&limit=ten", err: "limit must be"},
		{name: "highest limit", query: "label=a&limit=250", labels: []string{"a"}, limit: MaxIssueLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			labels, limit, err := parseIssueQuery(q)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(labels, "|") != strings.Join(tc.labels, "|") || limit != tc.limit {
				t.Fatalf("got %q limit %d, want %q limit %d", labels, limit, tc.labels, tc.limit)
			}
		})
	}
}

// FuzzParseIssueQuery: whatever query string arrives, the parser answers within its bounds and
// never passes on a label a tracker query should not see.
func FuzzParseIssueQuery(f *testing.F) {
	for _, s := range []string{"label=agent", "label=a,b&limit=3", "label=%01", "label=%ff&limit=-1", "limit=999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		labels, limit, err := parseIssueQuery(q)
		if err != nil {
			return
		}
		if len(labels) == 0 || len(labels) > maxIssueLabels || limit < 1 || limit > MaxIssueLimit {
			t.Fatalf("out of bounds: %q limit %d", labels, limit)
		}
		for _, l := range labels {
			if l == "" || len(l) > maxIssueLabelLen || !utf8.ValidString(l) || strings.ContainsAny(l, ",\x00\n\r") {
				t.Fatalf("label %q passed", l)
			}
		}
	})
}

// TestIssueCacheBounds: answers expire after issueCacheTTL and the cache never holds more than
// maxIssueCache of them, however many distinct queries arrive.
func TestIssueCacheBounds(t *testing.T) {
	c := newIssueCache()
	t0 := time.Unix(0, 0)
	c.put("a", []tracker.Issue{{ID: "1"}}, t0)
	if got, ok := c.get("a", t0.Add(issueCacheTTL-time.Second)); !ok || len(got) != 1 {
		t.Fatalf("a fresh answer was not served: %v %v", got, ok)
	}
	if _, ok := c.get("a", t0.Add(issueCacheTTL)); ok {
		t.Fatal("an expired answer was served")
	}
	for i := range 3 * maxIssueCache {
		c.put(strings.Repeat("k", i+1), nil, t0)
		if len(c.entries) > maxIssueCache {
			t.Fatalf("%d entries after %d puts", len(c.entries), i+1)
		}
	}
}
