// Package gitref validates git reference and branch names with the rules of
// `git check-ref-format --branch`. The CRDs enforce the same rules in CEL (api/v1alpha1
// BranchName); testdata/branches.txt is the one table both are tested against, and a test runs
// the real git on it too.
package gitref

import (
	"errors"
	"strings"
)

// Errors name the rule broken; their text matches the CRD's CEL messages.
var (
	ErrEmpty         = errors.New("branch name must not be empty")
	ErrTooLong       = errors.New("branch name must be at most 255 bytes")
	ErrLeadingDash   = errors.New("branch name must not start with '-'")
	ErrDoubleDot     = errors.New("branch name must not contain '..'")
	ErrControl       = errors.New("branch name must not contain spaces or control characters")
	ErrSpecial       = errors.New(`branch name must not contain any of ~ ^ : ? * [ \`)
	ErrAtBrace       = errors.New("branch name must not contain '@{'")
	ErrReserved      = errors.New("branch name must not be '@' or 'HEAD'")
	ErrDotComponent  = errors.New("no '/'-separated part of a branch name may start with '.'")
	ErrLockComponent = errors.New("no '/'-separated part of a branch name may end with '.lock'")
	ErrSlash         = errors.New("branch name must not start or end with '/' or contain '//'")
	ErrTrailingDot   = errors.New("branch name must not end with '.'")
)

// MaxLen bounds a branch name (the CRD's maxLength).
const MaxLen = 255

// ValidateBranch returns nil when name is a valid branch name, or the first rule it breaks, in
// the order the CRD lists them.
func ValidateBranch(name string) error {
	switch {
	case name == "":
		return ErrEmpty
	case len(name) > MaxLen:
		return ErrTooLong
	case strings.HasPrefix(name, "-"):
		return ErrLeadingDash
	case strings.Contains(name, ".."):
		return ErrDoubleDot
	}
	for _, r := range name {
		if r <= 0x20 || r == 0x7f {
			return ErrControl
		}
	}
	if strings.ContainsAny(name, `~^:?*[\`) {
		return ErrSpecial
	}
	switch {
	case strings.Contains(name, "@{"):
		return ErrAtBrace
	case name == "@" || name == "HEAD":
		return ErrReserved
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return ErrDotComponent
		}
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasSuffix(part, ".lock") {
			return ErrLockComponent
		}
	}
	switch {
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return ErrSlash
	case strings.HasSuffix(name, "."):
		return ErrTrailingDot
	}
	return nil
}

// Sanitize turns arbitrary text (an issue title, say) into a string that is safe inside a
// branch name component: lowercase ASCII letters, digits and single dashes, at most max bytes.
// It may return "" when nothing usable remains.
func Sanitize(s string, maxLen int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		default:
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
		}
		if b.Len() >= maxLen {
			break
		}
	}
	out := b.String()
	if len(out) > maxLen {
		out = out[:maxLen]
	}
	return strings.Trim(out, "-")
}
