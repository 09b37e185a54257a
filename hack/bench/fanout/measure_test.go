package main

import (
	"testing"
	"time"
)

func TestPromSamplesAndWrites(t *testing.T) {
	before := []byte(`# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
`)
	after := []byte(`apiserver_request_total{code="201",component="apiserver",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 30
apiserver_request_total{code="409",component="apiserver",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 99
shepherd_api_writes_total{kind="pod",subresource="",verb="create"} 5
`)
	toRequests := func(body []byte) requests {
		out := requests{}
		for _, s := range promSamples(body, "apiserver_request_total") {
			out[requestKey{s.labels["verb"], s.labels["resource"], s.labels["subresource"]}] += s.value
		}
		return out
	}
	w := writes(toRequests(before), toRequests(after))
	if len(w) != 1 || w["pods POST"] != 22 {
		t.Errorf("writes = %v, want only pods POST 22 (reads and unchanged series left out)", w)
	}
	if got := promSamples(after, "shepherd_api_writes_total"); len(got) != 1 || got[0].value != 5 || got[0].labels["kind"] != "pod" {
		t.Errorf("shepherd samples = %+v", got)
	}
}

func TestPercentile(t *testing.T) {
	d := sortDurations([]time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {1, 10}, {0.1, 1}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%.2f = %d, want %d", c.p, got, c.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("empty: 0")
	}
}

func TestShepherdStored(t *testing.T) {
	own, events := shepherdStored(map[string]float64{
		"agentsessions POST": 10, "agentsessions/status PATCH": 20, "worktrees POST": 10, "worktrees/status PATCH": 10,
		"pods POST": 10, "pods/binding POST": 10, "pods/status PATCH": 20, "serviceaccounts/token POST": 10, "events POST": 25, "events PATCH": 5,
	})
	if own != 50 || events != 30 {
		t.Errorf("own %v events %v, want 50 and 30", own, events)
	}
}

func TestOrderCorrelation(t *testing.T) {
	at := func(s ...int) []time.Time {
		out := make([]time.Time, len(s))
		for i, v := range s {
			if v >= 0 {
				out[i] = time.Unix(int64(v), 0)
			}
		}
		return out
	}
	for _, c := range []struct {
		name string
		done []time.Time
		want float64
	}{
		{"in creation order", at(1, 2, 3, 4, 5), 1},
		{"reversed", at(5, 4, 3, 2, 1), -1},
		{"never there is left out", at(1, -1, 2, 3), 1},
		{"one swap of five", at(2, 1, 3, 4, 5), 0.9},
	} {
		if got := orderCorrelation(c.done); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
