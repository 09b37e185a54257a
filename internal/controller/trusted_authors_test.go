package controller

import (
	"testing"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

func TestTrustedAuthors(t *testing.T) {
	withSpec := func(s *agentsv1alpha1.TrustedAuthorsSpec) *agentsv1alpha1.Project {
		return &agentsv1alpha1.Project{Spec: agentsv1alpha1.ProjectSpec{TrustedAuthors: s}}
	}
	cases := []struct {
		name    string
		project *agentsv1alpha1.Project
		login   string
		assoc   scm.Association
		want    bool
	}{
		{"default hears an owner", nil, "acme", scm.AssociationOwner, true},
		{"default hears a member", withSpec(nil), "ann", scm.AssociationMember, true},
		{"default hears a collaborator", nil, "bob", scm.AssociationCollaborator, true},
		{"default does not hear a contributor", nil, "cat", scm.AssociationContributor, false},
		{"default does not hear a first-timer", nil, "dan", scm.AssociationFirstTimer, false},
		{"default does not hear a stranger", nil, "eve", scm.AssociationNone, false},
		{"an unknown association is a stranger", nil, "eve", "", false},
		{"a listed login is heard whatever its association", withSpec(&agentsv1alpha1.TrustedAuthorsSpec{
			Associations: agentsv1alpha1.DefaultTrustedAssociations, Logins: []string{"Renovate[bot]"}}), "renovate[BOT]", scm.AssociationNone, true},
		{"an empty list hears only the logins", withSpec(&agentsv1alpha1.TrustedAuthorsSpec{Associations: []agentsv1alpha1.AuthorAssociation{},
			Logins: []string{"lead"}}), "acme", scm.AssociationOwner, false},
		{"contributors on purpose", withSpec(&agentsv1alpha1.TrustedAuthorsSpec{Associations: []agentsv1alpha1.AuthorAssociation{
			agentsv1alpha1.AssociationContributor}}), "cat", scm.AssociationContributor, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(trustedAuthors(c.project).hears(c.login, c.assoc)).To(Equal(c.want))
		})
	}
}

func TestTrustedAuthorsFilter(t *testing.T) {
	g := NewWithT(t)
	pol := trustedAuthors(nil)
	kept, left := pol.issueComments([]tracker.Comment{
		{Author: "ann", Association: scm.AssociationMember, Body: "a"},
		{Author: "eve", Association: scm.AssociationNone, Body: "b"},
		{Author: "bob", Association: scm.AssociationCollaborator, Body: "c"},
	})
	g.Expect(left).To(Equal(1))
	g.Expect(kept).To(HaveLen(2))
	g.Expect(kept[1].Author).To(Equal("bob"))

	pr := &scm.PullRequest{Number: 1,
		Reviews: []scm.Review{{ID: "r1", Author: "eve", State: scm.ReviewStateChangesRequested}, {ID: "r2", Author: "ann", Association: scm.AssociationMember}},
		Threads: []scm.ReviewThread{{ID: "t1", Author: "eve"}, {ID: "t2", Author: "bob", Association: scm.AssociationCollaborator}}}
	got := pol.pullRequest(pr)
	g.Expect(got.Reviews).To(HaveLen(1))
	g.Expect(got.Reviews[0].ID).To(Equal("r2"))
	g.Expect(got.Threads).To(HaveLen(1))
	g.Expect(got.Threads[0].ID).To(Equal("t2"))
	g.Expect(pr.Reviews).To(HaveLen(2), "the poller's shared observation is left as it was")
	g.Expect(pol.pullRequest(nil)).To(BeNil())
}
