package controller

import (
	"context"
	"errors"
	"fmt"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/scm"
	"github.com/shepherd-dev/shepherd/internal/tracker"
)

// forge is a Project's forge: its repository, a connection to the forge, and the config it was
// made from.
type forge struct {
	Repo   scm.Repo
	Conn   *scm.Connection
	Config scm.Config
}

// connectForge reads the Project's credentials and connects to its forge. Errors say what to fix
// (a missing Secret or key, an unparseable URL) as *StallingError.
func (d *Deps) connectForge(ctx context.Context, p *agentsv1alpha1.Project) (*forge, error) {
	repo, err := scm.ParseRepoURL(string(p.Spec.Repository.URL))
	if err != nil {
		return nil, Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.repository.url: %v", err)
	}
	cfg := scm.Config{
		Provider:  string(p.Spec.SCM.Provider),
		APIURL:    string(p.Spec.SCM.APIURL),
		UserAgent: "shepherd",
	}
	if err := d.readCredentials(ctx, p, &cfg.Token, &cfg.App); err != nil {
		return nil, err
	}
	conn, err := d.Hub.Connect(cfg)
	if err != nil {
		return nil, Stalling(agentsv1alpha1.ReasonInvalidSpec, "connect to the %s forge: %v", cfg.Provider, err)
	}
	return &forge{Repo: repo, Conn: conn, Config: cfg}, nil
}

// readCredentials fills a token or GitHub App from the Project's credentials.
func (d *Deps) readCredentials(ctx context.Context, p *agentsv1alpha1.Project, token *[]byte, app **scm.AppCredentials) error {
	c := p.Spec.Repository.Credentials
	switch {
	case c == nil:
		return nil
	case c.SecretRef != nil:
		v, err := d.Secrets.Key(ctx, p.Namespace, *c.SecretRef, "spec.repository.credentials.secretRef")
		if err != nil {
			return err
		}
		*token = v
	case c.GitHubApp != nil:
		key, err := d.Secrets.Key(ctx, p.Namespace, c.GitHubApp.PrivateKeySecretRef, "spec.repository.credentials.githubApp.privateKeySecretRef")
		if err != nil {
			return err
		}
		*app = &scm.AppCredentials{AppID: c.GitHubApp.AppID, InstallationID: c.GitHubApp.InstallationID, PrivateKey: key}
	}
	return nil
}

// connectTracker builds the Project's tracker, or returns nil when it has none.
func (d *Deps) connectTracker(ctx context.Context, p *agentsv1alpha1.Project, f *forge) (tracker.Tracker, error) {
	t := p.Spec.Tracker
	if t == nil {
		return nil, nil
	}
	cfg := tracker.Config{Provider: string(t.Provider)}
	switch t.Provider {
	case agentsv1alpha1.TrackerLinear:
		key, err := d.Secrets.Key(ctx, p.Namespace, t.Linear.APIKeySecretRef, "spec.tracker.linear.apiKeySecretRef")
		if err != nil {
			return nil, err
		}
		cfg.Token, cfg.TeamKey, cfg.APIURL = key, t.Linear.TeamKey, string(t.Linear.APIURL)
	default:
		// GitHub and Gitea issues live in the repository and use the forge's credentials.
		cfg.Repo, cfg.APIURL, cfg.Token, cfg.App = f.Repo, f.Config.APIURL, f.Config.Token, f.Config.App
	}
	tr, err := tracker.New(cfg)
	if err != nil {
		return nil, Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.tracker: %v", err)
	}
	return tr, nil
}

// forgeError maps a forge error to a reconcile error with a reason a user can act on.
func forgeError(err error, what string) error {
	var rl *scm.RateLimitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rl):
		return &WaitingError{Reason: agentsv1alpha1.ReasonRateLimited, RequeueAfter: max(timeUntil(rl.Reset), minRequeue), Err: fmt.Errorf("%s: %w", what, err)}
	case errors.Is(err, scm.ErrTokenRejected):
		return Stalling(agentsv1alpha1.ReasonTokenRejected, "%s: the forge rejected the credentials (%v): update the token in the referenced Secret", what, err)
	case errors.Is(err, scm.ErrRepositoryNotFound):
		return Stalling(agentsv1alpha1.ReasonRepositoryNotFound, "%s: repository not found, or the credentials cannot see it (%v): check spec.repository.url and the token's access", what, err)
	case errors.Is(err, scm.ErrPermissionDenied):
		return Stalling(agentsv1alpha1.ReasonTokenRejected, "%s: the credentials lack a permission (%v): grant contents and pull requests access", what, err)
	case errors.Is(err, scm.ErrUnavailable):
		return &WaitingError{Reason: agentsv1alpha1.ReasonForgeUnavailable, RequeueAfter: forgeRetry, Err: fmt.Errorf("%s: %w", what, err)}
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}
