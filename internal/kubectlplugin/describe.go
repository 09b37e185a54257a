package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/cli-runtime/pkg/printers"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

func newDescribe(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "A session's task, pull request, cost, question, and its timeline: phases, reactions, messages, escalations",
		Args:  cobra.ExactArgs(1),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error {
			_, s, err := e.session(ctx, args[0])
			if err != nil {
				return err
			}
			// The session's events are its timeline; reading them needs `list events`, which a
			// user who may read sessions usually has. Without it the timeline says so.
			evs, err := e.kube.CoreV1().Events(s.Namespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.uid": string(s.UID)}.String()})
			var events []corev1.Event
			if err == nil {
				events = evs.Items
			}
			return printDescribe(e.out, s, events, err, e.now())
		}),
	}
}

// eventTime is when an event last happened.
func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

func ago(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return age(t.Time, now) + " ago"
}

// printDescribe writes describe's report: the facts, then the timeline and the lists.
func printDescribe(w io.Writer, s *agentsv1alpha1.AgentSession, events []corev1.Event, eventsErr error, now time.Time) error {
	tw := printers.GetNewTabWriter(w)
	field := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	field("Name", s.Name)
	field("Namespace", s.Namespace)
	field("Project", s.Spec.ProjectRef.Name)
	switch {
	case s.Spec.Issue != "":
		field("Task", "issue "+s.Spec.Issue)
	default:
		field("Task", "prompt: "+truncate(oneLine(s.Spec.Prompt), 100))
	}
	agent := orDash(string(AgentType(s)))
	if s.Status.Agent.Model != "" {
		agent += " (" + s.Status.Agent.Model + ")"
	}
	field("Agent", agent)
	state := string(s.Spec.State)
	if state == "" {
		state = string(agentsv1alpha1.SessionRunning)
	}
	field("State", state)
	phase := orDash(string(s.Status.Phase))
	if s.Status.PhaseTransitionTime != nil {
		phase += ", since " + ago(s.Status.PhaseTransitionTime, now)
	}
	field("Phase", phase)
	if c := readyCondition(s); c != nil && c.Message != "" {
		field("Why", oneLine(c.Message))
	}
	field("Branch", orDash(s.Status.Branch))
	if pr := s.Status.PullRequest; pr != nil {
		field("Pull request", fmt.Sprintf("%s (#%d, %s), head %s", orDash(pr.URL), pr.Number, orDash(string(pr.State)), orDash(short(pr.HeadSHA))))
		checks := orDash(string(pr.Checks))
		if pr.ChecksSummary != "" {
			checks += ": " + pr.ChecksSummary
		}
		field("  Checks", checks)
		for _, f := range pr.FailedChecks {
			field("  Failed", f.Name+" "+f.URL)
		}
		field("  Review", fmt.Sprintf("%s, %d unresolved thread(s)", orDash(string(pr.ReviewDecision)), pr.UnresolvedThreads))
		field("  Merge", orDash(string(pr.MergeState)))
	}
	if a := s.Status.Activity; a != nil {
		field("Activity", fmt.Sprintf("%s, last %s", orDash(string(a.State)), ago(a.LastActivityTime, now)))
		if a.Question != "" {
			field("Question", oneLine(a.Question))
		}
	}
	if u := s.Status.Usage; u != nil {
		field("Cost", fmt.Sprintf("%s, %d turn(s), %d in / %d out / %d cached tokens", Cost(s), u.Turns, u.InputTokens, u.OutputTokens, u.CacheReadTokens))
	}
	if s.Status.Summary != "" {
		field("Summary", oneLine(s.Status.Summary))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nTimeline:")
	tw = printers.GetNewTabWriter(w)
	type entry struct {
		at         time.Time
		what, more string
	}
	var tl []entry
	add := func(t *metav1.Time, what, more string) {
		if t != nil && !t.IsZero() {
			tl = append(tl, entry{t.Time, what, more})
		}
	}
	add(&s.CreationTimestamp, "Created", "")
	add(s.Status.AdmittedTime, "Admitted", "")
	add(s.Status.StartTime, "Started", "")
	add(s.Status.CompletionTime, "Completed", string(s.Status.Phase))
	for i := range events {
		ev := &events[i]
		more := oneLine(ev.Message)
		if ev.Count > 1 {
			more += fmt.Sprintf(" (×%d)", ev.Count)
		}
		tl = append(tl, entry{eventTime(ev), ev.Reason, more})
	}
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].at.Before(tl[j].at) })
	for _, t := range tl {
		if t.more == "" {
			fmt.Fprintf(tw, "  %s\t%s\n", age(t.at, now)+" ago", t.what)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", age(t.at, now)+" ago", t.what, truncate(t.more, 120))
	}
	if eventsErr != nil {
		fmt.Fprintf(tw, "  (events not shown: %s)\n", eventsErr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var reactions [][]string
	for _, r := range s.Status.Reactions {
		reactions = append(reactions, []string{string(r.Trigger), fmt.Sprint(r.Attempts), fmt.Sprint(r.Escalated), ago(r.LastAttemptTime, now)})
	}
	delivered := map[string]bool{}
	for _, id := range s.Status.Messages.Delivered {
		delivered[id] = true
	}
	var messages [][]string
	for _, m := range s.Spec.Messages {
		st := "pending"
		if delivered[m.ID] {
			st = "delivered"
		}
		messages = append(messages, []string{m.ID, orDash(m.From), st, truncate(oneLine(m.Text), 80)})
	}
	for _, p := range s.Status.Messages.Pending {
		if p.Source != agentsv1alpha1.MessageFromUser { // a user's is listed above, from spec.messages
			messages = append(messages, []string{p.ID, "shepherd (" + string(p.Source) + ")", "pending", truncate(oneLine(p.Text), 80)})
		}
	}
	var notifications [][]string
	for _, n := range s.Status.Notifications {
		notifications = append(notifications, []string{n.Type, string(n.Priority), orDash(strings.Join(n.Routes, ",")), truncate(oneLine(n.Message), 80)})
	}
	for _, sec := range []struct {
		title string
		head  []string
		rows  [][]string
	}{
		{"Reactions", []string{"TRIGGER", "ATTEMPTS", "ESCALATED", "LAST"}, reactions},
		{"Messages", []string{"ID", "FROM", "STATE", "TEXT"}, messages},
		{"Notifications", []string{"TYPE", "PRIORITY", "ROUTES", "MESSAGE"}, notifications},
	} {
		if err := section(w, sec.title, sec.head, sec.rows); err != nil {
			return err
		}
	}
	return nil
}

// section writes a titled, indented table; nothing when it has no rows.
func section(w io.Writer, title string, head []string, rows [][]string) error {
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := printers.GetNewTabWriter(w)
	for _, r := range append([][]string{head}, rows...) {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func readyCondition(s *agentsv1alpha1.AgentSession) *metav1.Condition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == "Ready" {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}
