package selection

import (
	"testing"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// The three attempts of the issue: one whose CI fails, one green and small, one green and large
// (green first, so FirstGreen and Score disagree).
func three() []Attempt {
	return []Attempt{
		{Name: "fix-1", Index: 1, PR: 11, PROpen: true, Checks: agentsv1alpha1.ChecksFailing, Changed: 30, Cost: 1},
		{Name: "fix-2", Index: 2, PR: 12, PROpen: true, Checks: agentsv1alpha1.ChecksPassing, GreenAt: t0.Add(5 * time.Minute), Changed: 12, Cost: 1},
		{Name: "fix-3", Index: 3, PR: 13, PROpen: true, Checks: agentsv1alpha1.ChecksPassing, GreenAt: t0.Add(2 * time.Minute), Changed: 400, Cost: 1},
	}
}

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   Policy
		attempts func() []Attempt
		chosen   string
		leader   string
		waiting  bool
		failed   bool
		problem  bool
	}{
		{name: "FirstGreen: the first attempt whose checks passed", policy: Policy{Kind: agentsv1alpha1.SelectFirstGreen, Weights: DefaultWeights},
			attempts: three, chosen: "fix-3", leader: "fix-3"},
		{name: "Score: the green and small one, once all settled", policy: Policy{Kind: agentsv1alpha1.SelectScore, Weights: DefaultWeights},
			attempts: three, chosen: "fix-2", leader: "fix-2"},
		{name: "Score waits while an attempt's checks run", policy: Policy{Kind: agentsv1alpha1.SelectScore, Weights: DefaultWeights},
			attempts: func() []Attempt { a := three(); a[0].Checks = agentsv1alpha1.ChecksPending; return a }, leader: "fix-2"},
		{name: "Score: an attempt that ended without a pull request is settled", policy: Policy{Kind: agentsv1alpha1.SelectScore, Weights: DefaultWeights},
			attempts: func() []Attempt { a := three(); a[0] = Attempt{Name: "fix-1", Index: 1, Ended: true}; return a }, chosen: "fix-2", leader: "fix-2"},
		{name: "Human: nobody chosen, a person is waited for", policy: Policy{Kind: agentsv1alpha1.SelectHuman, Weights: DefaultWeights},
			attempts: three, leader: "fix-2", waiting: true},
		{name: "Human: the pick", policy: Policy{Kind: agentsv1alpha1.SelectHuman, Weights: DefaultWeights, Pick: "fix-1"},
			attempts: three, chosen: "fix-1", leader: "fix-1"},
		{name: "a pick overrides FirstGreen, even of a failing attempt", policy: Policy{Kind: agentsv1alpha1.SelectFirstGreen, Weights: DefaultWeights, Pick: "fix-1"},
			attempts: three, chosen: "fix-1", leader: "fix-1"},
		{name: "a pick of an attempt without a pull request is said, not followed", policy: Policy{Kind: agentsv1alpha1.SelectHuman, Weights: DefaultWeights, Pick: "fix-9"},
			attempts: three, leader: "fix-2", waiting: true, problem: true},
		{name: "FirstGreen: nothing green yet", policy: Policy{Kind: agentsv1alpha1.SelectFirstGreen, Weights: DefaultWeights},
			attempts: func() []Attempt {
				a := three()
				for i := range a {
					a[i].Checks, a[i].GreenAt = agentsv1alpha1.ChecksPending, time.Time{}
				}
				return a
			}, leader: "fix-2"},
		{name: "every attempt ended without a pull request: failed", policy: Policy{Kind: agentsv1alpha1.SelectFirstGreen, Weights: DefaultWeights},
			attempts: func() []Attempt {
				return []Attempt{{Name: "fix-1", Index: 1, Ended: true}, {Name: "fix-2", Index: 2, Ended: true}}
			}, failed: true},
		{name: "FirstGreen: all ended, red pull requests open: a person may still pick", policy: Policy{Kind: agentsv1alpha1.SelectFirstGreen, Weights: DefaultWeights},
			attempts: func() []Attempt {
				a := three()[:1]
				a[0].Ended = true
				return a
			}, leader: "fix-1", waiting: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			atts := tc.attempts()
			// Order does not matter: reversed gives the same.
			rev := make([]Attempt, len(atts))
			for i := range atts {
				rev[len(atts)-1-i] = atts[i]
			}
			for _, in := range [][]Attempt{atts, rev} {
				got := Choose(tc.policy, in)
				if got.Chosen != tc.chosen || got.Leader != tc.leader || got.WaitingForPick != tc.waiting || got.Failed != tc.failed || (got.PickProblem != "") != tc.problem {
					t.Fatalf("Choose = chosen %q leader %q waiting %t failed %t problem %q (why %q, scores %v); want chosen %q leader %q waiting %t failed %t problem %t",
						got.Chosen, got.Leader, got.WaitingForPick, got.Failed, got.PickProblem, got.Why, got.Scores, tc.chosen, tc.leader, tc.waiting, tc.failed, tc.problem)
				}
				if got.Chosen != "" && got.Why == "" {
					t.Fatal("a choice says why")
				}
			}
		})
	}
}

// The score's terms as documented: checks 40, review 20, diff size 20, cost 10, time 10.
func TestScores(t *testing.T) {
	atts := three()
	atts[1].Review = agentsv1alpha1.ReviewApproved
	atts[2].Cost = 3
	got := Scores(DefaultWeights, atts)
	want := map[string]float64{
		// failing: checks 0, review 0.5, diff (400-30)/(400-12), cost 1, time 0 (not green)
		"fix-1": round(40*0 + 20*0.5 + 20*(370.0/388) + 10*1 + 10*0),
		// green, approved, smallest, cheapest, green last of the two
		"fix-2": round(40 + 20*1 + 20*1 + 10*1 + 10*0),
		// green first, largest, dearest
		"fix-3": round(40 + 20*0.5 + 20*0 + 10*0 + 10*1),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("score of %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if s := Scores(Weights{}, atts); s["fix-2"] != 0 {
		t.Errorf("all weights zero: scores %v, want 0", s)
	}
	if s := Scores(DefaultWeights, []Attempt{{Name: "a", Index: 1}}); len(s) != 0 {
		t.Errorf("no pull request, no score: %v", s)
	}
	w := WeightsOf(&agentsv1alpha1.ScoreWeights{Checks: ptr(int32(0))})
	if w.Checks != 0 || w.Review != DefaultWeights.Review {
		t.Errorf("WeightsOf: %+v", w)
	}
}

func round(v float64) float64 { return float64(int(v*10+0.5)) / 10 }

func ptr[T any](v T) *T { return &v }
