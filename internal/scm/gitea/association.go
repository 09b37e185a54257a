package gitea

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// associationTTL is how long an author's association is kept: a collaborator removed from the
// repository is heard for at most this long.
const associationTTL = 10 * time.Minute

// maxAssociations bounds the cache (entries are a login and a repository).
const maxAssociations = 4096

type associationKey struct {
	repo  scm.Repo
	login string
}

type associationEntry struct {
	a  scm.Association
	at time.Time
}

// Association is login's relation to repo, in GitHub's terms, since Gitea's comments and reviews
// carry none:
//
//   - Owner: the repository's owner, or an account with owner permission on it;
//   - Collaborator: an account with write or admin permission (a collaborator, or a member of a
//     team with access; Gitea does not tell the two apart), or one added as a collaborator;
//   - Member: a member of the organization that owns the repository, when Gitea does not let the
//     token read others' permissions (only a repository admin may) and the account is not a
//     collaborator;
//   - None: everyone else (on a public repository everyone can read), and a deleted account
//     ("Ghost").
//
// Answers are cached for associationTTL; an error is not, and callers treat it as None.
func (c *Client) Association(ctx context.Context, repo scm.Repo, login string) (scm.Association, error) {
	if login == "" || strings.EqualFold(login, "Ghost") {
		return scm.AssociationNone, nil
	}
	if strings.EqualFold(login, repo.Owner) {
		return scm.AssociationOwner, nil
	}
	key := associationKey{repo: repo, login: strings.ToLower(login)}
	now := c.cfg.Clock.Now()
	if e, ok := c.associations.Get(key); ok && now.Sub(e.at) < associationTTL {
		return e.a, nil
	}
	a, err := c.lookupAssociation(ctx, repo, login)
	if err != nil {
		return scm.AssociationNone, err
	}
	c.associations.Add(key, associationEntry{a: a, at: now})
	return a, nil
}

func (c *Client) lookupAssociation(ctx context.Context, repo scm.Repo, login string) (scm.Association, error) {
	collaborator := repoPath(repo) + "/collaborators/" + url.PathEscape(login)
	var perm struct {
		Permission string `json:"permission"`
	}
	err := c.Get(Op(ctx, "repos.collaborator_permission"), collaborator+"/permission", nil, &perm, scm.ErrNotFound)
	switch {
	case err == nil:
		switch perm.Permission {
		case "owner":
			return scm.AssociationOwner, nil
		case "admin", "write":
			return scm.AssociationCollaborator, nil
		case "read":
			// Everyone may read a public repository: read is a collaborator's only when they
			// were added as one (GitHub, too, calls a read-only collaborator COLLABORATOR).
			return c.explicitCollaborator(ctx, collaborator)
		}
		return scm.AssociationNone, nil
	case isNotFound(err), noSuchUser(err):
		return scm.AssociationNone, nil
	case !errors.Is(err, scm.ErrPermissionDenied):
		return scm.AssociationNone, err
	}
	// Only a repository admin may read another account's permission: ask whether the account
	// is a collaborator, then whether it belongs to the owning organization.
	a, err := c.explicitCollaborator(ctx, collaborator)
	if err != nil || a != scm.AssociationNone {
		return a, err
	}
	err = c.Get(Op(ctx, "orgs.check_member"), "/orgs/"+url.PathEscape(repo.Owner)+"/members/"+url.PathEscape(login), nil, nil, scm.ErrNotFound)
	switch {
	case err == nil:
		return scm.AssociationMember, nil
	case isNotFound(err), errors.Is(err, scm.ErrPermissionDenied):
		return scm.AssociationNone, nil // not a member, or the owner is a user rather than an organization
	}
	return scm.AssociationNone, err
}

// explicitCollaborator asks whether the account at path (…/collaborators/{login}) was added to
// the repository as a collaborator.
func (c *Client) explicitCollaborator(ctx context.Context, path string) (scm.Association, error) {
	err := c.Get(Op(ctx, "repos.check_collaborator"), path, nil, nil, scm.ErrNotFound)
	switch {
	case err == nil:
		return scm.AssociationCollaborator, nil
	case isNotFound(err), noSuchUser(err):
		return scm.AssociationNone, nil
	}
	return scm.AssociationNone, err
}

// noSuchUser reports Gitea's answer about an account that does not exist: 404 to an admin, 422
// "user does not exist" to others.
func noSuchUser(err error) bool {
	var ae *scm.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity
}

// annotate sets the association of every review's, thread's and comment's author, one lookup per author.
// A lookup that fails leaves None: an author whose standing is unknown is not heard.
func (c *Client) annotate(ctx context.Context, repo scm.Repo, pr *scm.PullRequest) {
	seen := map[string]scm.Association{}
	of := func(login string) scm.Association {
		if a, ok := seen[login]; ok {
			return a
		}
		a, _ := c.Association(ctx, repo, login)
		seen[login] = a
		return a
	}
	for i := range pr.Reviews {
		pr.Reviews[i].Association = of(pr.Reviews[i].Author)
	}
	for i := range pr.Threads {
		pr.Threads[i].Association = of(pr.Threads[i].Author)
	}
	for i := range pr.Comments {
		pr.Comments[i].Association = of(pr.Comments[i].Author)
	}
}
