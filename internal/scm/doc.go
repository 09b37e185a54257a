// Package scm holds the provider-neutral view of a forge (GitHub, Gitea): pull requests, checks,
// reviews and typed errors, the small interfaces the controllers consume, a registry of providers
// by name, and the Poller that keeps many pull requests fresh on one installation's rate-limit
// budget.
//
// Adapters live in subpackages (internal/scm/github, internal/scm/gitea) and register themselves
// with Register in an init function; the manager imports them for their side effect. Nothing here
// knows about Kubernetes objects: callers pass values (tokens, keys, URLs), never Secrets.
//
// docs/scm.md describes the design, the request economy and the fake GitHub; docs/gitea.md the
// Gitea adapter.
package scm
