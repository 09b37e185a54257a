package scm

import (
	"fmt"
	"net/url"
	"strings"
)

// ParseRepoURL extracts owner/name from a clone URL: https://host/owner/name(.git),
// ssh://git@host/owner/name(.git) or git@host:owner/name(.git). For GitHub Enterprise and Gitea
// served under a path prefix, the last two path segments are the repository.
func ParseRepoURL(raw string) (Repo, error) {
	path := ""
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return Repo{}, fmt.Errorf("repository URL %q: %w", raw, err)
		}
		path = u.Path
	} else if at, rest, ok := strings.Cut(raw, ":"); ok && strings.Contains(at, "@") {
		path = rest
	} else {
		return Repo{}, fmt.Errorf("repository URL %q: want https://host/owner/repo or user@host:owner/repo", raw)
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	parts := strings.Split(path, "/")
	if len(parts) < 2 || parts[len(parts)-1] == "" || parts[len(parts)-2] == "" {
		return Repo{}, fmt.Errorf("repository URL %q: no owner/repo in its path", raw)
	}
	return Repo{Owner: parts[len(parts)-2], Name: parts[len(parts)-1]}, nil
}
