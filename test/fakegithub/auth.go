package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// identity is who a token authenticates, and the budget it spends.
type identity struct {
	// budget is the rate-limit key: "user:<login>" or "installation:<id>".
	budget string
	login  string
	// repos limits an installation token to some repositories ("owner/name"); nil means all.
	repos       map[string]bool
	permissions map[string]string
	expiresAt   time.Time
}

func (id *identity) canSee(full string) bool { return id.repos == nil || id.repos[full] }

type app struct {
	id  int64
	key *rsa.PublicKey
}

type installation struct {
	id      int64
	appID   int64
	account string
	// repos the installation can reach ("owner/name"); nil means all.
	repos map[string]bool
}

// AddToken makes token a personal access token of login, with its own budget.
func (s *Server) AddToken(token, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = &identity{budget: "user:" + login, login: login}
}

// NewAppKey generates an RSA key for a test App and returns its PEM encoding (PKCS#1, as GitHub
// hands them out).
func NewAppKey() ([]byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
}

// AddApp registers a GitHub App by the PEM private key it signs its JWTs with, and an
// installation of it on account reaching repos (all of the account's when empty).
func (s *Server) AddApp(appID, installationID int64, account string, privateKeyPEM []byte, repos ...string) error {
	key, err := jwt.ParseRSAPrivateKeyFromPEM(privateKeyPEM)
	if err != nil {
		return fmt.Errorf("app key: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps[appID] = &app{id: appID, key: &key.PublicKey}
	inst := &installation{id: installationID, appID: appID, account: account}
	if len(repos) > 0 {
		inst.repos = map[string]bool{}
		for _, r := range repos {
			inst.repos[r] = true
		}
	}
	s.installations[installationID] = inst
	return nil
}

// authenticate resolves the request's token; nil when missing, unknown or expired.
func (s *Server) authenticate(r *http.Request) *identity {
	h := r.Header.Get("Authorization")
	tok := ""
	switch {
	case strings.HasPrefix(h, "Bearer "):
		tok = strings.TrimPrefix(h, "Bearer ")
	case strings.HasPrefix(h, "token "):
		tok = strings.TrimPrefix(h, "token ")
	case strings.HasPrefix(h, "Basic "):
		if _, p, ok := r.BasicAuth(); ok {
			tok = p
		}
	}
	id := s.tokens[strings.TrimSpace(tok)]
	if id == nil || (!id.expiresAt.IsZero() && !s.now().Before(id.expiresAt)) {
		return nil
	}
	return id
}

// createInstallationToken serves POST /app/installations/{id}/access_tokens: the App proves
// itself with an RS256 JWT (iss = app id, at most 10 minutes long).
func (s *Server) createInstallationToken(w http.ResponseWriter, r *http.Request, instID int64) {
	raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	inst := s.installations[instID]
	var claims jwt.RegisteredClaims
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithoutClaimsValidation())
	_, err := parser.ParseWithClaims(raw, &claims, func(t *jwt.Token) (any, error) {
		id, err := strconv.ParseInt(claims.Issuer, 10, 64)
		if err != nil || s.apps[id] == nil {
			return nil, fmt.Errorf("unknown app %q", claims.Issuer)
		}
		return s.apps[id].key, nil
	})
	now := s.now()
	if err != nil || claims.ExpiresAt == nil || claims.IssuedAt == nil ||
		!now.Before(claims.ExpiresAt.Time) || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 11*time.Minute {
		s.stats.Unauthorized++
		writeJSON(w, http.StatusUnauthorized, apiError("A JSON web token could not be decoded", "https://docs.github.com/rest"))
		return
	}
	if inst == nil || strconv.FormatInt(inst.appID, 10) != claims.Issuer {
		writeJSON(w, http.StatusNotFound, apiError("Not Found", "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"))
		return
	}
	var req struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&req)
	}
	id := &identity{budget: fmt.Sprintf("installation:%d", inst.id), login: inst.account + "[bot]", expiresAt: now.Add(time.Hour)}
	var repoObjs []any
	if len(req.Repositories) > 0 {
		id.repos = map[string]bool{}
		for _, name := range req.Repositories {
			full := inst.account + "/" + name
			if s.repo(full) == nil || (inst.repos != nil && !inst.repos[full]) {
				writeJSON(w, http.StatusUnprocessableEntity, apiError("There is at least one repository that does not exist or is not accessible to the parent installation.", "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"))
				return
			}
			id.repos[full] = true
			repoObjs = append(repoObjs, s.repoJSON(s.repo(full), nil))
		}
	} else if inst.repos != nil {
		id.repos = inst.repos
	}
	perms := req.Permissions
	if len(perms) == 0 {
		perms = map[string]string{"contents": "write", "pull_requests": "write", "checks": "read", "issues": "write", "metadata": "read"}
	}
	id.permissions = perms
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	s.tokens[tok] = id
	s.stats.InstallationTokens++
	selection := "all"
	if id.repos != nil {
		selection = "selected"
	}
	resp := map[string]any{
		"token":                tok,
		"expires_at":           id.expiresAt.Format(time.RFC3339),
		"permissions":          perms,
		"repository_selection": selection,
	}
	if repoObjs != nil {
		resp["repositories"] = repoObjs
	}
	writeJSON(w, http.StatusCreated, resp)
}

// TokenInfo describes an issued token, for tests of scoping.
type TokenInfo struct {
	Login       string
	Repos       []string
	Permissions map[string]string
	ExpiresAt   time.Time
}

// Token returns what the fake knows about a token.
func (s *Server) Token(tok string) (TokenInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.tokens[tok]
	if id == nil {
		return TokenInfo{}, false
	}
	info := TokenInfo{Login: id.login, Permissions: id.permissions, ExpiresAt: id.expiresAt}
	for r := range id.repos {
		info.Repos = append(info.Repos, r)
	}
	return info, true
}

func apiError(msg, doc string) map[string]any {
	return map[string]any{"message": msg, "documentation_url": doc, "status": ""}
}
