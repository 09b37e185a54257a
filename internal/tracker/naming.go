package tracker

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// SessionName derives the name of the session for an issue of a Project: <project>-<issue key>
// ("widgets-42", "widgets-eng-123"), a DNS label of at most 63 characters. issue is the issue's
// key or ID ("42", "#42", "ENG-123"). When the name is too long, the Project's part is shortened
// and an 8-character hash of the whole Project name keeps names of different Projects apart.
// Pure and deterministic: the backlog, `kubectl shepherd spawn --issue` and `batch` all use it,
// so the name is the guard against two sessions for one issue.
func SessionName(project, issue string) string {
	key := IssueKey(issue)
	name := project + "-" + key
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(project))
	hash := fmt.Sprintf("%08x", h.Sum32())
	room := 63 - len(key) - len(hash) - 2
	prefix := strings.TrimRight(project[:min(room, len(project))], "-")
	return prefix + "-" + hash + "-" + key
}

// IssueKey is an issue's key or ID as a DNS-label fragment: lower case letters, digits and '-'.
func IssueKey(issue string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(issue) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	key := strings.Trim(b.String(), "-")
	if len(key) > 40 {
		// Tracker keys are far shorter (the API bounds spec.issue); never make an invalid name.
		key = strings.Trim(key[:40], "-")
	}
	return key
}
