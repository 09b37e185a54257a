package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

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
		Transport: d.Outbound,
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

// connectTracker returns the Project's tracker, or nil when it has none. The tracker is kept per
// Project and made again when its configuration (credentials included) changes.
func (d *Deps) connectTracker(ctx context.Context, p *agentsv1alpha1.Project, f *forge) (tracker.Tracker, error) {
	t := p.Spec.Tracker
	if t == nil {
		return nil, nil
	}
	cfg := tracker.Config{Provider: string(t.Provider), Metrics: d.SCMMetrics, Transport: d.Outbound}
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
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	digest := trackerDigest(cfg)
	d.trackerMu.Lock()
	defer d.trackerMu.Unlock()
	if c, ok := d.trackers[key]; ok && c.digest == digest {
		return c.tracker, nil
	}
	tr, err := tracker.New(cfg)
	if err != nil {
		return nil, Stalling(agentsv1alpha1.ReasonInvalidSpec, "spec.tracker: %v", err)
	}
	if d.trackers == nil {
		d.trackers = map[types.NamespacedName]cachedTracker{}
	}
	d.trackers[key] = cachedTracker{digest: digest, tracker: tr}
	return tr, nil
}

// forgetTracker drops a deleted Project's tracker.
func (d *Deps) forgetTracker(key types.NamespacedName) {
	d.trackerMu.Lock()
	delete(d.trackers, key)
	d.trackerMu.Unlock()
}

// trackerDigest identifies a tracker configuration without keeping its secrets.
func trackerDigest(cfg tracker.Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", cfg.Provider, cfg.APIURL, cfg.Repo, cfg.TeamKey)
	h.Write(cfg.Token)
	if cfg.App != nil {
		fmt.Fprintf(h, "\x00app:%d:%d\x00", cfg.App.AppID, cfg.App.InstallationID)
		h.Write(cfg.App.PrivateKey)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// forgeError maps a forge error to a reconcile error with a reason a user can act on.
func forgeError(err error, what string) error {
	var rl *scm.RateLimitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rl):
		return &WaitingError{Reason: agentsv1alpha1.ReasonRateLimited, RequeueAfter: max(timeUntil(rl.Reset), minRequeue), Err: fmt.Errorf("%s: %w", what, err)}
	case errors.Is(err, scm.ErrRateLimited):
		return &WaitingError{Reason: agentsv1alpha1.ReasonRateLimited, RequeueAfter: forgeRetry, Err: fmt.Errorf("%s: %w", what, err)}
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
