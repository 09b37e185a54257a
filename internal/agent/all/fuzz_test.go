package all

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// FuzzParsers feeds every registered agent's output parser (the CLI's output is the agent's, and
// a steered agent writes what it likes) with its real samples' lines and mutations of them. A
// parser never panics, and one line yields a bounded number of events.
func FuzzParsers(f *testing.F) {
	types := agent.Types()
	for i, t := range types {
		files, _ := filepath.Glob(filepath.Join("..", dirOf(t), "testdata", "*"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			for line := range bytes.SplitSeq(b, []byte("\n")) {
				f.Add(uint8(i), line)
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		a, err := agent.Get(types[int(which)%len(types)])
		if err != nil {
			t.Fatal(err)
		}
		p := a.NewParser()
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			n := len(p.Line(sc.Bytes()))
			if n > 64 {
				t.Fatalf("one line of %d bytes gave %d events", len(sc.Bytes()), n)
			}
		}
		_ = p.Finish()
	})
}

// dirOf is the package directory of an agent type.
func dirOf(t agentsv1alpha1.AgentType) string {
	if t == agentsv1alpha1.AgentClaudeCode {
		return "claudecode"
	}
	return string(t)
}
