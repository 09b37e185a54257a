package controller

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// A flood of verified issues/closed deliveries moves a Project's next tracker query to at most
// issueHintGap after its last one: a hundred deliveries cost one query, and only the Projects of
// the delivery's repository and namespace are touched.
func TestIssueHintsAreBounded(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	repo := scm.Repo{Owner: "acme", Name: "widgets"}
	mine, other, elsewhere := types.NamespacedName{Namespace: "team-a", Name: "widgets"},
		types.NamespacedName{Namespace: "team-b", Name: "widgets"}, types.NamespacedName{Namespace: "team-a", Name: "gadgets"}
	woken := map[types.NamespacedName]int{}
	w := newIssueWatch(nil, func(k types.NamespacedName) { woken[k]++ })
	interval := 10 * time.Minute
	w.asked[mine] = issueQuery{at: t0, queried: t0, repo: repo, interval: interval}
	w.asked[other] = issueQuery{at: t0, queried: t0, repo: repo, interval: interval}
	w.asked[elsewhere] = issueQuery{at: t0, queried: t0, repo: scm.Repo{Owner: "acme", Name: "gadgets"}, interval: interval}

	for i := range 100 {
		w.hint(scm.Hint{Repo: scm.Repo{Owner: "ACME", Name: "Widgets"}, Namespace: "team-a", ClosedIssues: []int{i + 1}, Webhook: true}, t0.Add(time.Second))
	}
	due := w.asked[mine].at.Add(interval)
	g.Expect(due).To(Equal(t0.Add(issueHintGap)), "due once, issueHintGap after the last query")
	g.Expect(w.asked[other].at).To(Equal(t0), "another namespace's Project is not moved by this namespace's delivery")
	g.Expect(w.asked[elsewhere].at).To(Equal(t0), "nor a Project of another repository")
	g.Expect(woken).To(HaveKey(mine))
	g.Expect(woken).NotTo(HaveKey(other))

	// Long after the last query, a delivery makes the query due at once.
	w.asked[mine] = issueQuery{at: t0, queried: t0, repo: repo, interval: interval}
	now := t0.Add(5 * time.Minute)
	w.hint(scm.Hint{Repo: repo, Namespace: "team-a", ClosedIssues: []int{3}}, now)
	g.Expect(w.asked[mine].at.Add(interval)).To(Equal(now))

	// A hint without closed issues changes nothing.
	before := w.asked[mine]
	w.hint(scm.Hint{Repo: repo, Namespace: "team-a", Numbers: []int{4}}, now.Add(time.Minute))
	g.Expect(w.asked[mine]).To(Equal(before))
}
