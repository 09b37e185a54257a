// Package selection chooses among an AgentTask's attempts (docs/best-of-n.md): the policies
// FirstGreen, Score and Human, and the score. It is pure: the same attempts always give the same
// choice, whatever order they come in.
package selection

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Attempt is what the choice reads of one attempt (its AgentSession's status).
type Attempt struct {
	Name string
	// Index is the attempt's place (1-based): ties go to the lower.
	Index int
	// Ended is true once the attempt's session reached a terminal phase or is gone.
	Ended bool
	// PR is the number of its pull request (0: none); PROpen while it is open.
	PR     int64
	PRURL  string
	PROpen bool
	Checks agentsv1alpha1.ChecksState
	// GreenAt is when its checks last became passing (zero when they do not pass).
	GreenAt time.Time
	Review  agentsv1alpha1.ReviewDecision
	// Changed is the pull request's changed lines (additions and deletions).
	Changed int64
	// Cost is what the attempt spent, in US dollars.
	Cost float64
}

// Eligible reports whether the attempt can be chosen by a policy: an open pull request whose
// checks pass. A person may pick any attempt with an open pull request.
func (a Attempt) Eligible() bool { return a.PROpen && a.Checks == agentsv1alpha1.ChecksPassing }

// settled: the attempt's verdict is in: it ended, or its pull request's checks concluded.
func (a Attempt) settled() bool {
	return a.Ended || a.PROpen && (a.Checks == agentsv1alpha1.ChecksPassing || a.Checks == agentsv1alpha1.ChecksFailing)
}

// Weights of the Score policy's terms.
type Weights struct{ Checks, Review, DiffSize, Cost, Time int32 }

// DefaultWeights are the Score policy's defaults (docs/best-of-n.md).
var DefaultWeights = Weights{Checks: 40, Review: 20, DiffSize: 20, Cost: 10, Time: 10}

// WeightsOf applies the set fields of w over the defaults.
func WeightsOf(w *agentsv1alpha1.ScoreWeights) Weights {
	out := DefaultWeights
	if w == nil {
		return out
	}
	set := func(dst *int32, v *int32) {
		if v != nil {
			*dst = *v
		}
	}
	set(&out.Checks, w.Checks)
	set(&out.Review, w.Review)
	set(&out.DiffSize, w.DiffSize)
	set(&out.Cost, w.Cost)
	set(&out.Time, w.Time)
	return out
}

// Policy is the task's selection.
type Policy struct {
	Kind    agentsv1alpha1.SelectionPolicy
	Weights Weights
	// Pick is a person's choice (spec.selection.pick), under any policy.
	Pick string
}

// Outcome is the choice.
type Outcome struct {
	// Leader is the attempt the policy ranks first so far ("" while none has a pull request).
	Leader string
	// Chosen is the attempt chosen now ("" while the policy waits), and Why says how.
	Chosen, Why string
	// WaitingForPick: only a person can choose now (Human, or no attempt can be chosen by the
	// policy while some have an open pull request and all have settled).
	WaitingForPick bool
	// Failed: every attempt ended with no open pull request: nothing can be chosen.
	Failed bool
	// PickProblem says why spec.selection.pick cannot be followed ("" when it can, or is unset).
	PickProblem string
	// Scores are the attempts' scores, 0 to 100, for those with a pull request.
	Scores map[string]float64
}

// Choose applies the policy to the attempts. Pure.
func Choose(p Policy, attempts []Attempt) Outcome {
	atts := append([]Attempt(nil), attempts...)
	sort.SliceStable(atts, func(i, j int) bool { return atts[i].Index < atts[j].Index })
	out := Outcome{Scores: Scores(p.Weights, atts)}
	ranked := rank(atts, out.Scores)
	if len(ranked) > 0 {
		out.Leader = ranked[0].Name
	}
	if p.Pick != "" {
		for _, a := range atts {
			if a.Name != p.Pick {
				continue
			}
			if a.PROpen {
				out.Chosen, out.Why = a.Name, "picked by a person (spec.selection.pick)"
				out.Leader = a.Name
				return out
			}
			out.PickProblem = fmt.Sprintf("spec.selection.pick names %s, which has no open pull request", p.Pick)
		}
		if out.PickProblem == "" {
			out.PickProblem = fmt.Sprintf("spec.selection.pick names %s, which is not an attempt of this task", p.Pick)
		}
	}
	allEnded, allSettled, anyOpen := true, true, false
	for _, a := range atts {
		allEnded = allEnded && a.Ended
		allSettled = allSettled && a.settled()
		anyOpen = anyOpen || a.PROpen
	}
	switch p.Kind {
	case agentsv1alpha1.SelectHuman:
		out.WaitingForPick = anyOpen
	case agentsv1alpha1.SelectScore:
		if !allSettled {
			break
		}
		for _, a := range ranked {
			if a.Eligible() {
				out.Chosen = a.Name
				out.Why = fmt.Sprintf("Score: the best score among the attempts whose checks pass, %s (of %s)", formatScore(out.Scores[a.Name]), scoreList(atts, out.Scores))
				return out
			}
		}
		out.WaitingForPick = anyOpen
	default: // FirstGreen
		var first *Attempt
		for i := range atts {
			a := &atts[i]
			if a.Eligible() && (first == nil || a.GreenAt.Before(first.GreenAt)) {
				first = a
			}
		}
		if first != nil {
			out.Chosen, out.Leader = first.Name, first.Name
			out.Why = "FirstGreen: the first attempt whose checks passed"
			if !first.GreenAt.IsZero() {
				out.Why += " (at " + first.GreenAt.UTC().Format(time.RFC3339) + ")"
			}
			return out
		}
		out.WaitingForPick = allSettled && anyOpen && allEnded
	}
	out.Failed = allEnded && !anyOpen
	if out.Failed {
		out.WaitingForPick = false
	}
	return out
}

// rank orders the attempts with a pull request by score, best first (ties: the lower index).
func rank(atts []Attempt, scores map[string]float64) []Attempt {
	var out []Attempt
	for _, a := range atts {
		if _, ok := scores[a.Name]; ok && a.PROpen {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return scores[out[i].Name] > scores[out[j].Name] })
	return out
}

// Scores scores every attempt with a pull request, 0 to 100: each term is between 0 and 1
// (checks: 1 passing; review: 1 approved, 0.5 no decision, 0 changes requested; diff size,
// cost and time: 1 for the best of the attempts, 0 for the worst, linear between, 1 for all
// when they are equal; time counts only attempts whose checks pass), weighed by w. Pure.
func Scores(w Weights, atts []Attempt) map[string]float64 {
	var withPR []Attempt
	for _, a := range atts {
		if a.PR > 0 {
			withPR = append(withPR, a)
		}
	}
	out := map[string]float64{}
	total := float64(w.Checks + w.Review + w.DiffSize + w.Cost + w.Time)
	if len(withPR) == 0 || total <= 0 {
		for _, a := range withPR {
			out[a.Name] = 0
		}
		return out
	}
	// smaller scores f relative to the attempts (only those only admits): the smallest 1, the
	// largest 0, linear between, 1 for all when they are equal.
	smaller := func(f func(Attempt) float64, only func(Attempt) bool) func(Attempt) float64 {
		mn, mx := math.Inf(1), math.Inf(-1)
		for _, a := range withPR {
			if only == nil || only(a) {
				mn, mx = math.Min(mn, f(a)), math.Max(mx, f(a))
			}
		}
		return func(a Attempt) float64 {
			switch {
			case only != nil && !only(a):
				return 0
			case mx <= mn:
				return 1
			}
			return (mx - f(a)) / (mx - mn)
		}
	}
	diff := smaller(func(a Attempt) float64 { return float64(a.Changed) }, nil)
	cost := smaller(func(a Attempt) float64 { return a.Cost }, nil)
	green := func(a Attempt) bool { return a.Checks == agentsv1alpha1.ChecksPassing && !a.GreenAt.IsZero() }
	soon := smaller(func(a Attempt) float64 { return float64(a.GreenAt.Unix()) }, green)
	for _, a := range withPR {
		checks := 0.0
		if a.Checks == agentsv1alpha1.ChecksPassing {
			checks = 1
		}
		review := 0.5
		switch a.Review {
		case agentsv1alpha1.ReviewApproved:
			review = 1
		case agentsv1alpha1.ReviewChangesRequested:
			review = 0
		}
		s := float64(w.Checks)*checks + float64(w.Review)*review + float64(w.DiffSize)*diff(a) + float64(w.Cost)*cost(a) + float64(w.Time)*soon(a)
		out[a.Name] = math.Round(s/total*1000) / 10
	}
	return out
}

// formatScore is a score as the status shows it.
func formatScore(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) }

// FormatScore is a score as the status shows it ("" for an attempt without one).
func FormatScore(scores map[string]float64, name string) string {
	s, ok := scores[name]
	if !ok {
		return ""
	}
	return formatScore(s)
}

func scoreList(atts []Attempt, scores map[string]float64) string {
	s := ""
	for _, a := range atts {
		v, ok := scores[a.Name]
		if !ok {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += a.Name + " " + formatScore(v)
	}
	return s
}
