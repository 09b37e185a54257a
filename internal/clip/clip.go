// Package clip bounds text from outside (a forge, an agent, a model API, a user's spec) before
// it goes into a status field, a condition, a log line or an answer: at most n bytes, never a
// split UTF-8 sequence (a field cut mid-rune would not be valid UTF-8, and the API server's
// JSON would grow it past its maxLength). One place for what seven helpers did three ways.
package clip

import "unicode/utf8"

// To returns s cut to at most n bytes on a UTF-8 boundary.
func To(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Marked returns s cut to at most n bytes on a UTF-8 boundary with mark at the end when it was
// cut, the mark included in the n bytes (a mark longer than n is cut itself).
func Marked(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	if len(mark) >= n {
		return To(mark, n)
	}
	return To(s, n-len(mark)) + mark
}
