# A real Gitea for the adapter tests and the Gitea e2e (docs/gitea.md). Included by the Makefile.

##@ Gitea

.PHONY: gitea
gitea: ## Build the pinned Gitea into the shared cache (once, ~3.5 min cold); print its directory.
	@hack/gitea.sh build

# The Gitea e2e spec and the Gitea integration tests start a real Gitea. Build it before
# `go test`, so that a cold build (minutes) runs outside the tests' own timeouts; a warm cache
# makes this a no-op.
test-e2e: gitea
