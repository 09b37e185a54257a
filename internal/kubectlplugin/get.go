package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

type getOptions struct {
	output   string
	selector string
	project  string
	all      bool
}

func newGet(o *Options) *cobra.Command {
	g := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get [NAME...]",
		Short: "List sessions: phase, pull request, CI, review, cost, age",
		Example: `  kubectl shepherd get
  kubectl shepherd get -A -o wide
  kubectl shepherd get widgets-42 -o yaml
  kubectl shepherd get --project widgets -l team=web`,
		RunE: run(o, func(ctx context.Context, e *env, args []string) error { return g.run(ctx, e, args) }),
	}
	cmd.Flags().StringVarP(&g.output, "output", "o", "", "Output format: wide, json or yaml.")
	cmd.Flags().StringVarP(&g.selector, "selector", "l", "", "Label selector (key=value,...).")
	cmd.Flags().StringVar(&g.project, "project", "", "Only the sessions of this Project.")
	cmd.Flags().BoolVarP(&g.all, "all-namespaces", "A", false, "Sessions of every namespace you may list.")
	return cmd
}

func (g *getOptions) run(ctx context.Context, e *env, names []string) error {
	switch g.output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: use wide, json or yaml", g.output)
	}
	if g.all && len(names) > 0 {
		return fmt.Errorf("a session name needs a namespace: drop -A and pass -n")
	}
	ns := e.ns
	if g.all {
		ns = ""
	}
	var items []unstructured.Unstructured
	if len(names) > 0 {
		for _, n := range names {
			u, err := e.sessions(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			items = append(items, *u)
		}
	} else {
		list, err := e.sessions(ns).List(ctx, metav1.ListOptions{LabelSelector: g.selector})
		if err != nil {
			return err
		}
		items = list.Items
	}
	if g.project != "" {
		kept := items[:0]
		for _, u := range items {
			if p, _, _ := unstructured.NestedString(u.Object, "spec", "projectRef", "name"); p == g.project {
				kept = append(kept, u)
			}
		}
		items = kept
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].GetNamespace() != items[j].GetNamespace() {
			return items[i].GetNamespace() < items[j].GetNamespace()
		}
		return items[i].GetName() < items[j].GetName()
	})
	switch g.output {
	case "json", "yaml":
		var obj runtime.Object
		if len(names) == 1 {
			obj = &items[0]
		} else {
			list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}}
			list.Items = items
			obj = list
		}
		var p printers.ResourcePrinter = &printers.JSONPrinter{}
		if g.output == "yaml" {
			p = &printers.YAMLPrinter{}
		}
		return p.PrintObj(obj, e.out)
	}
	if len(items) == 0 {
		where := "namespace " + ns
		if g.all {
			where = "any namespace"
		}
		_, err := fmt.Fprintf(e.opts.Streams.ErrOut, "No sessions found in %s.\n", where)
		return err
	}
	sessions := make([]agentsv1alpha1.AgentSession, len(items))
	for i := range items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &sessions[i]); err != nil {
			return fmt.Errorf("%s: %w", items[i].GetName(), err)
		}
	}
	return printTable(e.out, sessions, g.all, g.output == "wide", e.now())
}

// printTable is get's table; -A adds the namespace, -o wide the branch, activity, turns and the
// agent's question.
func printTable(w io.Writer, sessions []agentsv1alpha1.AgentSession, namespaces, wide bool, now time.Time) error {
	tw := printers.GetNewTabWriter(w)
	head := []string{"NAME", "PROJECT", "AGENT", "PHASE", "PR", "CI", "REVIEW", "COST", "AGE"}
	if namespaces {
		head = append([]string{"NAMESPACE"}, head...)
	}
	if wide {
		head = append(head, "BRANCH", "ACTIVITY", "TURNS", "QUESTION")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i := range sessions {
		s := &sessions[i]
		pr, ci, review := "-", "-", "-"
		if p := s.Status.PullRequest; p != nil {
			pr = orDash(p.URL)
			if p.URL == "" && p.Number > 0 {
				pr = fmt.Sprintf("#%d", p.Number)
			}
			ci, review = orDash(string(p.Checks)), orDash(string(p.ReviewDecision))
		}
		row := []string{s.Name, s.Spec.ProjectRef.Name, orDash(string(AgentType(s))), orDash(string(s.Status.Phase)), pr, ci, review, Cost(s), age(s.CreationTimestamp.Time, now)}
		if namespaces {
			row = append([]string{s.Namespace}, row...)
		}
		if wide {
			activity, question, turns := "-", "-", "-"
			if a := s.Status.Activity; a != nil {
				activity = orDash(string(a.State))
				question = orDash(truncate(oneLine(a.Question), 60))
			}
			if u := s.Status.Usage; u != nil && u.Turns > 0 {
				turns = fmt.Sprint(u.Turns)
			}
			row = append(row, orDash(s.Status.Branch), activity, turns, question)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// AgentType is the session's agent: as the controller resolved it, else as its spec asks.
func AgentType(s *agentsv1alpha1.AgentSession) agentsv1alpha1.AgentType {
	if s.Status.Agent.Type != "" {
		return s.Status.Agent.Type
	}
	if s.Spec.Agent != nil {
		return s.Spec.Agent.Type
	}
	return ""
}

// Cost is the session's cost so far ("$0.42"), "-" before any.
func Cost(s *agentsv1alpha1.AgentSession) string {
	if s.Status.Usage == nil || s.Status.Usage.CostUSD == "" {
		return "-"
	}
	return "$" + s.Status.Usage.CostUSD
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
