//go:build integration

package scenario

import "testing"

// TestForgeContractGitea checks the Forge contract (forge_test.go) on a real Gitea, built into
// the shared cache by `make gitea` (which `make test-integration` runs first).
func TestForgeContractGitea(t *testing.T) { forgeContract(t, "gitea") }
