// Package agenttest holds what the adapters' tests share: reading a fixture of an agent's real
// output through its parser, and picking events by kind.
package agenttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shepherd-dev/shepherd/internal/agent"
)

// ParseFile feeds testdata/name through p and returns every event, Finish's included.
func ParseFile(t *testing.T, p agent.Parser, name string) []agent.Event {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	return agent.ParseAll(p, f)
}

// Kinds returns the events of kind k, in order.
func Kinds(events []agent.Event, k agent.Kind) []agent.Event {
	var out []agent.Event
	for _, e := range events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}
