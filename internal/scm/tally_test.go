package scm

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestTally(t *testing.T) {
	pass := func(n string, req bool) Check { return Check{Name: n, Outcome: CheckPassed, Required: req} }
	fail := func(n string, req bool) Check { return Check{Name: n, Outcome: CheckFailed, Required: req} }
	pend := func(n string, req bool) Check { return Check{Name: n, Outcome: CheckPending, Required: req} }
	for _, tc := range []struct {
		name       string
		checks     []Check
		state      ChecksState
		failed     []string
		reqFailed  int
		reqPending int
	}{
		{name: "no checks", state: ChecksNone},
		{name: "all passed", checks: []Check{pass("a", false), pass("b", false)}, state: ChecksPassing},
		{name: "one failed among optional ones fails", checks: []Check{pass("a", false), fail("b", false)}, state: ChecksFailing, failed: []string{"b"}},
		{name: "an optional failure does not fail required ones that passed", checks: []Check{pass("req", true), fail("lint", false)}, state: ChecksPassing, failed: []string{"lint"}},
		{name: "a required failure fails", checks: []Check{fail("req", true), pass("lint", false)}, state: ChecksFailing, failed: []string{"req"}, reqFailed: 1},
		{name: "a pending required check keeps it pending", checks: []Check{pend("req", true), pass("lint", false)}, state: ChecksPending, reqPending: 1},
		{name: "failure wins over pending", checks: []Check{pend("a", false), fail("b", false)}, state: ChecksFailing, failed: []string{"b"}},
		{name: "skipped counts as neither", checks: []Check{{Name: "s", Outcome: CheckSkipped}, pass("a", false)}, state: ChecksPassing},
		{name: "required failures come first, otherwise in order", checks: []Check{fail("z", false), fail("y", true), fail("x", false)},
			state: ChecksFailing, failed: []string{"y", "z", "x"}, reqFailed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out := Tally(tc.checks)
			g.Expect(out.State).To(Equal(tc.state))
			g.Expect(out.Total).To(Equal(len(tc.checks)))
			var names []string
			for _, c := range out.FailedChecks {
				names = append(names, c.Name)
			}
			g.Expect(names).To(Equal(tc.failed))
			g.Expect(out.RequiredFailed).To(Equal(tc.reqFailed))
			g.Expect(out.RequiredPending).To(Equal(tc.reqPending))
		})
	}
}
