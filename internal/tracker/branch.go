package tracker

import (
	"fmt"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/gitref"
)

// maxSlug bounds the title part of a branch name: long enough to read, short enough for
// terminals and forge UIs.
const maxSlug = 48

// DefaultBranchPrefix is used when the Project sets none.
const DefaultBranchPrefix = "shepherd/"

// BranchName derives the branch of an issue: <prefix><key>-<slug of the title>, for example
// "shepherd/eng-123-fix-the-login-form". The key makes it collision-safe (two issues with the
// same title differ by key), the slug makes it readable; the result is always a valid branch
// name. It is deterministic, but follows the title: the controller records the branch it chose
// in the session's status and keeps it when the title changes.
func BranchName(prefix string, issue *Issue) (string, error) {
	if prefix == "" {
		prefix = DefaultBranchPrefix
	}
	key := gitref.Sanitize(issue.Key, 32)
	if key == "" {
		key = gitref.Sanitize(issue.ID, 32)
	}
	if key == "" {
		return "", fmt.Errorf("branch for issue %q: %w: no usable key", issue.ID, ErrInvalidID)
	}
	room := gitref.MaxLen - len(prefix) - len(key) - 1
	name := prefix + key
	if room > 0 {
		if slug := gitref.Sanitize(issue.Title, min(maxSlug, room)); slug != "" {
			name += "-" + slug
		}
	}
	name = strings.TrimSuffix(name, "-")
	if err := gitref.ValidateBranch(name); err != nil {
		return "", fmt.Errorf("branch for issue %q with prefix %q: %w", issue.ID, prefix, err)
	}
	return name, nil
}
