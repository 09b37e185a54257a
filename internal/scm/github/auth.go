package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh "github.com/google/go-github/v88/github"

	"github.com/shepherd-dev/shepherd/internal/scm"
)

// authenticator yields the Authorization header value for API requests.
type authenticator interface {
	authorization(ctx context.Context) (string, error)
}

type tokenAuth struct{ token string }

func (t tokenAuth) authorization(context.Context) (string, error) { return "Bearer " + t.token, nil }

// appAuth authenticates as an App installation. ghinstallation signs the App JWT and caches the
// installation token until a minute before it expires.
type appAuth struct {
	itr *ghinstallation.Transport
	app scm.AppCredentials
	// mint is the transport used to mint tokens (counted in metrics, not governed: minting is
	// charged to the App, not to the installation's budget).
	mint    http.RoundTripper
	restURL string
}

func (a *appAuth) authorization(ctx context.Context) (string, error) {
	tok, err := a.itr.Token(ctx)
	if err != nil {
		return "", mapTokenError(err)
	}
	return "token " + tok, nil
}

// mapTokenError classifies a failure to mint an installation token.
func mapTokenError(err error) error {
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		switch he.Response.StatusCode {
		case http.StatusUnauthorized:
			return &scm.APIError{Kind: scm.ErrTokenRejected, Status: 401, Message: "GitHub App JWT rejected (app id or private key wrong)", Err: err}
		case http.StatusNotFound:
			return &scm.APIError{Kind: scm.ErrTokenRejected, Status: 404, Message: "GitHub App installation not found", Err: err}
		case http.StatusForbidden, http.StatusUnprocessableEntity:
			return &scm.APIError{Kind: scm.ErrPermissionDenied, Status: he.Response.StatusCode, Message: "installation token refused", Err: err}
		}
		if he.Response.StatusCode >= 500 {
			return &scm.APIError{Kind: scm.ErrUnavailable, Status: he.Response.StatusCode, Err: err}
		}
	}
	var ae *scm.APIError
	if errors.As(err, &ae) {
		return err
	}
	if strings.Contains(err.Error(), "private key") || strings.Contains(err.Error(), "PEM") {
		return &scm.APIError{Kind: scm.ErrTokenRejected, Message: "GitHub App private key unusable", Err: err}
	}
	return &scm.APIError{Kind: scm.ErrUnavailable, Message: "mint installation token", Err: err}
}

// countingTransport counts token-minting requests in metrics.
type countingTransport struct {
	next    http.RoundTripper
	metrics *scm.Metrics
	timeout time.Duration
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), c.timeout)
	resp, err := c.next.RoundTrip(req.WithContext(ctx))
	outcome := scm.OutcomeNetworkError
	if err == nil {
		outcome = scm.OutcomeOf(resp.StatusCode)
		// The body is read by ghinstallation after we return; cancel when it is closed.
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	} else {
		cancel()
	}
	if c.metrics != nil {
		c.metrics.Requests.WithLabelValues(providerName, scm.KindREST, "apps.create_installation_token", outcome).Inc()
	}
	return resp, err
}

type cancelOnClose struct {
	ReadCloser interface {
		Read([]byte) (int, error)
		Close() error
	}
	cancel context.CancelFunc
}

func (c *cancelOnClose) Read(p []byte) (int, error) { return c.ReadCloser.Read(p) }
func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func newAuthenticator(cfg scm.Config, base http.RoundTripper, restURL string) (authenticator, string, error) {
	switch {
	case cfg.App != nil && len(cfg.Token) > 0:
		return nil, "", errors.New("credentials: set either a token or a GitHub App, not both")
	case cfg.App != nil:
		mint := countingTransport{next: base, metrics: cfg.Metrics, timeout: cfg.Timeout}
		itr, err := ghinstallation.New(mint, cfg.App.AppID, cfg.App.InstallationID, cfg.App.PrivateKey)
		if err != nil {
			return nil, "", &scm.APIError{Kind: scm.ErrTokenRejected, Message: "GitHub App private key unusable", Err: err}
		}
		itr.BaseURL = strings.TrimSuffix(restURL, "/")
		return &appAuth{itr: itr, app: *cfg.App, mint: mint, restURL: restURL},
			fmt.Sprintf("installation-%d", cfg.App.InstallationID), nil
	case len(cfg.Token) > 0:
		tok := strings.TrimSpace(string(cfg.Token))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return nil, "", &scm.APIError{Kind: scm.ErrTokenRejected, Message: "token is empty or spans lines"}
		}
		return tokenAuth{token: tok}, "token", nil
	}
	return nil, "", errors.New("credentials: a token or a GitHub App is required")
}

// authTransport adds the Authorization header to requests for the API host only, so that log
// downloads redirected to storage hosts never carry the token.
type authTransport struct {
	next    http.RoundTripper
	auth    authenticator
	apiHost string
}

func (a *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != a.apiHost {
		return a.next.RoundTrip(req)
	}
	h, err := a.auth.authorization(req.Context())
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", h)
	return a.next.RoundTrip(r)
}

// repoToken is a cached repository-scoped installation token source.
type repoToken struct {
	itr *ghinstallation.Transport
}

// PushCredential returns a git credential for repo. With a GitHub App it is an installation
// token limited to that one repository with contents write access (all git needs), valid for
// at most an hour and reused until a minute before it expires. With a token it is the token
// itself: a personal access token is not short-lived; use an App where that matters.
func (p *Provider) PushCredential(ctx context.Context, repo scm.Repo) (scm.Credential, error) {
	switch a := p.auth.(type) {
	case tokenAuth:
		return scm.Credential{Username: "x-access-token", Password: a.token}, nil
	case *appAuth:
		p.credMu.Lock()
		rt := p.creds[repo]
		if rt == nil {
			itr, err := ghinstallation.New(a.mint, a.app.AppID, a.app.InstallationID, a.app.PrivateKey)
			if err != nil {
				p.credMu.Unlock()
				return scm.Credential{}, &scm.APIError{Kind: scm.ErrTokenRejected, Message: "GitHub App private key unusable", Err: err}
			}
			itr.BaseURL = strings.TrimSuffix(a.restURL, "/")
			itr.InstallationTokenOptions = &gh.InstallationTokenOptions{
				Repositories: []string{repo.Name},
				// The manager opens pull requests with its own installation token; git needs
				// contents only.
				Permissions: &gh.InstallationPermissions{Contents: gh.Ptr("write")},
			}
			rt = &repoToken{itr: itr}
			p.creds[repo] = rt
		}
		p.credMu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		defer cancel()
		tok, err := rt.itr.Token(ctx)
		if err != nil {
			return scm.Credential{}, fmt.Errorf("push credential for %s: %w", repo, mapTokenError(err))
		}
		exp, _, err := rt.itr.Expiry()
		if err != nil {
			return scm.Credential{}, fmt.Errorf("push credential for %s: %w", repo, err)
		}
		return scm.Credential{Username: "x-access-token", Password: tok, ExpiresAt: exp}, nil
	}
	return scm.Credential{}, fmt.Errorf("push credential: %w", scm.ErrUnsupported)
}
