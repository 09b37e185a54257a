package lifecycle

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + name)
	if err != nil {
		t.Fatalf("read docs/%s: %v", name, err)
	}
	return string(b)
}

// mermaidBlock returns the lines of the first ```mermaid block.
func mermaidBlock(t *testing.T, doc string) []string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "```mermaid\n")
	if !ok {
		t.Fatal("docs/lifecycle.md has no mermaid block")
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("the mermaid block is not closed")
	}
	return strings.Split(block, "\n")
}

var (
	stateOpen = regexp.MustCompile(`^state\s+(?:"[^"]*"\s+as\s+)?(\w+)\s*\{$`)
	edgeLine  = regexp.MustCompile(`^(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::.*)?$`)
	bareState = regexp.MustCompile(`^\w+$`)
)

// parseDiagram reads a stateDiagram: nested composite states become groups (each group holds
// every phase nested in it, at any depth), and edges are returned as written.
func parseDiagram(t *testing.T, lines []string) (map[string][]agentsv1alpha1.SessionPhase, [][2]string) {
	t.Helper()
	groups := map[string][]agentsv1alpha1.SessionPhase{}
	var open []string
	var edges [][2]string
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line == "stateDiagram-v2" || strings.HasPrefix(line, "%%") || strings.HasPrefix(line, "direction "):
		case stateOpen.MatchString(line):
			name := stateOpen.FindStringSubmatch(line)[1]
			groups[name] = nil
			open = append(open, name)
		case line == "}":
			if len(open) == 0 {
				t.Fatalf("mermaid line %d: unbalanced }", i+1)
			}
			open = open[:len(open)-1]
		case edgeLine.MatchString(line):
			m := edgeLine.FindStringSubmatch(line)
			edges = append(edges, [2]string{m[1], m[2]})
		case bareState.MatchString(line):
			for _, g := range open {
				groups[g] = append(groups[g], agentsv1alpha1.SessionPhase(line))
			}
		default:
			t.Fatalf("mermaid line %d not understood: %q", i+1, line)
		}
	}
	if len(open) != 0 {
		t.Fatalf("composite states left open: %v", open)
	}
	return groups, edges
}

func expandWith(groups map[string][]agentsv1alpha1.SessionPhase, name string) []agentsv1alpha1.SessionPhase {
	if name == "[*]" {
		return []agentsv1alpha1.SessionPhase{Start}
	}
	if g, ok := groups[name]; ok {
		return g
	}
	return []agentsv1alpha1.SessionPhase{agentsv1alpha1.SessionPhase(name)}
}

func TestDiagramMatchesTransitionTable(t *testing.T) {
	g := NewWithT(t)
	groups, edges := parseDiagram(t, mermaidBlock(t, readDoc(t, "lifecycle.md")))
	g.Expect(groups).To(Equal(Groups), "the diagram's composite states are the code's groups")

	drawn := map[Transition]bool{}
	for _, e := range edges {
		for _, f := range expandWith(groups, e[0]) {
			for _, to := range expandWith(groups, e[1]) {
				if f != to {
					drawn[Transition{f, to}] = true
				}
			}
		}
	}
	coded := map[Transition]bool{}
	for _, tr := range Transitions() {
		coded[tr] = true
	}
	var onlyDrawn, onlyCoded []string
	for tr := range drawn {
		if !coded[tr] {
			onlyDrawn = append(onlyDrawn, fmt.Sprintf("%q->%q", tr.From, tr.To))
		}
	}
	for tr := range coded {
		if !drawn[tr] {
			onlyCoded = append(onlyCoded, fmt.Sprintf("%q->%q", tr.From, tr.To))
		}
	}
	g.Expect(onlyDrawn).To(BeEmpty(), "edges in docs/lifecycle.md that lifecycle.Rules does not have")
	g.Expect(onlyCoded).To(BeEmpty(), "edges of lifecycle.Rules missing from docs/lifecycle.md")

	phases := map[agentsv1alpha1.SessionPhase]bool{}
	for tr := range drawn {
		phases[tr.From], phases[tr.To] = true, true
	}
	for _, p := range []agentsv1alpha1.SessionPhase{agentsv1alpha1.PhaseQueued, agentsv1alpha1.PhaseSpawning, agentsv1alpha1.PhaseWorking,
		agentsv1alpha1.PhasePROpen, agentsv1alpha1.PhaseCIFailed, agentsv1alpha1.PhaseReviewPending, agentsv1alpha1.PhaseChangesRequested,
		agentsv1alpha1.PhaseApproved, agentsv1alpha1.PhaseMergeable, agentsv1alpha1.PhaseMerged, agentsv1alpha1.PhaseNeedsInput,
		agentsv1alpha1.PhaseStuck, agentsv1alpha1.PhaseErrored, agentsv1alpha1.PhaseStopped, agentsv1alpha1.PhaseDone} {
		g.Expect(phases).To(HaveKey(p), "every phase appears in the diagram")
	}
}

// tableRows returns the cells of the markdown table whose header row is header.
func tableRows(t *testing.T, doc, header string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == header:
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			var cells []string
			for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			rows = append(rows, cells)
		case in:
			return rows
		}
	}
	if !in {
		t.Fatalf("no table with header %q", header)
	}
	return rows
}

func TestTransitionsTableMatchesRules(t *testing.T) {
	g := NewWithT(t)
	rows := tableRows(t, readDoc(t, "lifecycle.md"), "| From | To | Evidence |")
	var doc []Rule
	for _, r := range rows {
		g.Expect(r).To(HaveLen(3))
		doc = append(doc, Rule{From: r[0], To: r[1], Evidence: r[2]})
	}
	g.Expect(doc).To(Equal(Rules))
}

func TestReactionsDocMatchesDefaults(t *testing.T) {
	g := NewWithT(t)
	rows := tableRows(t, readDoc(t, "reactions.md"), "| Trigger | Action | Retries | Escalate after | Priority |")
	defs := DefaultReactions()
	seen := map[agentsv1alpha1.ReactionTrigger]bool{}
	for _, r := range rows {
		g.Expect(r).To(HaveLen(5))
		trig := agentsv1alpha1.ReactionTrigger(r[0])
		def, ok := defs[trig]
		g.Expect(ok).To(BeTrue(), "unknown trigger %s", trig)
		seen[trig] = true
		g.Expect(r[1]).To(Equal(string(def.Action)), string(trig))
		if def.Retries == nil {
			g.Expect(r[2]).To(Equal("—"), string(trig))
		} else {
			g.Expect(r[2]).To(Equal(fmt.Sprint(*def.Retries)), string(trig))
		}
		if def.EscalateAfter == 0 {
			g.Expect(r[3]).To(Equal("—"), string(trig))
		} else {
			d, err := time.ParseDuration(r[3])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d).To(Equal(def.EscalateAfter), string(trig))
		}
		g.Expect(strings.Fields(r[4])[0]).To(Equal(string(DefaultPriority(trig, false))), string(trig))
	}
	g.Expect(seen).To(HaveLen(len(Triggers)))
}

func TestReactionsDocMatchesEventPriorities(t *testing.T) {
	g := NewWithT(t)
	rows := tableRows(t, readDoc(t, "reactions.md"), "| Event | Priority | When |")
	doc := map[agentsv1alpha1.EventType]agentsv1alpha1.Priority{}
	for _, r := range rows {
		g.Expect(r).To(HaveLen(3))
		doc[agentsv1alpha1.EventType(r[0])] = agentsv1alpha1.Priority(r[1])
	}
	g.Expect(doc).To(Equal(EventPriorities))
}

// TestEventsUseTheirPriority keeps emitted events on the documented priorities, except the
// causes the docs name (a lost pod, a failed exit, a conflict sent to the agent).
func TestEventsUseTheirPriority(t *testing.T) {
	g := NewWithT(t)
	exceptions := map[agentsv1alpha1.EventType]agentsv1alpha1.Priority{
		agentsv1alpha1.EventSessionKilled:  agentsv1alpha1.PriorityWarning,
		agentsv1alpha1.EventSessionExited:  agentsv1alpha1.PriorityWarning,
		agentsv1alpha1.EventMergeConflicts: agentsv1alpha1.PriorityInfo,
	}
	for _, tc := range phaseCases() {
		in := from(tc.from)
		tc.setup(&in)
		for _, e := range Decide(in).Events {
			want, ok := EventPriorities[e.Type]
			g.Expect(ok).To(BeTrue(), "event %s is not in EventPriorities", e.Type)
			if e.Priority != want {
				g.Expect(e.Priority).To(Equal(exceptions[e.Type]), "%s in %q", e.Type, tc.name)
			}
		}
	}
}

// The actions table of docs/architecture.md lists every action type, in order, each with its
// key, its runner and its test: a new action cannot be added undocumented.
func TestActionsDocumented(t *testing.T) {
	g := NewWithT(t)
	doc := readDoc(t, "architecture.md")
	_, section, ok := strings.Cut(doc, "\n## Actions\n")
	g.Expect(ok).To(BeTrue(), "docs/architecture.md has an Actions section")
	row := regexp.MustCompile("^\\| `(\\w+)` \\|(.+)\\|(.+)\\|(.+)\\|$")
	var listed []ActionType
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for i, col := range m[2:] {
			g.Expect(strings.TrimSpace(col)).NotTo(BeEmpty(), "action %s: column %d is empty", m[1], i+2)
		}
		listed = append(listed, ActionType(m[1]))
	}
	g.Expect(listed).To(Equal(ActionTypes))

	src, err := os.ReadFile("decision.go")
	g.Expect(err).NotTo(HaveOccurred())
	var declared []ActionType
	for _, m := range regexp.MustCompile(`(?m)^\s+Action\w+ ActionType = "(\w+)"`).FindAllStringSubmatch(string(src), -1) {
		declared = append(declared, ActionType(m[1]))
	}
	g.Expect(declared).To(ConsistOf(ActionTypes), "ActionTypes lists every declared action type")
}
