package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTo(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"héllo", 2, "h"},      // é is two bytes: not split
		{"héllo", 3, "hé"},     //
		{"日本語", 4, "日"},        // three bytes a rune
		{"日本語", 2, ""},         //
		{"a\xffb", 2, "a\xff"}, // invalid input is cut by bytes, never grown
	} {
		if got := To(tc.s, tc.n); got != tc.want {
			t.Errorf("To(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestMarked(t *testing.T) {
	for _, tc := range []struct {
		s, mark string
		n       int
		want    string
	}{
		{"short", "…", 10, "short"},
		{"abcdefghij", "…", 6, "abc…"}, // … is three bytes
		{"日本語日本語", " […]", 10, "日 […]"},
		{"abcdef", "[cut]", 3, "[cu"},
	} {
		got := Marked(tc.s, tc.n, tc.mark)
		if got != tc.want || len(got) > tc.n {
			t.Errorf("Marked(%q, %d, %q) = %q, want %q (at most %d bytes)", tc.s, tc.n, tc.mark, got, tc.want, tc.n)
		}
	}
}

func FuzzClip(f *testing.F) {
	f.Add("héllo wörld", 4, "…")
	f.Add(strings.Repeat("日", 100), 31, "\n…(truncated)")
	f.Fuzz(func(t *testing.T, s string, n int, mark string) {
		n %= 4096
		got := To(s, n)
		if len(got) > max(n, 0) || !strings.HasPrefix(s, got) {
			t.Fatalf("To(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("To(%q, %d) = %q splits a rune", s, n, got)
		}
		if n > 0 {
			if m := Marked(s, n, mark); len(m) > n {
				t.Fatalf("Marked(%q, %d, %q) = %q, longer than %d", s, n, mark, m, n)
			}
		}
	})
}
